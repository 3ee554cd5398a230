// The tracker's waiting line: priority first, users take turns, FIFO per user.
#include <gtest/gtest.h>

#include "tracker/lease_queue.h"

namespace tf::farm {
namespace {

std::vector<uint64_t> drain(LeaseQueue& q) {
  std::vector<uint64_t> out;
  while (auto id = q.pop()) out.push_back(*id);
  return out;
}

TEST(LeaseQueue, PriorityFirstThenFifo) {
  LeaseQueue q;
  q.push(1, "a", 0);
  q.push(2, "a", 0);
  q.push(3, "a", 7);
  q.push(4, "a", 3);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{3, 4, 1, 2}));
  EXPECT_TRUE(q.empty());
}

TEST(LeaseQueue, UsersTakeTurnsWithinAPriority) {
  LeaseQueue q;
  for (uint64_t i = 0; i < 10000; ++i) q.push(i, "greedy", 0);
  q.push(99999, "modest", 0);
  EXPECT_EQ(*q.pop(), 0u);
  EXPECT_EQ(*q.pop(), 99999u);  // the one request of another user is second, not 10001st
  EXPECT_EQ(*q.pop(), 1u);
  EXPECT_EQ(q.size(), 9998u);
}

TEST(LeaseQueue, ThreeUsersRoundRobin) {
  LeaseQueue q;
  q.push(1, "a", 0);
  q.push(2, "a", 0);
  q.push(3, "b", 0);
  q.push(4, "c", 0);
  q.push(5, "b", 0);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{1, 3, 4, 2, 5}));
}

TEST(LeaseQueue, RemoveIsExact) {
  LeaseQueue q;
  q.push(1, "a", 0);
  q.push(2, "b", 0);
  q.push(3, "a", 5);
  EXPECT_TRUE(q.remove(3));
  EXPECT_FALSE(q.remove(3));
  EXPECT_TRUE(q.remove(1));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{2}));
  EXPECT_FALSE(q.remove(42));
}

}  // namespace
}  // namespace tf::farm
