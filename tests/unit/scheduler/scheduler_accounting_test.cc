// The Scheduler's GPU-time accounting (scheduler.h, "GPU-time accounting"): each finished
// task's device time is charged to its session, its partition under its QoS class, and its
// tenant; the three views add up, the QoS split adds up to each total, totals survive the
// end of a session, failed tasks are charged what they used, and tasks that never ran are
// not. Time is a FakeClock; nothing runs on another thread.
//
// Replay a failure of the random test with GPUKIT_TEST_SEED=<seed> (the failure prints it).
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/scheduler/task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/scheduler/scheduler_printers.h"

namespace gpukit {

namespace {

using ::gpukit::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kDeviceBytes = 64 * kMiB;
constexpr QosClass kClasses[] = {QosClass::kGuaranteed, QosClass::kBurstable,
                                 QosClass::kBestEffort};

PartitionSpec Partition(std::string name, double share, int64_t quota_bytes = 32 * kMiB) {
  PartitionSpec spec;
  spec.name = std::move(name);
  spec.memory_quota_bytes = quota_bytes;
  spec.compute_share = share;
  return spec;
}

// Resources that give each QoS class.
ResourceSpec ResourcesOf(QosClass qos) {
  ResourceSpec spec;
  switch (qos) {
    case QosClass::kGuaranteed:
      spec.memory_limit_bytes = kMiB;
      spec.compute_limit = 0.125;
      break;
    case QosClass::kBurstable:
      spec.memory_request_bytes = kMiB;
      break;
    case QosClass::kBestEffort:
      break;
  }
  return spec;
}

absl::Duration Sum(const DeviceTimeByQos& by_qos) {
  absl::Duration sum;
  for (absl::Duration d : by_qos) sum += d;
  return sum;
}

absl::Duration Of(const DeviceTimeByQos& by_qos, QosClass qos) {
  return by_qos[static_cast<int>(qos)];
}

class SchedulerAccountingTest : public ::testing::Test {
 protected:
  void Build(const std::vector<PartitionSpec>& partitions) {
    scheduler_ = *Scheduler::Create(clock_, {{0, kDeviceBytes}}, partitions, {});
  }

  Scheduler& scheduler() { return *scheduler_; }

  SessionTicket Open(absl::string_view tenant, absl::string_view partition, QosClass qos) {
    absl::StatusOr<SessionAdmission> admission = scheduler_->AdmitSession(
        absl::StrCat("s-", ++sessions_opened_), partition, ResourcesOf(qos), tenant);
    EXPECT_THAT(admission, IsOk());
    if (!admission.ok()) return nullptr;
    EXPECT_EQ(admission->qos, qos);
    return admission->ticket;
  }

  // Submits a task of `session` and starts it; fails the test unless it was admitted at once.
  TaskRef Started(const SessionTicket& session) {
    absl::StatusOr<TaskRef> task = scheduler_->Submit(session, {.name = "op"});
    EXPECT_THAT(task, IsOk());
    if (!task.ok()) return nullptr;
    EXPECT_THAT(scheduler_->Start(*task), IsOk());
    return *task;
  }

  // Runs one task of `session` to its end with `result`, charging `device_time`.
  void Run(const SessionTicket& session, absl::Duration device_time,
           const absl::Status& result = absl::OkStatus()) {
    TaskRef task = Started(session);
    ASSERT_NE(task, nullptr);
    scheduler_->Finish(task, result, device_time);
  }

  PartitionStatus StatusOf(absl::string_view name) {
    for (const PartitionStatus& s : scheduler_->ListPartitions()) {
      if (s.spec.name == name) return s;
    }
    ADD_FAILURE() << "no partition " << name;
    return {};
  }

  TenantUsage TenantOf(absl::string_view name) {
    for (const TenantUsage& t : scheduler_->ListTenants()) {
      if (t.tenant == name) return t;
    }
    ADD_FAILURE() << "no tenant " << name;
    return {};
  }

  FakeClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  int sessions_opened_ = 0;
};

TEST_F(SchedulerAccountingTest, SessionsPartitionsQosClassesAndTenantsAddUpToTheSameTime) {
  Build({Partition("p", 0.5), Partition("q", 0.5)});
  SessionTicket alpha_g = Open("alpha", "p", QosClass::kGuaranteed);
  SessionTicket alpha_be = Open("alpha", "q", QosClass::kBestEffort);
  SessionTicket beta_b = Open("beta", "p", QosClass::kBurstable);
  SessionTicket beta_be = Open("beta", "p", QosClass::kBestEffort);
  ASSERT_NO_FATAL_FAILURE(Run(alpha_g, absl::Microseconds(700)));
  ASSERT_NO_FATAL_FAILURE(Run(alpha_g, absl::Microseconds(300)));
  ASSERT_NO_FATAL_FAILURE(Run(alpha_be, absl::Microseconds(2000)));
  ASSERT_NO_FATAL_FAILURE(Run(beta_b, absl::Microseconds(40)));
  ASSERT_NO_FATAL_FAILURE(Run(beta_be, absl::Microseconds(5)));
  ASSERT_NO_FATAL_FAILURE(Run(beta_be, absl::Microseconds(6)));

  EXPECT_EQ(scheduler().Usage(alpha_g).device_time, absl::Microseconds(1000));
  EXPECT_EQ(scheduler().Usage(alpha_g).tasks_finished, 2);
  EXPECT_EQ(scheduler().Usage(alpha_g).tenant, "alpha");
  EXPECT_EQ(scheduler().Usage(alpha_be).device_time, absl::Microseconds(2000));
  EXPECT_EQ(scheduler().Usage(beta_b).device_time, absl::Microseconds(40));
  EXPECT_EQ(scheduler().Usage(beta_be).device_time, absl::Microseconds(11));
  EXPECT_EQ(scheduler().Usage(beta_be).tasks_finished, 2);

  const PartitionStatus p = StatusOf("p");
  EXPECT_EQ(p.device_time_total, absl::Microseconds(1051));
  EXPECT_EQ(Of(p.device_time_by_qos, QosClass::kGuaranteed), absl::Microseconds(1000));
  EXPECT_EQ(Of(p.device_time_by_qos, QosClass::kBurstable), absl::Microseconds(40));
  EXPECT_EQ(Of(p.device_time_by_qos, QosClass::kBestEffort), absl::Microseconds(11));
  const PartitionStatus q = StatusOf("q");
  EXPECT_EQ(q.device_time_total, absl::Microseconds(2000));
  EXPECT_EQ(Of(q.device_time_by_qos, QosClass::kBestEffort), absl::Microseconds(2000));
  EXPECT_EQ(Sum(q.device_time_by_qos), q.device_time_total);

  const TenantUsage alpha = TenantOf("alpha");
  EXPECT_EQ(alpha.sessions, 2);
  EXPECT_EQ(alpha.device_time_total, absl::Microseconds(3000));
  EXPECT_EQ(Of(alpha.device_time_by_qos, QosClass::kGuaranteed), absl::Microseconds(1000));
  EXPECT_EQ(Of(alpha.device_time_by_qos, QosClass::kBestEffort), absl::Microseconds(2000));
  EXPECT_EQ(alpha.tasks_finished, 3);
  const TenantUsage beta = TenantOf("beta");
  EXPECT_EQ(beta.device_time_total, absl::Microseconds(51));
  EXPECT_EQ(Of(beta.device_time_by_qos, QosClass::kBurstable), absl::Microseconds(40));
  EXPECT_EQ(Of(beta.device_time_by_qos, QosClass::kBestEffort), absl::Microseconds(11));
  EXPECT_EQ(beta.tasks_finished, 3);
  EXPECT_EQ(alpha.device_time_total + beta.device_time_total,
            p.device_time_total + q.device_time_total);
}

// The device's busy time (gpukit_device_busy_seconds_total) sums its partitions' and keeps
// a deleted partition's: it only grows.
TEST_F(SchedulerAccountingTest, DeviceTimeTotalSumsItsPartitionsAndOutlivesADeletedOne) {
  Build({Partition("p", 0.5), Partition("q", 0.5)});
  SessionTicket in_p = Open("alpha", "p", QosClass::kBestEffort);
  SessionTicket in_q = Open("beta", "q", QosClass::kGuaranteed);
  ASSERT_NO_FATAL_FAILURE(Run(in_p, absl::Microseconds(300)));
  ASSERT_NO_FATAL_FAILURE(Run(in_q, absl::Microseconds(200), absl::InternalError("failed")));
  EXPECT_EQ(scheduler().device_time_total(0), absl::Microseconds(500));
  EXPECT_EQ(scheduler().device_time_total(0),
            StatusOf("p").device_time_total + StatusOf("q").device_time_total);
  scheduler().EndSession(in_q);
  ASSERT_THAT(scheduler().DeletePartition("q", /*force=*/false), IsOk());
  EXPECT_EQ(scheduler().device_time_total(0), absl::Microseconds(500));
  EXPECT_EQ(scheduler().device_time_total(1), absl::ZeroDuration()) << "no such device";
}

TEST_F(SchedulerAccountingTest, TenantsAreListedByNameAndAnUnnamedOneAsTheEmptyName) {
  Build({Partition("default", 1.0)});
  Open("zeta", "default", QosClass::kBestEffort);
  Open("alpha", "default", QosClass::kBestEffort);
  ASSERT_THAT(scheduler().AdmitSession("s-unnamed", "default", {}), IsOk());
  std::vector<std::string> names;
  for (const TenantUsage& t : scheduler().ListTenants()) names.push_back(t.tenant);
  EXPECT_THAT(names, ElementsAre("", "alpha", "zeta"));
}

TEST_F(SchedulerAccountingTest, RefusedSessionAddsNoTenant) {
  PartitionSpec one = Partition("one", 1.0);
  one.max_sessions = 1;
  Build({one});
  Open("first", "one", QosClass::kBestEffort);
  EXPECT_FALSE(scheduler().AdmitSession("s-x", "one", {}, "second").ok());
  EXPECT_FALSE(scheduler().AdmitSession("s-y", "missing", {}, "third").ok());
  ASSERT_EQ(scheduler().ListTenants().size(), 1u);
  EXPECT_EQ(scheduler().ListTenants()[0].tenant, "first");
}

TEST_F(SchedulerAccountingTest, TotalsSurviveTheEndOfASessionAndCountItsRunningTask) {
  Build({Partition("p", 1.0)});
  SessionTicket a = Open("alpha", "p", QosClass::kBurstable);
  SessionTicket b = Open("alpha", "p", QosClass::kGuaranteed);
  ASSERT_NO_FATAL_FAILURE(Run(a, absl::Milliseconds(3)));
  TaskRef running = Started(a);
  ASSERT_NE(running, nullptr);

  scheduler().EndSession(a);
  EXPECT_EQ(TenantOf("alpha").sessions, 1);
  EXPECT_EQ(TenantOf("alpha").device_time_total, absl::Milliseconds(3));
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(3));
  EXPECT_TRUE(scheduler().Usage(a).ended);
  EXPECT_EQ(scheduler().Usage(a).device_time, absl::Milliseconds(3));

