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
// core the sender needs; and on a busy host (runtime/base/host_load.h: no core to spare) it
// stops spinning and sleeps, as its spin would take a core from the threads it waits for.
//
// Thread safety: SpinUntil is stateless; RecentActivity is safe for concurrent use.
#ifndef GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
#define GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <thread>

#include "runtime/base/host_load.h"
#include <sys/eventfd.h>

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

// How long the executor's reader keeps polling after the channel's last traffic: 20 x
// SpinTime() (1 ms on big hosts). A synchronous client's next request follows a reply by
// the client's whole cycle, which for large ops was 0.4-0.5 ms on the H200 host (gRPC's and
// the client's threads wake from their own sleep); a reader asleep by then costs the next
// request 40-70 us to wake (measured there, "Where a large synchronous op's time goes").
inline std::chrono::microseconds ExecutorReaderPollTime() { return 20 * SpinTime(); }

// A thread waiting for device work it knows to be long (a wait's reply) may spin through it
// only while it holds one of a few slots: the others sleep after the usual spin. A slot costs
// a core for as long as the work runs, as a CUDA context's own synchronous waits do;
// max(1, cores / 8) slots on hosts that spin at all (2 on 16 cores), none on small hosts.
class SpinSlots {
 public:
  explicit SpinSlots(int slots) : slots_(slots) {}
  // Takes a slot if one is free.
  bool TryAcquire() {
    int used = used_.load(std::memory_order_relaxed);
    while (used < slots_) {
      if (used_.compare_exchange_weak(used, used + 1, std::memory_order_acquire)) return true;
    }
    return false;
  }
  void Release() { used_.fetch_sub(1, std::memory_order_release); }

  // The process's slots for spinning through long device work (a wait's reply).
  static SpinSlots& ForWaits() {
    static SpinSlots slots(PerCores(8));
    return slots;
  }
  // The process's slots for spinning for an answer at all: max(1, cores / 4) (4 on 16
  // cores), so that gpukitd's waiting sessions cost it a few cores, not one each. (What the
  // whole host can spare, the clients' and the executor's spinning included, is HostLoad's
  // to say: on its own this cap did not change 8 synchronous sessions' 14-16k ops/s.)
  static SpinSlots& ForAnswers() {
    static SpinSlots slots(PerCores(4));
    return slots;
  }
  // One slot per `cores` cores (at least one) on hosts that spin at all, else none.
  static int PerCores(int cores) {
    return SpinTime().count() > 0
               ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / cores)
               : 0;
  }

 private:
  const int slots_;
  std::atomic<int> used_{0};
};

// The steady clock's nanoseconds (time since an arbitrary start: for differences).
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Spins until `ready()` or `budget` has passed (at once when it is 0), or until `load` has no
// core to spare (HostLoad); returns ready().
template <typename Ready>
bool SpinUntil(const Ready& ready, std::chrono::microseconds budget = SpinTime(),
               HostLoad& load = HostLoad::Process()) {
  if (ready()) return true;
  if (budget.count() == 0) return false;
  const auto end = std::chrono::steady_clock::now() + budget;
  while (load.SpareCore()) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= end) break;
  }
  return ready();
}

// A waiter's spin before it sleeps, for an answer another thread or process gives: for up to
// ChannelSpinTime() while it holds a SpinSlots::ForAnswers() slot, then, for `long_work` (the
// end of device work), up to `long_spin` more while it also holds a ForWaits() slot. Returns
// ready(); false: the caller sleeps until it is.
template <typename Ready>
bool SpinForAnswer(const Ready& ready, bool long_work, std::chrono::microseconds long_spin) {
  if (ready()) return true;
  if (!SpinSlots::ForAnswers().TryAcquire()) return false;
  bool done = SpinUntil(ready, ChannelSpinTime());
  if (!done && long_work && SpinSlots::ForWaits().TryAcquire()) {
    done = SpinUntil(ready, long_spin);
    SpinSlots::ForWaits().Release();
  }
  SpinSlots::ForAnswers().Release();
  return done;
}

