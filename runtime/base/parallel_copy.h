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
// (about 0.2 ms of copying even at 20 GB/s). Threads are not pooled.
//
// Thread safety: thread-safe; each call uses threads of its own.
#ifndef GPUKIT_RUNTIME_BASE_PARALLEL_COPY_H_
#define GPUKIT_RUNTIME_BASE_PARALLEL_COPY_H_

#include <cstdint>

namespace gpukit {

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

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_PARALLEL_COPY_H_
