// The Scheduler's task state changes (TransitionLocked over task.h's table): a change the
// table does not allow is refused, and the refusal leaves the task, its partition's slots
// and counters, pacing, and the session's and tenant's accounting as they were. Allowed
// changes are stamped with the scheduler's clock. (The table itself: task_test.cc.)
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/reason.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/scheduler/task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/scheduler/scheduler_printers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;

constexpr int64_t kDeviceBytes = int64_t{64} << 20;

// What a refused change must leave as it was.
struct Accounts {
  int running = 0;
  int queued = 0;
  int64_t admitted_total = 0;
  int64_t succeeded_total = 0;
  int64_t failed_total = 0;
  int64_t cancelled = 0;
  absl::Duration partition_device_time;
  absl::Duration pacing_balance;
  absl::Duration session_device_time;
  int64_t session_tasks_finished = 0;
  absl::Duration tenant_device_time;
  absl::Duration device_time;
  friend bool operator==(const Accounts&, const Accounts&) = default;
};

void PrintTo(const Accounts& a, std::ostream* os) {
  *os << "{running " << a.running << ", queued " << a.queued << ", admitted " << a.admitted_total
      << ", succeeded " << a.succeeded_total << ", failed " << a.failed_total << ", cancelled "
      << a.cancelled << ", partition " << a.partition_device_time << ", balance "
      << a.pacing_balance << ", session " << a.session_device_time << " / "
      << a.session_tasks_finished << ", tenant " << a.tenant_device_time << ", device "
      << a.device_time << "}";
}

class SchedulerTransitionTest : public ::testing::Test {
 protected:
  // One partition over the whole device with one running slot, so a slot given back twice
  // would show as two tasks admitted at once.
  void SetUp() override {
    PartitionSpec spec;
    spec.name = "p";
    spec.memory_quota_bytes = kDeviceBytes;
    spec.compute_share = 0.5;
    spec.max_running_tasks = 1;
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(clock_, {{0, kDeviceBytes}}, {spec}, {});
    ASSERT_THAT(scheduler, IsOk());
    scheduler_ = *std::move(scheduler);
    absl::StatusOr<SessionAdmission> admission = scheduler_->AdmitSession("s-1", "p", {}, "t");
    ASSERT_THAT(admission, IsOk());
    session_ = admission->ticket;
  }

  TaskRef Submit() {
    absl::StatusOr<TaskRef> task = scheduler_->Submit(session_, {.name = "op"});
    EXPECT_THAT(task, IsOk());
    return task.ok() ? *task : nullptr;
  }

  PartitionStatus Status() const { return scheduler_->ListPartitions().at(0); }

  TaskInfo InfoOf(const TaskRef& task) const {
    const uint64_t id = scheduler_->IdOf(task);
    for (TaskInfo& info : scheduler_->ListTasks({})) {
      if (info.id == id) return info;
    }
    ADD_FAILURE() << "task " << id << " is not listed";
    return {};
  }

  Accounts Read() const {
    const PartitionStatus p = Status();
    const SessionUsage usage = scheduler_->Usage(session_);
    return Accounts{
        .running = p.running,
        .queued = p.queued,
        .admitted_total = p.admitted_total,
        .succeeded_total = p.succeeded_total,
        .failed_total = p.failed_total,
        .cancelled = p.rejected[static_cast<int>(RejectReason::kCancelled)],
        .partition_device_time = p.device_time_total,
        .pacing_balance = p.pacing_balance,
        .session_device_time = usage.device_time,
        .session_tasks_finished = usage.tasks_finished,
        .tenant_device_time = scheduler_->ListTenants().at(0).device_time_total,
        .device_time = scheduler_->device_time_total(0),
    };
  }

  FakeClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  SessionTicket session_;
};

TEST_F(SchedulerTransitionTest, FinishingACancelledTaskChangesNothing) {
  TaskRef task = Submit();
  ASSERT_EQ(scheduler_->StateOf(task), TaskState::kAdmitted);
  ASSERT_THAT(scheduler_->Cancel(scheduler_->IdOf(task), "operator"), IsOk());
  const Accounts before = Read();
  ASSERT_EQ(before.running, 0);
  ASSERT_EQ(before.cancelled, 1);

  scheduler_->Finish(task, absl::OkStatus(), absl::Milliseconds(5));  // Cancelled -> Succeeded
  scheduler_->Finish(task, absl::InternalError("late"), absl::Milliseconds(5));  // -> Failed

  EXPECT_EQ(scheduler_->StateOf(task), TaskState::kCancelled);
  EXPECT_EQ(Read(), before);
  EXPECT_EQ(InfoOf(task).error, "operator");
  // The one slot was given back once, not three times: one task is admitted, one waits.
  TaskRef second = Submit();
  TaskRef third = Submit();
  EXPECT_EQ(scheduler_->StateOf(second), TaskState::kAdmitted);
  EXPECT_EQ(scheduler_->StateOf(third), TaskState::kQueued);
}

