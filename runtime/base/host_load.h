// HostLoad: whether the host has a core to spare for a thread that would spin rather than
// sleep while it waits.
//
// gpukitd, its executors and the clients poll for the next message of a channel and spin for
// answers (runtime/executor/spin_wait.h, the client's submit socket): a spinning thread saves
// its own wake-up, but only while it takes a core no other thread needs. With many sessions
// at once the spinners alone filled the host (8 synchronous sessions: 8 clients, their
// waiters in gpukitd, the executor's readers and stream threads), the threads that do the
// work they wait for queued for cores, and the sessions ran at 15k ops/s in all on a 16-core
// H200 host, against 34k with no spinning at all and 16k for one session alone.
// SpareCore() says whether to spin: while fewer threads are runnable on the host than half
// its cores (the rest left to threads that wake), read from /proc/loadavg's running count at
// most once a millisecond per process. Measured there: 8 sessions at 24-32k with half, 17-25k
// with three quarters, 14k without the check; one session alone alike with either.
//
//   if (HostLoad::Process().SpareCore()) { ... spin a while ... }
//
// The count is the whole host's (a container limited to some of its cores sees all of the
// host's runnable threads, so spins less than it could). Where it cannot be read, spinning
// is allowed, as before. GPUKIT_SPIN_RUNNABLE_LIMIT=<n> sets the limit (0: spin whatever the
// load, as before this check; the tests that run a GPU host's polling on CI's two cores).
//
// Thread safety: SpareCore may be called from any thread; the reader must be thread-safe (a
// look that outlasts the interval may overlap the next one).
#ifndef GPUKIT_RUNTIME_BASE_HOST_LOAD_H_
#define GPUKIT_RUNTIME_BASE_HOST_LOAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/strings/string_view.h"

namespace gpukit {

class HostLoad {
 public:
  // `runnable`: the threads runnable on the host now (nullopt: cannot tell); `now_ns`: a
  // monotonic clock; `limit`: the runnable threads from which no core is spare (0: none is
  // ever too many).
  HostLoad(int limit, std::function<std::optional<int>()> runnable,
           std::function<int64_t()> now_ns);

  // Whether fewer threads than the limit were runnable at the last look (true when unknown);
  // looks again when the last look is 1 ms old.
  bool SpareCore();

  // This process's: a limit of half the cores it may run on (at least 1) or
  // GPUKIT_SPIN_RUNNABLE_LIMIT, /proc/loadavg, the steady clock.
  static HostLoad& Process();

  // The running count of /proc/loadavg's text ("0.51 0.42 0.30 3/812 4242" -> 3).
  static std::optional<int> ParseRunnable(absl::string_view loadavg);

  static constexpr int64_t kLookEveryNs = 1'000'000;

 private:
  const int limit_;
  const std::function<std::optional<int>()> runnable_;
  const std::function<int64_t()> now_ns_;
  std::atomic<int64_t> next_look_ns_{0};
  std::atomic<bool> spare_{true};
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_HOST_LOAD_H_
