// SpinUntil and RecentActivity: short busy waits before a thread of the executor channel
// sleeps.
//
// A request through the device executor crosses threads and processes several times
// (gpukitd's caller -> the executor's reader -> gpukitd's reader -> the caller, and the
// streams' threads for work that waits); each crossing that wakes a sleeping thread costs a
// wake-up, 5 to 20 microseconds on an idle host (measured per hop on the H200 host: see
// docs/benchmarks.md, "Where a synchronous RunOp's time goes"). Where the host has cores to
// spare (8 or more), a thread that expects its next message within microseconds spins for a
// while first; on small hosts (CI's two cores) it sleeps at once, as spinning would take the
// core the sender needs.
//
// Thread safety: SpinUntil is stateless; RecentActivity is safe for concurrent use.
#ifndef GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
#define GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <thread>

namespace gpukit {

// How long a thread spins for a hand-off from another thread of its process: 50 us on hosts
// with 8 or more cores, else 0; the environment variable GPUKIT_EXECUTOR_SPIN_US overrides it
// (for measurements; gpukitd passes its environment to the executors).
inline std::chrono::microseconds SpinTime() {
  static const std::chrono::microseconds spin = [] {
    if (const char* text = std::getenv("GPUKIT_EXECUTOR_SPIN_US")) {
      return std::chrono::microseconds(std::max(0L, std::atol(text)));
    }
    return std::chrono::microseconds(std::thread::hardware_concurrency() >= 8 ? 50 : 0);
  }();
  return spin;
}

// How long a channel's reader keeps polling after the channel's last traffic, and a waiter
// spins for an answer from the other process: 4 x SpinTime() (200 us on big hosts), which
// covers a synchronous client's whole cycle (the reply, the client's next call through gRPC,
// gpukitd's work on it) so the next message finds the reader awake. The cost is a core per
// busy channel while traffic keeps coming, none once it has been quiet for that long.
inline std::chrono::microseconds ChannelSpinTime() { return 4 * SpinTime(); }

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Spins until `ready()` or `budget` has passed (at once when it is 0); returns ready().
template <typename Ready>
bool SpinUntil(const Ready& ready, std::chrono::microseconds budget = SpinTime()) {
  if (ready()) return true;
  if (budget.count() == 0) return false;
  const auto end = std::chrono::steady_clock::now() + budget;
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
  } while (std::chrono::steady_clock::now() < end);
  return ready();
}

// When a channel last carried a message either way, for its reader: polling pays while
// traffic is recent (a reply is due, or a synchronous client's next call), sleeping once it
// has been quiet for ChannelSpinTime().
class RecentActivity {
 public:
  explicit RecentActivity(std::chrono::microseconds window = ChannelSpinTime())
      : window_ns_(std::chrono::nanoseconds(window).count()) {}
  void Touch() { last_ns_.store(NowNs(), std::memory_order_relaxed); }
  // Whether the last Touch was less than the window ago (never with a window of 0, as on
  // small hosts; never before the first Touch).
  bool Recent() const {
    return window_ns_ > 0 && NowNs() - last_ns_.load(std::memory_order_relaxed) < window_ns_;
  }

 private:
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  const int64_t window_ns_;
  std::atomic<int64_t> last_ns_{std::numeric_limits<int64_t>::min() / 2};
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
