#include "runtime/base/host_load.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace gpukit {

HostLoad::HostLoad(int limit, std::function<std::optional<int>()> runnable,
                   std::function<int64_t()> now_ns)
    : limit_(limit), runnable_(std::move(runnable)), now_ns_(std::move(now_ns)) {}

bool HostLoad::SpareCore() {
  if (limit_ <= 0) return true;
  const int64_t now = now_ns_();
  int64_t next = next_look_ns_.load(std::memory_order_relaxed);
  // One thread looks; the others go by the last look meanwhile.
  if (now >= next &&
      next_look_ns_.compare_exchange_strong(next, now + kLookEveryNs, std::memory_order_relaxed)) {
    const std::optional<int> runnable = runnable_();
    spare_.store(!runnable.has_value() || *runnable < limit_, std::memory_order_relaxed);
  }
  return spare_.load(std::memory_order_relaxed);
}

std::optional<int> HostLoad::ParseRunnable(absl::string_view loadavg) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(loadavg, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  if (fields.size() < 4) return std::nullopt;
  const size_t slash = fields[3].find('/');
  int running = 0;
  if (slash == absl::string_view::npos || !absl::SimpleAtoi(fields[3].substr(0, slash), &running) ||
      running < 0) {
    return std::nullopt;
  }
  return running;
}

HostLoad& HostLoad::Process() {
  static HostLoad* const load = [] {
    cpu_set_t set;
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    if (::sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
    const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);  // kept for the process
    auto runnable = [fd]() -> std::optional<int> {
      if (fd < 0) return std::nullopt;
      char text[128];
      const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
      if (n <= 0) return std::nullopt;
      return ParseRunnable(absl::string_view(text, static_cast<size_t>(n)));
    };
    auto now_ns = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    int limit = std::max(1, cores / 2);
    if (const char* text = std::getenv("GPUKIT_SPIN_RUNNABLE_LIMIT")) {
      int parsed = 0;
      if (absl::SimpleAtoi(text, &parsed) && parsed >= 0) limit = parsed;
    }
    return new HostLoad(limit, runnable, now_ns);
  }();
  return *load;
}

}  // namespace gpukit