// When a channel last carried a message either way, and how many answers its reader is
// owed: polling pays while traffic is recent (a synchronous client's next call) or an answer
// is owed (a reply to a wait comes when the device's work ends, however long it runs),
// sleeping once it has been quiet for the window with nothing owed. With a bell, a reader
// that fell asleep before an answer became owed is woken by Ring (an eventfd it sleeps on
// beside its socket), so it polls for the answer instead of paying a wake-up when the answer
// comes: the ring's wake-up falls while the device works. Only a channel whose answers are
// made owed by other threads than its reader needs one (gpukitd's side).
class RecentActivity {
 public:
  // `owed` (if given, outliving this) counts the answers the reader is owed; `bell` (with
  // `owed`, and a window above 0) gives the reader a bell for Ring; `load` (outliving this)
  // says whether the host has a core to spare for polling.
  explicit RecentActivity(std::chrono::microseconds window = ChannelSpinTime(),
                          const std::atomic<int>* owed = nullptr, bool bell = false,
                          HostLoad& load = HostLoad::Process())
      : window_ns_(std::chrono::nanoseconds(window).count()),
        owed_(owed),
        load_(load),
        bell_(bell && owed != nullptr && window_ns_ > 0 ? ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
                                                        : -1) {}
  ~RecentActivity() {
    if (bell_ >= 0) ::close(bell_);
  }
  RecentActivity(const RecentActivity&) = delete;
  RecentActivity& operator=(const RecentActivity&) = delete;

  void Touch() { last_ns_.store(SteadyNowNs(), std::memory_order_relaxed); }

  // Whether the channel has been quiet for `quiet` (nothing owed, no Touch since); if so it
  // counts as touched now, so that of several threads asking at once one gets true.
  bool ClaimQuiet(std::chrono::microseconds quiet) {
    if (owed_ != nullptr && owed_->load(std::memory_order_relaxed) > 0) return false;
    const int64_t now = SteadyNowNs();
    int64_t last = last_ns_.load(std::memory_order_relaxed);
    return now - last >= std::chrono::nanoseconds(quiet).count() &&
           last_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed);
  }

  // Wakes the reader if it sleeps (call after making an answer owed); a write to an eventfd
  // then, nothing while it polls. Safe from any thread.
  void Ring() {
    if (bell_ < 0 || !sleeping_.load(std::memory_order_seq_cst)) return;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(bell_, &one, sizeof(one));
  }

  // The reader's sleep: returns once `socket` is readable (or closed) or the bell rang, or at
  // once when Recent() holds after all. The caller then receives without waiting, and sleeps
  // again if nothing came. Without a bell it returns at once (the caller's receive waits).
  void SleepUntilReadable(int socket) const {
    if (bell_ < 0) return;
    sleeping_.store(true, std::memory_order_seq_cst);
    if (!Recent()) {  // an answer made owed before the flag was seen rings nothing: look again
      pollfd fds[2] = {{socket, POLLIN, 0}, {bell_, POLLIN, 0}};
      ::poll(fds, 2, -1);  // EINTR: the caller looks again
    }
    sleeping_.store(false, std::memory_order_seq_cst);
    uint64_t rung = 0;
    [[maybe_unused]] const ssize_t n = ::read(bell_, &rung, sizeof(rung));
  }
  bool has_bell() const { return bell_ >= 0; }
  // Whether an answer is owed or the last Touch was less than the window ago (never with a
  // window of 0, as on small hosts; never before the first Touch with nothing owed), and the
  // host has a core to spare for polling (HostLoad).
  bool Recent() const {
    if (window_ns_ <= 0) return false;
    return ((owed_ != nullptr && owed_->load(std::memory_order_relaxed) > 0) ||
            SteadyNowNs() - last_ns_.load(std::memory_order_relaxed) < window_ns_) &&
           load_.SpareCore();
  }

 private:
  const int64_t window_ns_;
  std::atomic<int64_t> last_ns_{std::numeric_limits<int64_t>::min() / 2};
  const std::atomic<int>* const owed_;
  HostLoad& load_;
  const int bell_;
  mutable std::atomic<bool> sleeping_{false};
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_SPIN_WAIT_H_
