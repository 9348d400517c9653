// ServiceNotifier: what gpukitd tells the service manager that started it, in systemd's
// notify protocol (sd_notify(3)): READY=1 once it serves, STATUS= lines an operator reads in
// `systemctl status`, RELOADING=1 around a reload, STOPPING=1 when it shuts down, and
// WATCHDOG=1 keep-alives (see watchdog.h).
//
//   std::unique_ptr<ServiceNotifier> notifier = SystemdNotifier::Create();
//   notifier->Notify("READY=1\nSTATUS=serving on 1 address");
//
// SystemdNotifier sends through libsystemd's sd_notify to $NOTIFY_SOCKET; without that
// variable (gpukitd not started by systemd as Type=notify) every call does nothing, so a
// daemon run by hand behaves as before. Tests pass their own ServiceNotifier.
//
// Thread safety: Notify may be called from any thread.
#ifndef GPUKIT_DAEMON_SYSTEMD_SERVICE_NOTIFIER_H_
#define GPUKIT_DAEMON_SYSTEMD_SERVICE_NOTIFIER_H_

#include <memory>
#include <optional>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gpukit {

class ServiceNotifier {
 public:
  virtual ~ServiceNotifier() = default;
  // Sends newline-separated assignments ("READY=1\nSTATUS=..."). Never fails the caller: the
  // daemon serves whether or not a service manager listens; an error is logged at debug.
  // One datagram, a system call: cheap, but not for hot paths.
  virtual void Notify(absl::string_view assignments) = 0;
};

class SystemdNotifier final : public ServiceNotifier {
 public:
  static std::unique_ptr<SystemdNotifier> Create();
  void Notify(absl::string_view assignments) override;

  // The watchdog interval the service manager asks this process for ($WATCHDOG_USEC, when
  // $WATCHDOG_PID is unset or names this process: sd_watchdog_enabled(3)); nullopt when it
  // asks for none.
  static std::optional<absl::Duration> WatchdogInterval();

 private:
  SystemdNotifier() = default;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SYSTEMD_SERVICE_NOTIFIER_H_