  // The device work of the running task went on; its time is charged when it finishes.
  scheduler().Finish(running, absl::OkStatus(), absl::Milliseconds(2));
  EXPECT_EQ(scheduler().Usage(a).device_time, absl::Milliseconds(5));
  EXPECT_EQ(scheduler().Usage(a).tasks_finished, 2);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(5));
  EXPECT_EQ(Of(StatusOf("p").device_time_by_qos, QosClass::kBurstable), absl::Milliseconds(5));

  ASSERT_NO_FATAL_FAILURE(Run(b, absl::Milliseconds(1)));
  scheduler().EndSession(b);
  const TenantUsage alpha = TenantOf("alpha");
  EXPECT_EQ(alpha.sessions, 0);
  EXPECT_EQ(alpha.device_time_total, absl::Milliseconds(6));
  EXPECT_EQ(Of(alpha.device_time_by_qos, QosClass::kBurstable), absl::Milliseconds(5));
  EXPECT_EQ(Of(alpha.device_time_by_qos, QosClass::kGuaranteed), absl::Milliseconds(1));
  EXPECT_EQ(alpha.tasks_finished, 3);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(6));
  EXPECT_EQ(StatusOf("p").sessions, 0);
}

TEST_F(SchedulerAccountingTest, FailedTaskIsChargedTheTimeItMeasured) {
  Build({Partition("p", 1.0)});
  SessionTicket s = Open("alpha", "p", QosClass::kBestEffort);
  ASSERT_NO_FATAL_FAILURE(
      Run(s, absl::Microseconds(1234), absl::InternalError("CUDA_ERROR_ILLEGAL_ADDRESS")));
  EXPECT_EQ(scheduler().Usage(s).device_time, absl::Microseconds(1234));
  EXPECT_EQ(scheduler().Usage(s).tasks_finished, 1);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Microseconds(1234));
  EXPECT_EQ(StatusOf("p").failed_total, 1);
  const TenantUsage alpha = TenantOf("alpha");
  EXPECT_EQ(alpha.device_time_total, absl::Microseconds(1234));
  EXPECT_EQ(Of(alpha.device_time_by_qos, QosClass::kBestEffort), absl::Microseconds(1234));
  EXPECT_EQ(alpha.tasks_finished, 1);
  EXPECT_EQ(alpha.tasks_failed, 1);
}

