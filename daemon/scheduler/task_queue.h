// TaskQueue: one partition's waiting tasks in the order they should run: QoS class first
// (Guaranteed, Burstable, BestEffort), then the client's priority (higher first), then
// arrival (earlier first).
//
//   TaskQueue q;
//   q.Push({QosClass::kBurstable, /*priority=*/0, /*seq=*/7}, task_id);
//   while (!q.empty() && CanRun(q.front())) Admit(q.Pop());
//
// Push, Pop and Remove cost O(log n). Thread safety: none; the owner locks.
#ifndef GPUKIT_DAEMON_SCHEDULER_TASK_QUEUE_H_
#define GPUKIT_DAEMON_SCHEDULER_TASK_QUEUE_H_

#include <cstdint>
#include <set>

#include "daemon/scheduler/qos.h"

namespace gpukit {

struct QueueKey {
  QosClass qos = QosClass::kBestEffort;
  int priority = 0;
  uint64_t seq = 0;  // arrival order, unique per scheduler

  friend bool operator<(const QueueKey& a, const QueueKey& b) {
    if (a.qos != b.qos) return a.qos < b.qos;
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.seq < b.seq;
  }
};

class TaskQueue {
 public:
  struct Entry {
    QueueKey key;
    uint64_t task_id = 0;
    friend bool operator<(const Entry& a, const Entry& b) { return a.key < b.key; }
  };

  void Push(const QueueKey& key, uint64_t task_id) { entries_.insert({key, task_id}); }
  // Requires !empty().
  const Entry& front() const { return *entries_.begin(); }
  Entry Pop() {
    Entry e = *entries_.begin();
    entries_.erase(entries_.begin());
    return e;
  }
  // Removes the entry with `key`; false if absent.
  bool Remove(const QueueKey& key) { return entries_.erase({key, 0}) > 0; }
  bool empty() const { return entries_.empty(); }
  int size() const { return static_cast<int>(entries_.size()); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::set<Entry> entries_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_TASK_QUEUE_H_
