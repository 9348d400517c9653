// The watchdog feeds systemd only right after a healthy probe (daemon/systemd/watchdog.h),
// every half interval of its injected clock (a FakeClock here).
#include "daemon/systemd/watchdog.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/scheduler/clock.h"
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

// Time moves only when a test advances the fake clock, a half interval at a time, after the
// events of the cycle before have happened: each cycle's events are then exactly those listed.
constexpr absl::Duration kInterval = absl::Hours(1);
constexpr absl::Duration kHalf = absl::Minutes(30);  // the pings' period

TEST(WatchdogTest, PingsOnlyAfterAHealthyProbe) {
  FakeClock clock;
  Recorder recorder;
  // Healthy, unhealthy twice, then healthy for good.
  int probes = 0;
  WatchdogOptions options;
  options.interval = kInterval;
  options.probe = [&] {
    recorder.Add("probe");
    ++probes;
    return probes == 2 || probes == 3 ? absl::UnavailableError("stuck") : absl::OkStatus();
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, clock, options));
  EXPECT_THAT(recorder.WaitFor(2), ElementsAre("probe", "WATCHDOG=1"));
  for (size_t events : {3, 4, 6, 7}) {
    clock.Advance(kHalf);
    recorder.WaitFor(events);
  }
  const std::vector<std::string> events = recorder.WaitFor(7);
  watchdog->Stop();
  EXPECT_THAT(events,
              ElementsAre("probe", "WATCHDOG=1", "probe", "probe", "probe", "WATCHDOG=1", "probe"));
}

TEST(WatchdogTest, WaitsOnItsClockNotOnRealTime) {
  FakeClock clock;
  Recorder recorder;
  const absl::Time start = clock.Now();
  std::vector<absl::Duration> probed_at;  // written by the watchdog's thread before each event
  WatchdogOptions options;
  options.interval = kInterval;
  options.probe = [&] {
    probed_at.push_back(clock.Now() - start);
    recorder.Add("probe");
    return absl::OkStatus();
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, clock, options));
  ASSERT_THAT(recorder.WaitFor(2), ElementsAre("probe", "WATCHDOG=1"));
  // Short of the half interval: no probe. Reaching it: the next one, at that time exactly. A
  // watchdog that woke early would probe at 29 minutes; one that waited on real time would
  // not probe again within the test's 30 s bound at all.
  clock.Advance(kHalf - absl::Minutes(1));
  clock.Advance(absl::Minutes(1));
  EXPECT_THAT(recorder.WaitFor(4), ElementsAre("probe", "WATCHDOG=1", "probe", "WATCHDOG=1"));
  clock.Advance(kHalf);
  EXPECT_EQ(recorder.WaitFor(6).size(), 6u);
  watchdog->Stop();  // ends the wait for the next half interval without time passing
  EXPECT_THAT(probed_at, ElementsAre(absl::ZeroDuration(), kHalf, kInterval));
}

TEST(WatchdogTest, ABlockedProbeStopsThePings) {
  FakeClock clock;
  Recorder recorder;
  absl::Notification release;
  int probes = 0;
  WatchdogOptions options;
  options.interval = kInterval;
  options.probe = [&] {
    if (++probes == 2) {
      recorder.Add("blocked");
      release.WaitForNotification();  // a deadlock, until the test lets go
    }
    recorder.Add("probe");
    return absl::OkStatus();
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, clock, options));
  recorder.WaitFor(2);
  clock.Advance(kHalf);
  // Nothing follows "blocked" while the probe is held, whatever the time: a ping needs the
  // probe to return.
  EXPECT_THAT(recorder.WaitFor(3), ElementsAre("probe", "WATCHDOG=1", "blocked"));
  clock.Advance(kInterval);
  EXPECT_EQ(recorder.size(), 3u);
  release.Notify();
  EXPECT_THAT(recorder.WaitFor(5),
              ElementsAre("probe", "WATCHDOG=1", "blocked", "probe", "WATCHDOG=1"));
  watchdog->Stop();
}

TEST(WatchdogTest, SendsTheStatusLineWhenItChanges) {
  FakeClock clock;
  Recorder recorder;
  int calls = 0;
  WatchdogOptions options;
  options.interval = kInterval;
  options.probe = [] { return absl::OkStatus(); };
  options.status_line = [&] { return ++calls < 3 ? std::string("1 session") : "2 sessions"; };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Watchdog> watchdog,
                              Watchdog::Start(recorder, clock, options));
  for (size_t events = 1; events < 4; ++events) {
    recorder.WaitFor(events);
    clock.Advance(kHalf);
  }
  const std::vector<std::string> events = recorder.WaitFor(4);
  watchdog->Stop();
  EXPECT_THAT(events, ElementsAre("WATCHDOG=1\nSTATUS=1 session", "WATCHDOG=1",
                                  "WATCHDOG=1\nSTATUS=2 sessions", "WATCHDOG=1"));
}

TEST(WatchdogTest, RefusesBadOptions) {
  FakeClock clock;
  Recorder recorder;
  WatchdogOptions options;
  options.probe = [] { return absl::OkStatus(); };
  EXPECT_THAT(Watchdog::Start(recorder, clock, options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.interval = absl::Seconds(1);
  options.probe = nullptr;
  EXPECT_THAT(Watchdog::Start(recorder, clock, options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpukit
