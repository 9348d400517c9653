#include "daemon/systemd/service_notifier.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "spdlog/spdlog.h"
#include <systemd/sd-daemon.h>

namespace gpukit {

std::unique_ptr<SystemdNotifier> SystemdNotifier::Create() {
  return std::unique_ptr<SystemdNotifier>(new SystemdNotifier());
}

void SystemdNotifier::Notify(absl::string_view assignments) {
  // unset_environment = 0: the variables stay for the next call (and the watchdog's).
  const int sent = sd_notify(0, std::string(assignments).c_str());
  if (sent < 0) {
    spdlog::debug("sd_notify(\"{}\"): {}", std::string(assignments), std::strerror(-sent));
  }
}

std::optional<absl::Duration> SystemdNotifier::WatchdogInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return absl::Microseconds(static_cast<int64_t>(usec));
}

}  // namespace gpukit
