// Watchdog: keeps the service manager's watchdog fed (WATCHDOG=1) while gpukitd is healthy,
// so that systemd restarts a gpukitd that is stuck (WatchdogSec= in the unit).
//
// A thread sends WATCHDOG=1 every half interval, but only right after `probe` returned OK.
// The probe is meant to do what a stuck daemon would not: gpukitd's probe (main.cc) takes the
// locks every request takes (Core::CheckLiveness) and answers a gRPC health check through the
// server (Server::CheckServing). A deadlock makes the probe block, so the pings stop and
// systemd, after the interval, kills and restarts gpukitd; a probe that returns an error
// skips its ping (logged once, and once more when pings resume). A probe that is slow but
// returns within the interval keeps the daemon alive.
//
//   WatchdogOptions options;
//   options.interval = *SystemdNotifier::WatchdogInterval();
//   options.probe = [&] { return CheckHealth(); };
//   std::unique_ptr<Watchdog> watchdog = Watchdog::Start(notifier, clock, options);
//   ... serve ...
//   watchdog->Stop();
//
// Each ping may carry a STATUS= line (`status_line`), sent when it differs from the last.
//
// The half intervals are measured on the injected Clock (daemon/scheduler/clock.h), from the
// start of one probe to the start of the next, so a slow probe does not stretch the period;
// tests drive it with FakeClock.
//
// Thread safety: Start and Stop from one thread. The probe and status_line run on the
// watchdog's thread. Stop waits for a probe in progress: a probe blocked forever blocks Stop
// (systemd's stop timeout then ends the process, as it would end any stuck daemon).
#ifndef GPUKIT_DAEMON_SYSTEMD_WATCHDOG_H_
#define GPUKIT_DAEMON_SYSTEMD_WATCHDOG_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "daemon/systemd/service_notifier.h"

namespace gpukit {

struct WatchdogOptions {
  // The service manager's interval ($WATCHDOG_USEC); pings go every half of it. > 0.
  absl::Duration interval;
  // OK when the daemon is healthy. Required.
  std::function<absl::Status()> probe;
  // A STATUS= line to send with a ping ("serving on 1 address; 3 sessions"); may be empty.
  std::function<std::string()> status_line;
};

class Watchdog {
 public:
  // Starts the thread; the first probe and ping happen at once, the next ones each half
  // interval later on `clock` (which, like `notifier`, must outlive the watchdog).
  // INVALID_ARGUMENT for a non-positive interval or a missing probe.
  static absl::StatusOr<std::unique_ptr<Watchdog>> Start(ServiceNotifier& notifier,
                                                         const Clock& clock,
                                                         WatchdogOptions options);
  ~Watchdog();  // Stop()

  // Stops the pings and joins the thread. Idempotent.
  void Stop();

 private:
  Watchdog(ServiceNotifier& notifier, const Clock& clock, WatchdogOptions options);
  void Loop();
  // One probe, and the ping when it is healthy.
  void ProbeAndPing();

  ServiceNotifier& notifier_;
  const Clock& clock_;
  const WatchdogOptions options_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  // The watchdog thread's own.
  bool healthy_ = true;
  std::string last_status_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SYSTEMD_WATCHDOG_H_
