#include "tracker/lease_queue.h"

#include <algorithm>

namespace tf::farm {

void LeaseQueue::push(uint64_t id, const std::string& user, int priority) {
  Level& l = levels_[priority];
  auto& q = l.per_user[user];
  if (q.empty()) l.turn.push_back(user);
  q.push_back(id);
  where_[id] = {priority, user};
}

bool LeaseQueue::remove(uint64_t id) {
  auto it = where_.find(id);
  if (it == where_.end()) return false;
  auto [priority, user] = it->second;
  where_.erase(it);
  Level& l = levels_[priority];
  auto& q = l.per_user[user];
  q.erase(std::find(q.begin(), q.end(), id));
  if (q.empty()) {
    l.per_user.erase(user);
    l.turn.erase(std::find(l.turn.begin(), l.turn.end(), user));
  }
  if (l.turn.empty()) levels_.erase(priority);
  return true;
}

std::optional<uint64_t> LeaseQueue::pop() {
  if (levels_.empty()) return std::nullopt;
  auto level = levels_.begin();
  Level& l = level->second;
  std::string user = l.turn.front();
  l.turn.pop_front();
  auto& q = l.per_user[user];
  uint64_t id = q.front();
  q.pop_front();
  if (q.empty()) {
    l.per_user.erase(user);
  } else {
    l.turn.push_back(user);  // the user's next request waits for the others' turns
  }
  if (l.turn.empty()) levels_.erase(level);
  where_.erase(id);
  return id;
}

}  // namespace tf::farm
