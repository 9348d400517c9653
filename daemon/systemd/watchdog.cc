#include "daemon/systemd/watchdog.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::StatusOr<std::unique_ptr<Watchdog>> Watchdog::Start(ServiceNotifier& notifier,
                                                          WatchdogOptions options) {
  if (options.interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watchdog interval = ", absl::FormatDuration(options.interval), " must be > 0"));
  }
  if (!options.probe) return absl::InvalidArgumentError("watchdog needs a probe");
  std::unique_ptr<Watchdog> watchdog(new Watchdog(notifier, std::move(options)));
  watchdog->thread_ = std::thread([w = watchdog.get()] { w->Loop(); });
  return watchdog;
}

Watchdog::Watchdog(ServiceNotifier& notifier, WatchdogOptions options)
    : notifier_(notifier), options_(std::move(options)) {}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Loop() {
  const absl::Duration period = options_.interval / 2;
  bool healthy = true;
  std::string last_status;
  do {
    const absl::Status health = options_.probe();
    if (!health.ok()) {
      if (healthy) {
        spdlog::error("watchdog: gpukitd is not healthy ({}); not telling systemd it is alive",
                      health.ToString());
      }
      healthy = false;
      continue;
    }
    if (!healthy) spdlog::info("watchdog: gpukitd is healthy again");
    healthy = true;
    std::string message = "WATCHDOG=1";
    if (options_.status_line) {
      std::string status = options_.status_line();
      if (!status.empty() && status != last_status) {
        absl::StrAppend(&message, "\nSTATUS=", status);
        last_status = std::move(status);
      }
    }
    notifier_.Notify(message);
  } while (!stop_.WaitForNotificationWithTimeout(period));
}

}  // namespace gpukit