TEST_F(SchedulerAccountingTest, TasksThatNeverRanAndRepeatedFinishesChargeNothing) {
  PartitionSpec p = Partition("p", 1.0);
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket s = Open("alpha", "p", QosClass::kBurstable);
  TaskRef running = Started(s);
  ASSERT_NE(running, nullptr);
  absl::StatusOr<TaskRef> queued = scheduler().Submit(s, {.name = "queued"});
  ASSERT_THAT(queued, IsOk());
  absl::StatusOr<TaskRef> expiring =
      scheduler().Submit(s, {.name = "expiring", .queue_timeout = absl::Milliseconds(1)});
  ASSERT_THAT(expiring, IsOk());
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(*queued), "gone"), IsOk());
  clock_.Advance(absl::Milliseconds(2));
  scheduler().Pump();
  ASSERT_EQ(scheduler().StateOf(*expiring), TaskState::kExpired);
  // Finish of a task that ended without running is ignored, as is a second Finish.
  scheduler().Finish(*queued, absl::OkStatus(), absl::Milliseconds(50));
  scheduler().Finish(running, absl::OkStatus(), absl::Milliseconds(1));
  scheduler().Finish(running, absl::OkStatus(), absl::Milliseconds(50));

  EXPECT_EQ(scheduler().Usage(s).device_time, absl::Milliseconds(1));
  EXPECT_EQ(scheduler().Usage(s).tasks_finished, 1);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(1));
  EXPECT_EQ(TenantOf("alpha").device_time_total, absl::Milliseconds(1));
  EXPECT_EQ(TenantOf("alpha").tasks_finished, 1);
  EXPECT_EQ(TenantOf("alpha").tasks_failed, 0);
}

TEST_F(SchedulerAccountingTest, TenantMemoryFollowsItsSessionsReservations) {
  Build({Partition("p", 1.0)});
  SessionTicket a = Open("alpha", "p", QosClass::kBestEffort);
  SessionTicket b = Open("alpha", "p", QosClass::kBestEffort);
  SessionTicket c = Open("beta", "p", QosClass::kBestEffort);
  absl::StatusOr<MemoryReservation> ra = scheduler().ReserveMemory(a, 3 * kMiB);
  absl::StatusOr<MemoryReservation> rb = scheduler().ReserveMemory(b, 2 * kMiB);
  absl::StatusOr<MemoryReservation> rc = scheduler().ReserveMemory(c, kMiB);
  ASSERT_THAT(ra, IsOk());
  ASSERT_THAT(rb, IsOk());
  ASSERT_THAT(rc, IsOk());
  EXPECT_EQ(TenantOf("alpha").memory_used_bytes, 5 * kMiB);
  EXPECT_EQ(TenantOf("beta").memory_used_bytes, kMiB);

  ra->Release();
  EXPECT_EQ(TenantOf("alpha").memory_used_bytes, 2 * kMiB);
  // A reservation that outlives its session still counts until it is released.
  scheduler().EndSession(b);
  EXPECT_EQ(TenantOf("alpha").memory_used_bytes, 2 * kMiB);
  rb->Release();
  EXPECT_EQ(TenantOf("alpha").memory_used_bytes, 0);
  EXPECT_EQ(TenantOf("beta").memory_used_bytes, kMiB);
}

