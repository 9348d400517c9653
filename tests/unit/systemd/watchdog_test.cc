// The watchdog feeds systemd only right after a healthy probe (daemon/systemd/watchdog.h).
#include "daemon/systemd/watchdog.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;

// Every event in order: "probe", and what was notified.
class Recorder final : public ServiceNotifier {
 public:
  void Notify(absl::string_view assignments) override { Add(std::string(assignments)); }
  void Add(std::string event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  // Waits (for events, not for a time) until `count` events have happened; returns the
  // first `count`.
  std::vector<std::string> WaitFor(size_t count) {
    absl::MutexLock lock(&mu_);
    wanted_ = count;
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Recorder* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
                               return r->events_.size() >= r->wanted_;
                             },
                             this),
                         absl::Seconds(30));
    return std::vector<std::string>(events_.begin(),
                                    events_.begin() + std::min(count, events_.size()));
  }
  size_t size() {
    absl::MutexLock lock(&mu_);
    return events_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  size_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(WatchdogTest, PingsOnlyAfterAHealthyProbe) {
  Recorder recorder;
  // Healthy, unhealthy twice, then healthy for good.
  int probes = 0;
  WatchdogOptions options;
  options.interval = absl::Milliseconds(2);
  options.probe = [&] {
    recorder.Add("probe");
    ++probes;
    return probes == 2 || probes == 3 ? absl::UnavailableError("stuck") : absl::OkStatus();
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, options));
  const std::vector<std::string> events = recorder.WaitFor(7);
  watchdog->Stop();
  EXPECT_THAT(events,
              ElementsAre("probe", "WATCHDOG=1", "probe", "probe", "probe", "WATCHDOG=1", "probe"));
}

TEST(WatchdogTest, ABlockedProbeStopsThePings) {
  Recorder recorder;
  absl::Notification release;
  int probes = 0;
  WatchdogOptions options;
  options.interval = absl::Milliseconds(2);
  options.probe = [&] {
    if (++probes == 2) {
      recorder.Add("blocked");
      release.WaitForNotification();  // a deadlock, until the test lets go
    }
    recorder.Add("probe");
    return absl::OkStatus();
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, options));
  // Nothing follows "blocked" while the probe is held: a ping needs the probe to return.
  EXPECT_THAT(recorder.WaitFor(3), ElementsAre("probe", "WATCHDOG=1", "blocked"));
  EXPECT_EQ(recorder.size(), 3u);
  release.Notify();
  EXPECT_THAT(recorder.WaitFor(5),
              ElementsAre("probe", "WATCHDOG=1", "blocked", "probe", "WATCHDOG=1"));
  watchdog->Stop();
}

TEST(WatchdogTest, SendsTheStatusLineWhenItChanges) {
  Recorder recorder;
  int calls = 0;
  WatchdogOptions options;
  options.interval = absl::Milliseconds(2);
  options.probe = [] { return absl::OkStatus(); };
  options.status_line = [&] { return ++calls < 3 ? std::string("1 session") : "2 sessions"; };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, options));
  const std::vector<std::string> events = recorder.WaitFor(4);
  watchdog->Stop();
  EXPECT_THAT(events, ElementsAre("WATCHDOG=1\nSTATUS=1 session", "WATCHDOG=1",
                                  "WATCHDOG=1\nSTATUS=2 sessions", "WATCHDOG=1"));
}

TEST(WatchdogTest, RefusesBadOptions) {
  Recorder recorder;
  WatchdogOptions options;
  options.probe = [] { return absl::OkStatus(); };
  EXPECT_THAT(Watchdog::Start(recorder, options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.interval = absl::Seconds(1);
  options.probe = nullptr;
  EXPECT_THAT(Watchdog::Start(recorder, options), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpukit
