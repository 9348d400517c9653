// SpinUntil: a short busy wait before a thread of the executor channel sleeps.
//
// A request through the device executor crosses threads several times (gpukitd's caller ->
// the executor's reader -> the stream's thread -> its completion thread -> gpukitd's reader
// -> the caller); each crossing that wakes a sleeping thread costs a futex wake-up, several
// microseconds on an idle host and tens on a loaded one. Where the host has cores to spare
// (8 or more), a thread that expects its next message within microseconds spins for up to
// kSpin first; on small hosts (CI's two cores) it sleeps at once, as spinning would take the
// core the sender needs.
//
// Thread safety: stateless.
#ifndef GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
#define GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_

#include <chrono>
#include <thread>

namespace gpukit {

inline bool HostHasCoresToSpin() {
  static const bool spin = std::thread::hardware_concurrency() >= 8;
  return spin;
}

// Spins until `ready()` or about 50 us have passed (at once on small hosts); returns ready().
template <typename Ready>
bool SpinUntil(const Ready& ready) {
  if (ready()) return true;
  if (!HostHasCoresToSpin()) return false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
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