TEST_F(SchedulerTransitionTest, StartingACancelledTaskIsRefusedAndChangesNothing) {
  TaskRef task = Submit();
  ASSERT_THAT(scheduler_->Cancel(scheduler_->IdOf(task), "operator"), IsOk());
  const Accounts before = Read();

  const absl::Status started = scheduler_->Start(task);  // Cancelled -> Running

  EXPECT_THAT(started, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(ReasonOf(started), RejectReason::kCancelled);
  EXPECT_EQ(scheduler_->StateOf(task), TaskState::kCancelled);
  EXPECT_EQ(InfoOf(task).started, absl::InfinitePast());
  EXPECT_EQ(Read(), before);
}

TEST_F(SchedulerTransitionTest, FinishingTwiceCountsTheFirstOnly) {
  TaskRef task = Submit();
  ASSERT_THAT(scheduler_->Start(task), IsOk());
  scheduler_->Finish(task, absl::OkStatus(), absl::Milliseconds(1));
  const Accounts before = Read();
  ASSERT_EQ(before.succeeded_total, 1);
  ASSERT_EQ(before.session_device_time, absl::Milliseconds(1));

  scheduler_->Finish(task, absl::InternalError("again"), absl::Milliseconds(7));

  EXPECT_EQ(scheduler_->StateOf(task), TaskState::kSucceeded);
  EXPECT_EQ(Read(), before);
}

TEST_F(SchedulerTransitionTest, CancellingARunningTaskIsRefusedAndItKeepsRunning) {
  TaskRef task = Submit();
  ASSERT_THAT(scheduler_->Start(task), IsOk());
  const Accounts before = Read();

  EXPECT_THAT(scheduler_->Cancel(scheduler_->IdOf(task), "operator"),
              StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_EQ(scheduler_->StateOf(task), TaskState::kRunning);
  EXPECT_EQ(Read(), before);
  scheduler_->Finish(task, absl::OkStatus(), absl::Milliseconds(1));
  EXPECT_EQ(scheduler_->StateOf(task), TaskState::kSucceeded);
}

TEST_F(SchedulerTransitionTest, ExpiredTaskCannotBeAdmittedOrStarted) {
  TaskRef first = Submit();  // holds the one slot
  absl::StatusOr<TaskRef> waiting =
      scheduler_->Submit(session_, {.name = "op", .queue_timeout = absl::Seconds(1)});
  ASSERT_THAT(waiting, IsOk());
  clock_.Advance(absl::Seconds(2));
  scheduler_->Pump();
  ASSERT_EQ(scheduler_->StateOf(*waiting), TaskState::kExpired);

  scheduler_->Finish(first, absl::OkStatus(), absl::Milliseconds(1));  // frees the slot, pumps

  EXPECT_EQ(scheduler_->StateOf(*waiting), TaskState::kExpired);
  EXPECT_THAT(scheduler_->Start(*waiting), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(Status().running, 0);
  EXPECT_EQ(Status().admitted_total, 1);
}

TEST_F(SchedulerTransitionTest, EveryStateChangeIsStampedWithTheSchedulersClock) {
  const absl::Time submitted = clock_.Now();
  TaskRef task = Submit();
  clock_.Advance(absl::Milliseconds(2));
  ASSERT_THAT(scheduler_->Start(task), IsOk());
  const absl::Time started = clock_.Now();
  clock_.Advance(absl::Milliseconds(3));
  scheduler_->Finish(task, absl::OkStatus(), absl::Milliseconds(3));
  const absl::Time finished = clock_.Now();

  const TaskInfo info = InfoOf(task);
  EXPECT_EQ(info.state, TaskState::kSucceeded);
  EXPECT_EQ(info.submitted, submitted);
  EXPECT_EQ(info.admitted, submitted);  // it skipped the queue
  EXPECT_EQ(info.started, started);
  EXPECT_EQ(info.finished, finished);
}

}  // namespace
}  // namespace gpukit
