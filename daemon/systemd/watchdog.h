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
//   std::unique_ptr<Watchdog> watchdog = Watchdog::Start(notifier, options);
//   ... serve ...
//   watchdog->Stop();
//
// Each ping may carry a STATUS= line (`status_line`), sent when it differs from the last.
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
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
  // Starts the thread; the first probe and ping happen at once. INVALID_ARGUMENT for a
  // non-positive interval or a missing probe.
  static absl::StatusOr<std::unique_ptr<Watchdog>> Start(ServiceNotifier& notifier,
                                                         WatchdogOptions options);
  ~Watchdog();  // Stop()

  // Stops the pings and joins the thread. Idempotent.
  void Stop();

 private:
  Watchdog(ServiceNotifier& notifier, WatchdogOptions options);
  void Loop();

  ServiceNotifier& notifier_;
  const WatchdogOptions options_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SYSTEMD_WATCHDOG_H_
