// The waiting line for boards of one key.
//
// Higher priority first. Within a priority, users take turns (round robin), so one user's
// 10,000 requests do not starve another user's one; each user's own requests are served in
// the order they came (FIFO). Removal by id (a cancelled or timed-out request) is exact.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace tf::farm {

class LeaseQueue {
 public:
  void push(uint64_t id, const std::string& user, int priority);
  // Removes a waiting request; false when it is not waiting.
  bool remove(uint64_t id);
  // The request to serve next, removed from the queue.
  std::optional<uint64_t> pop();
  size_t size() const { return where_.size(); }
  bool empty() const { return where_.empty(); }

 private:
  struct Level {
    std::map<std::string, std::deque<uint64_t>> per_user;
    std::deque<std::string> turn;  // users with waiting requests, next to serve first
  };
  std::map<int, Level, std::greater<int>> levels_;
  std::map<uint64_t, std::pair<int, std::string>> where_;  // id -> (priority, user)
};

}  // namespace tf::farm