// Random sessions of random tenants, partitions and classes run tasks that succeed or fail,
// get cancelled, or outlive their session; after every step the per-session, per-partition,
// per-class and per-tenant times must agree with a model and with each other, and no
// tenant's or partition's total may shrink.
TEST_F(SchedulerAccountingTest, RandomSequencesKeepEveryViewOfTheTimeInAgreement) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto any = [&](size_t size) {
    return static_cast<size_t>(uniform(0, static_cast<int>(size) - 1));
  };
  const std::vector<std::string> partitions = {"p", "q", "r"};
  const std::vector<std::string> tenants = {"t0", "t1", "t2", "t3"};
  int charged = 0;  // tasks finished with some device time, over all rounds
  for (int round = 0; round < 20; ++round) {
    Build({Partition("p", 0.5, 16 * kMiB), Partition("q", 0.25, 16 * kMiB),
           Partition("r", 0.25, 16 * kMiB)});
    struct SessionModel {
      SessionTicket ticket;
      std::string tenant;
      std::string partition;
      QosClass qos;
      absl::Duration expected;
    };
    std::vector<SessionModel> sessions;
    std::vector<std::pair<size_t, TaskRef>> running;
    std::map<std::string, absl::Duration> tenant_expected;
    std::map<std::string, absl::Duration> partition_expected;
    std::map<std::string, absl::Duration> tenant_seen;
    std::map<std::string, absl::Duration> partition_seen;
    for (int step = 0; step < 200; ++step) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " step " << step);
      const int action = uniform(0, 9);
      if (sessions.empty() || action == 0) {
        const QosClass qos = kClasses[uniform(0, 2)];
        const std::string tenant = tenants[uniform(0, 3)];
        const std::string partition = partitions[uniform(0, 2)];
        // Guaranteed and Burstable sessions may find their partition's requests full.
        absl::StatusOr<SessionAdmission> admission = scheduler().AdmitSession(
            absl::StrCat("s-", sessions.size()), partition, ResourcesOf(qos), tenant);
        if (!admission.ok()) continue;
        sessions.push_back({admission->ticket, tenant, partition, qos, absl::ZeroDuration()});
      } else if (action == 1) {
        scheduler().EndSession(sessions[any(sessions.size())].ticket);
      } else if (action <= 4 && running.size() < 8) {
        const size_t i = any(sessions.size());
        if (scheduler().Usage(sessions[i].ticket).ended) continue;
        absl::StatusOr<TaskRef> task = scheduler().Submit(sessions[i].ticket, {.name = "op"});
        ASSERT_THAT(task, IsOk());
        // Gating and pacing may hold it; what waits is cancelled, what runs is kept.
        if (scheduler().StateOf(*task) != TaskState::kAdmitted) {
          ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(*task), "test"), IsOk());
          continue;
        }
        ASSERT_THAT(scheduler().Start(*task), IsOk());
        running.emplace_back(i, *task);
      } else if (!running.empty()) {
        const size_t k = any(running.size());
        const auto [i, task] = running[k];
        running.erase(running.begin() + k);
        const absl::Duration device_time = absl::Microseconds(uniform(0, 5000));
        const absl::Status result =
            uniform(0, 3) == 0 ? absl::InternalError("fault") : absl::OkStatus();
        scheduler().Finish(task, result, device_time);
        sessions[i].expected += device_time;
        if (device_time > absl::ZeroDuration()) ++charged;
        tenant_expected[sessions[i].tenant] += device_time;
        partition_expected[sessions[i].partition] += device_time;
      }
      clock_.Advance(absl::Microseconds(uniform(0, 3000)));
      scheduler().Pump();

      absl::Duration session_sum;
      for (const SessionModel& s : sessions) {
        const SessionUsage usage = scheduler().Usage(s.ticket);
        ASSERT_EQ(usage.device_time, s.expected);
        ASSERT_EQ(usage.tenant, s.tenant);
        session_sum += usage.device_time;
      }
      absl::Duration partition_sum;
      for (const PartitionStatus& p : scheduler().ListPartitions()) {
        ASSERT_EQ(p.device_time_total, partition_expected[p.spec.name]) << p.spec.name;
        ASSERT_EQ(Sum(p.device_time_by_qos), p.device_time_total) << p.spec.name;
        ASSERT_GE(p.device_time_total, partition_seen[p.spec.name]) << p.spec.name;
        partition_seen[p.spec.name] = p.device_time_total;
        partition_sum += p.device_time_total;
      }
      absl::Duration tenant_sum;
      DeviceTimeByQos class_sum{};
      for (const TenantUsage& t : scheduler().ListTenants()) {
        ASSERT_EQ(t.device_time_total, tenant_expected[t.tenant]) << t.tenant;
        ASSERT_EQ(Sum(t.device_time_by_qos), t.device_time_total) << t.tenant;
        ASSERT_GE(t.device_time_total, tenant_seen[t.tenant]) << t.tenant;
        tenant_seen[t.tenant] = t.device_time_total;
        tenant_sum += t.device_time_total;
        for (QosClass qos : kClasses)
          class_sum[static_cast<int>(qos)] += Of(t.device_time_by_qos, qos);
      }
      ASSERT_EQ(session_sum, partition_sum);
      ASSERT_EQ(tenant_sum, partition_sum);
      DeviceTimeByQos partition_class_sum{};
      for (const PartitionStatus& p : scheduler().ListPartitions()) {
        for (QosClass qos : kClasses) {
          partition_class_sum[static_cast<int>(qos)] += Of(p.device_time_by_qos, qos);
        }
      }
      ASSERT_EQ(class_sum, partition_class_sum);
    }
    for (const auto& [i, task] : running) scheduler().Finish(task, absl::OkStatus(), {});
  }
  EXPECT_GT(charged, 200) << "the sequences hardly ran a task: nothing was checked";
}

