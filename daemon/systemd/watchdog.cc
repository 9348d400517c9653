#include "daemon/systemd/watchdog.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::StatusOr<std::unique_ptr<Watchdog>> Watchdog::Start(ServiceNotifier& notifier,
                                                          const Clock& clock,
                                                          WatchdogOptions options) {
  if (options.interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watchdog interval = ", absl::FormatDuration(options.interval), " must be > 0"));
  }
  if (!options.probe) return absl::InvalidArgumentError("watchdog needs a probe");
  std::unique_ptr<Watchdog> watchdog(new Watchdog(notifier, clock, std::move(options)));
  watchdog->thread_ = std::thread([w = watchdog.get()] { w->Loop(); });
  return watchdog;
}

Watchdog::Watchdog(ServiceNotifier& notifier, const Clock& clock, WatchdogOptions options)
    : notifier_(notifier), clock_(clock), options_(std::move(options)) {}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Loop() {
  const absl::Duration period = options_.interval / 2;
  while (true) {
    const absl::Time next = clock_.Now() + period;
    ProbeAndPing();
    if (clock_.AwaitUntil(mu_, absl::Condition(&stopping_), next)) return;
  }
}

void Watchdog::ProbeAndPing() {
  const absl::Status health = options_.probe();
  if (!health.ok()) {
    if (healthy_) {
      spdlog::error("watchdog: gpukitd is not healthy ({}); not telling systemd it is alive",
                    health.ToString());
    }
    healthy_ = false;
    return;
  }
  if (!healthy_) spdlog::info("watchdog: gpukitd is healthy again");
  healthy_ = true;
  std::string message = "WATCHDOG=1";
  if (options_.status_line) {
    std::string status = options_.status_line();
    if (!status.empty() && status != last_status_) {
      absl::StrAppend(&message, "\nSTATUS=", status);
      last_status_ = std::move(status);
    }
  }
  notifier_.Notify(message);
}

}  // namespace gpukit
