// WorkerPool: threads for the blocking part of stream reactions, so that gRPC's callback
// threads never wait on it.
//
// A stream reaction (array_streams.h) runs on one of gRPC's callback threads, of which there
// are few (two on a 2-core host) and which every stream and the health service share. A
// chunk's write or read waits for admission in its partition's queue, which may take long
// when the partition is busy: measured on the 2-core build machine, two uploads whose chunks
// waited there stalled every other stream of the daemon. So a reaction hands that work to
// this pool and returns at once; the work, when done, resumes the stream (StartRead,
// StartWrite or Finish, which gRPC allows from any thread).
//
// Threads start on demand, when work is scheduled and no thread is idle, up to max_threads;
// then work waits in FIFO order. A thread that found no work for `idle_timeout` ends, so
// the pool holds threads only while chunks are being transferred, never one per open
// stream: an idle stream has no work here.
//
//   WorkerPool pool(/*max_threads=*/256, /*idle_timeout=*/absl::Seconds(2));
//   pool.Schedule([reactor] { reactor->WriteChunk(); });
//
// Thread safety: Schedule may be called from any thread. Destruction runs the work still
// queued, then joins the threads; nothing may schedule during or after it.
#ifndef GPUKIT_DAEMON_SERVICE_WORKER_POOL_H_
#define GPUKIT_DAEMON_SERVICE_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpukit::service {

class WorkerPool {
 public:
  // `max_threads` >= 1.
  WorkerPool(int max_threads, absl::Duration idle_timeout);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  // Runs `work` on a pool thread: an idle one, a new one while there are fewer than
  // max_threads, else the first to become free. Never blocks (beyond a thread's start).
  void Schedule(std::function<void()> work);
  // Schedule, unless every thread the pool may have is busy with earlier work (none idle,
  // max_threads running): then false, and `work` is dropped unrun. For callers that refuse
  // rather than queue (a unary call answered RESOURCE_EXHAUSTED).
  bool TrySchedule(std::function<void()> work);

  // Threads running now (busy or idle).
  int threads() const;

 private:
  void Loop();
  void PushLocked(std::function<void()> work) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the threads that ended; called without mu_.
  void JoinEnded();

  const int max_threads_;
  const absl::Duration idle_timeout_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads waiting for work
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> ended_ ABSL_GUARDED_BY(mu_);  // to join
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_WORKER_POOL_H_
