// SpinUntil: a short busy wait before a thread of the executor channel sleeps.
//
// A request through the device executor crosses threads several times (gpukitd's caller ->
// the executor's reader -> the stream's thread -> its completion thread -> gpukitd's reader
// -> the caller); each crossing that wakes a sleeping thread costs a futex wake-up, several
// microseconds on an idle host and tens on a loaded one. Where the host has cores to spare
// (8 or more), a thread that expects its next message within microseconds spins for up to
// SpinTime() first; on small hosts (CI's two cores) it sleeps at once, as spinning would take the
// core the sender needs.
//
// Thread safety: stateless.
#ifndef GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
#define GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace gpukit {

// How long to spin: 50 us on hosts with 8 or more cores, else 0; the environment variable
// GPUKIT_EXECUTOR_SPIN_US overrides it (for measurements; gpukitd passes its environment to
// the executors).
inline std::chrono::microseconds SpinTime() {
  static const std::chrono::microseconds spin = [] {
    if (const char* text = std::getenv("GPUKIT_EXECUTOR_SPIN_US")) {
      return std::chrono::microseconds(std::max(0L, std::atol(text)));
    }
    return std::chrono::microseconds(std::thread::hardware_concurrency() >= 8 ? 50 : 0);
  }();
  return spin;
}

// Spins until `ready()` or SpinTime() has passed (at once on small hosts); returns ready().
template <typename Ready>
bool SpinUntil(const Ready& ready) {
  if (ready()) return true;
  if (SpinTime().count() == 0) return false;
  const auto end = std::chrono::steady_clock::now() + SpinTime();
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  } while (std::chrono::steady_clock::now() < end);
  return ready();
}

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
