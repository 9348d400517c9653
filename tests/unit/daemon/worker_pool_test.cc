// WorkerPool (daemon/service/worker_pool.h): work runs off the caller's thread, threads start
// only for work that waits at once and never beyond the cap, end when idle, and queued work
// still runs.
#include "daemon/service/worker_pool.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gpukit::service {
namespace {

TEST(WorkerPoolTest, AnIdlePoolHasNoThreads) {
  WorkerPool pool(8, absl::Seconds(60));
  EXPECT_EQ(pool.threads(), 0);
}

TEST(WorkerPoolTest, RunsWorkOnAnotherThread) {
  WorkerPool pool(2, absl::Seconds(60));
  absl::Notification done;
  std::thread::id ran_on;
  pool.Schedule([&] {
    ran_on = std::this_thread::get_id();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(WorkerPoolTest, WaitingWorkNeverTakesMoreThanTheCapAndQueuedWorkRunsInTurn) {
  constexpr int kCap = 3;
  constexpr int kWork = 10;
  WorkerPool pool(kCap, absl::Seconds(60));
  absl::Mutex mu;
  int running = 0;
  int most_running = 0;
  int finished = 0;
  absl::Notification release;
  for (int i = 0; i < kWork; ++i) {
    pool.Schedule([&] {
      {
        absl::MutexLock lock(&mu);
        most_running = std::max(most_running, ++running);
      }
      release.WaitForNotification();
      absl::MutexLock lock(&mu);
      --running;
      ++finished;
    });
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kCap; }, &running),
                                    absl::Seconds(30)));
  }
  EXPECT_EQ(pool.threads(), kCap);
  release.Notify();
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                      +[](int* n) { return *n == kWork; }, &finished),
                                  absl::Seconds(30)));
  EXPECT_EQ(most_running, kCap);
}

TEST(WorkerPoolTest, TryScheduleRefusesOnlyWhenEveryThreadIsBusy) {
  constexpr int kCap = 2;
  WorkerPool pool(kCap, absl::Seconds(60));
  absl::Mutex mu;
  int running = 0;
  absl::Notification release;
  for (int i = 0; i < kCap; ++i) {
    ASSERT_TRUE(pool.TrySchedule([&] {
      {
        absl::MutexLock lock(&mu);
        ++running;
      }
      release.WaitForNotification();
      absl::MutexLock lock(&mu);
      --running;
    }));
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kCap; }, &running),
                                    absl::Seconds(30)));
  }
  bool ran = false;
  EXPECT_FALSE(pool.TrySchedule([&] { ran = true; }));  // dropped, never run
  release.Notify();
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == 0; }, &running),
                                    absl::Seconds(30)));
  }
  // Threads are idle again (they may still be on their way back): taken within the deadline.
  absl::Notification done;
  bool accepted = false;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(30);
       !accepted && absl::Now() < deadline;) {
    accepted = pool.TrySchedule([&] { done.Notify(); });
    if (!accepted) absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(accepted);
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(ran);
}

TEST(WorkerPoolTest, ThreadsWithoutWorkEndAndNewWorkStartsOneAgain) {
  WorkerPool pool(4, absl::Milliseconds(10));
  for (int round = 0; round < 2; ++round) {
    // The work holds its thread until it was counted: an idle thread may end within 10 ms,
    // before a descheduled test thread looks.
    absl::Notification started;
    absl::Notification release;
    pool.Schedule([&] {
      started.Notify();
      release.WaitForNotification();
    });
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(pool.threads(), 1);
    release.Notify();
    // Polls for the thread's end (an event), up to a deadline.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (pool.threads() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_EQ(pool.threads(), 0) << "round " << round;
  }
}

TEST(WorkerPoolTest, DestructionRunsTheWorkStillQueued) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(1, absl::Seconds(60));
    absl::Notification release;
    pool.Schedule([&] {
      release.WaitForNotification();
      ++ran;
    });
    for (int i = 0; i < 5; ++i) pool.Schedule([&] { ++ran; });
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 6);
}

}  // namespace
}  // namespace gpukit::service
