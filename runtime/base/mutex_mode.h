// UseFastMutexes: turns off absl::Mutex's lock-order (deadlock) check for the process.
//
// Debian's abseil is built without NDEBUG, so its Mutex checks lock order on every Lock and
// Unlock: each one takes a process-wide lock around a graph of every mutex ever held. That
// lock serializes every thread's mutexes (measured on the build machine: 2 threads locking
// their own mutexes 1M times each took 201 ms with the check, 7.7 ms without) and showed in
// gpukitd's and the executor's profiles on the GPU host (docs/benchmarks.md). gpukitd, its
// executors and helpers, the benches and the Python module call this first thing; a C++
// program using libgpukit decides for itself (absl::SetMutexDeadlockDetectionMode).
//
// GPUKIT_MUTEX_DEADLOCK_CHECK=1 keeps the check (it aborts the process on a lock-order
// cycle, naming the locks): ctest's tests, tests/python and tests/run_all.sh set it, so the
// suites run every daemon they start with it.
//
// Thread safety: call before the process starts threads where it can (a main). The mode is
// one atomic, so a later call (the Python module's import) is safe too: mutexes held across
// the switch only leave the check's bookkeeping stale, which matters only if it is turned
// on again.
#ifndef GPUKIT_RUNTIME_BASE_MUTEX_MODE_H_
#define GPUKIT_RUNTIME_BASE_MUTEX_MODE_H_

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace gpukit {

inline void UseFastMutexes() {
  const char* keep = std::getenv("GPUKIT_MUTEX_DEADLOCK_CHECK");
  absl::SetMutexDeadlockDetectionMode(keep != nullptr && std::strcmp(keep, "1") == 0
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
}

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_MUTEX_MODE_H_
