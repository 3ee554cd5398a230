#include "tuner/task_scheduler.h"

#include <cmath>

namespace tf {

double task_priority(const TaskHistory& t, const SchedulerOptions& o) {
  size_t n = t.trials.size();
  if (n == 0) return std::numeric_limits<double>::infinity();
  double g = t.best_s.back();
  if (!std::isfinite(g)) {
    // Nothing correct yet: worth a few rounds, then it waits behind every working workload.
    return n < 3 ? std::numeric_limits<double>::infinity() : -1;
  }
  double spent = std::max(1, t.trials.back());
  double forward = -g / spent;  // as if the next trials improved as much as the average one did
  double backward = forward;
  size_t k = n - 1 > static_cast<size_t>(o.window) ? n - 1 - static_cast<size_t>(o.window) : 0;
  if (t.trials[n - 1] > t.trials[k] && std::isfinite(t.best_s[k])) {
    backward = (g - t.best_s[k]) / (t.trials[n - 1] - t.trials[k]);
  }
  return -t.weight * (o.alpha * backward + (1 - o.alpha) * forward);
}

int pick_task(const std::vector<TaskHistory>& tasks, std::mt19937_64& rng, const SchedulerOptions& o) {
  std::vector<int> live;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i].over) live.push_back(static_cast<int>(i));
  }
  if (live.empty()) return -1;
  // Warm-up: a round each first, workloads that know nothing yet before resumed ones.
  for (bool resumed : {false, true}) {
    for (int i : live) {
      if (tasks[i].trials.empty() && tasks[i].resumed == resumed) return i;
    }
  }
  if (std::uniform_real_distribution<double>(0, 1)(rng) < o.epsilon) {
    return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)];
  }
  int best = live[0];
  double best_p = task_priority(tasks[best], o);
  for (int i : live) {
    double p = task_priority(tasks[i], o);
    if (p > best_p || (p == best_p && tasks[i].trials.back() < tasks[best].trials.back())) {
      best = i;
      best_p = p;
    }
  }
  return best;
}

}  // namespace tf
