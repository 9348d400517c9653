// ParallelCopy: a memcpy of a large block split across a few threads.
//
// One thread copies about 10 GB/s on the servers gpukit runs on, well below what their
// memory system gives several threads. Bulk host copies (the CPU backend's copies between
// host shared memory and arrays, the client's copies into and out of its staging region)
// use ParallelCopy: it cuts the block into pieces of options.min_piece_bytes (rounded up to
// 4 KiB), starts one thread per whole piece up to a few, and the calling thread and those
// take pieces one at a time until none are left; it returns when all are copied. Taking
// pieces as they go, rather than one equal share each, keeps a thread that starts late or
// loses its core (a loaded host) from holding up the whole copy. A copy smaller than two
// pieces is one memcpy on the calling thread, with no thread started.
//
//   ParallelCopy(staging, data, bytes);                // the defaults below
//   const int threads = ParallelCopyThreads(bytes);   // how many it uses, caller included
//
// The two ranges must not overlap (as for memcpy; overlapping ranges give undefined
// contents): use std::memmove for those. A copy of 0 bytes does nothing and may name null
// pointers.
//
// Cost: starting a thread costs some 20 to 50 us, which is why pieces are at least 4 MiB
// (about 0.2 ms of copying even at 20 GB/s). ParallelCopy does not pool threads; a caller
// that copies often enough for that cost to show (the CUDA transfer engine, which copies a
// 32 MiB staging chunk every few milliseconds) keeps a ParallelCopyWorkers, whose threads
// wait for copies and take pieces the same way:
//
//   ParallelCopyWorkers workers(/*helper_threads=*/7);
//   workers.Copy(staging, data, bytes, {.min_piece_bytes = 256 << 10});
//
// Thread safety: ParallelCopy is thread-safe; each call uses threads of its own.
// ParallelCopyWorkers::Copy is thread-safe; its calls run one at a time.
#ifndef GPUKIT_RUNTIME_BASE_PARALLEL_COPY_H_
#define GPUKIT_RUNTIME_BASE_PARALLEL_COPY_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpukit {

namespace parallel_copy_internal {
struct CopyJob;  // one copy's pieces (parallel_copy.cc)
}  // namespace parallel_copy_internal

// The most threads a copy uses by default, the caller's included. Measured on a 16-core
// host (docs/benchmarks.md): gpukitd's 256 MiB copies went at about 10 GB/s on 1 thread,
// 11 on 2, 20 on 4 and 32 on 8. More would take cores from gpukitd's other clients.
inline constexpr int kParallelCopyDefaultMaxThreads = 8;

struct ParallelCopyOptions {
  // The piece threads take one at a time (bytes, > 0; rounded up to 4 KiB); also the least
  // data per thread started.
  int64_t min_piece_bytes = int64_t{4} << 20;
  // The most threads per copy, the caller's included; <= 0: the smaller of
  // std::thread::hardware_concurrency() and kParallelCopyDefaultMaxThreads.
  int max_threads = 0;
};

// How many threads a copy of `bytes` uses, the caller's included: one per whole
// min_piece_bytes, at most max_threads, at least 1.
int ParallelCopyThreads(int64_t bytes, const ParallelCopyOptions& options = {});

// Copies `bytes` (>= 0) from `src` to `dst`, which must not overlap.
void ParallelCopy(void* dst, const void* src, int64_t bytes,
                  const ParallelCopyOptions& options = {});

// Threads kept for ParallelCopy's work: the same copy (pieces taken one at a time by the
// calling thread and helpers), with helpers that are started once, at construction, and
// wait on a mutex between copies instead of being started per copy.
class ParallelCopyWorkers {
 public:
  // Starts `helper_threads` (< 0 counts as 0) threads. A system out of threads starts fewer
  // (std::thread's exception is caught): the copies then use those there are.
  explicit ParallelCopyWorkers(int helper_threads);
  // Stops and joins the threads; no Copy may be running.
  ~ParallelCopyWorkers();
  ParallelCopyWorkers(const ParallelCopyWorkers&) = delete;
  ParallelCopyWorkers& operator=(const ParallelCopyWorkers&) = delete;

  // As ParallelCopy(dst, src, bytes, options), with at most helper_threads() helpers: the
  // threads used, the caller's included, are ParallelCopyThreads(bytes, options) capped at
  // helper_threads() + 1. Returns when every byte is copied. Calls run one at a time (a
  // second waits for the first).
  void Copy(void* dst, const void* src, int64_t bytes, const ParallelCopyOptions& options = {});

  int helper_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkLoop(int index);

  absl::Mutex copy_mu_;  // one Copy at a time
  absl::Mutex mu_ ABSL_ACQUIRED_AFTER(copy_mu_);
  // The copy in progress (on the caller's stack).
  parallel_copy_internal::CopyJob* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped per copy that uses helpers
  int helpers_wanted_ ABSL_GUARDED_BY(mu_) = 0;   // workers with index below this join in
  int pending_ ABSL_GUARDED_BY(mu_) = 0;          // wanted helpers not finished yet
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // written by the constructor only
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_PARALLEL_COPY_H_