TEST_F(SchedulerAccountingTest, PastMaxTenantsTheIdleTenantWithLeastTimeIsFoldedNotLost) {
  SchedulerOptions options;
  options.task_history = 0;  // ended tasks hold no session account
  scheduler_ = *Scheduler::Create(clock_, {{0, kDeviceBytes}}, {Partition("p", 1.0)}, options);
  // A tenant with an open session and no time: never folded, though it has the least.
  SessionTicket open = Open("open", "p", QosClass::kBestEffort);
  for (int i = 1; i < kMaxTenants; ++i) {
    SessionTicket s = Open(absl::StrCat("t", i), "p", QosClass::kBestEffort);
    ASSERT_NO_FATAL_FAILURE(Run(s, absl::Microseconds(i)));
    scheduler().EndSession(s);
  }
  ASSERT_EQ(scheduler().ListTenants().size(), static_cast<size_t>(kMaxTenants));

  for (const std::string name : {"new-1", "new-2"}) {
    SessionTicket s = Open(name, "p", QosClass::kBurstable);
    ASSERT_NO_FATAL_FAILURE(Run(s, absl::Milliseconds(1)));
  }
  const std::vector<TenantUsage> tenants = scheduler().ListTenants();
  EXPECT_EQ(tenants.size(), static_cast<size_t>(kMaxTenants) + 1);  // and the folded entry
  absl::Duration sum;
  std::map<std::string, TenantUsage> by_name;
  for (const TenantUsage& t : tenants) {
    sum += t.device_time_total;
    by_name[t.tenant] = t;
  }
  EXPECT_EQ(sum, StatusOf("p").device_time_total) << "folding loses no time";
  ASSERT_TRUE(by_name.contains(std::string(kFoldedTenants)));
  const TenantUsage& folded = by_name[std::string(kFoldedTenants)];
  EXPECT_EQ(folded.device_time_total, absl::Microseconds(1 + 2));  // t1 and t2
  EXPECT_EQ(Of(folded.device_time_by_qos, QosClass::kBestEffort), absl::Microseconds(3));
  EXPECT_EQ(folded.tasks_finished, 2);
  EXPECT_EQ(folded.sessions, 0);
  EXPECT_FALSE(by_name.contains("t1"));
  EXPECT_FALSE(by_name.contains("t2"));
  EXPECT_TRUE(by_name.contains("t3"));
  EXPECT_TRUE(by_name.contains("open"));
  EXPECT_EQ(by_name["new-2"].device_time_total, absl::Milliseconds(1));
  scheduler().EndSession(open);
}

TEST_F(SchedulerAccountingTest, NoTenantsBeforeTheFirstSession) {
  Build({Partition("p", 1.0)});
  EXPECT_THAT(scheduler().ListTenants(), IsEmpty());
  EXPECT_EQ(StatusOf("p").device_time_total, absl::ZeroDuration());
  EXPECT_EQ(Sum(StatusOf("p").device_time_by_qos), absl::ZeroDuration());
}

}  // namespace
}  // namespace gpukit
