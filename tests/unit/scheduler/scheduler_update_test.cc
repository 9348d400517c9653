// Scheduler::UpdatePartition with a field mask: it sets the named fields only, checks the
// merged spec, and is one step under the scheduler's lock, so concurrent updates of
// different fields never lose one another.
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/reason.h"
#include "daemon/scheduler/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kDeviceBytes = 1024 * kMiB;

PartitionSpec Spec(std::string name, int64_t memory_quota_bytes, double compute_share) {
  return {.name = std::move(name),
          .memory_quota_bytes = memory_quota_bytes,
          .compute_share = compute_share};
}

class SchedulerUpdateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scheduler_ = *Scheduler::Create(clock_, {{0, kDeviceBytes}},
                                    {Spec("p", 256 * kMiB, 0.5), Spec("q", 256 * kMiB, 0.25)}, {});
  }

  FakeClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerUpdateTest, SetsOnlyTheMaskedFieldsAndReturnsTheNewSpec) {
  PartitionSpec values = Spec("ignored", 512 * kMiB, 0.1);
  values.max_sessions = 9;
  values.spill = true;
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      PartitionSpec updated,
      scheduler_->UpdatePartition("p", {.max_sessions = true, .spill = true}, values));
  EXPECT_EQ(updated.name, "p");
  EXPECT_EQ(updated.max_sessions, 9);
  EXPECT_TRUE(updated.spill);
  EXPECT_EQ(updated.memory_quota_bytes, 256 * kMiB) << "not in the mask";
  EXPECT_EQ(updated.compute_share, 0.5) << "not in the mask";
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionSpec stored, scheduler_->GetPartition("p"));
  EXPECT_EQ(stored.max_sessions, 9);
  EXPECT_EQ(stored.memory_quota_bytes, 256 * kMiB);
}

TEST_F(SchedulerUpdateTest, ChecksTheMergedSpecAndLeavesThePartitionOnRefusal) {
  // A bandwidth cap below the compute share the partition keeps is invalid only merged.
  PartitionSpec values = Spec("p", 1, 0.9);
  values.bandwidth_cap = 0.3;
  EXPECT_THAT(scheduler_->UpdatePartition("p", {.bandwidth_cap = true}, values),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("bandwidth")));
  // 0.9 beside q's 0.25 overcommits the device.
  absl::StatusOr<PartitionSpec> over =
      scheduler_->UpdatePartition("p", {.compute_share = true}, values);
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(over.status()), RejectReason::kDeviceOvercommitted);
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionSpec stored, scheduler_->GetPartition("p"));
  EXPECT_EQ(stored.compute_share, 0.5);
  EXPECT_EQ(stored.bandwidth_cap, 0);
  EXPECT_THAT(scheduler_->UpdatePartition("nope", PartitionFieldMask::All(), values),
              StatusIs(absl::StatusCode::kNotFound));
}

// Four threads each own one field of the same partition and raise it 1, 2, ..., kRounds.
// Every value one of them has seen acknowledged must still be there whenever anyone looks
// afterwards: a read-merge-write in two locked steps lets one thread's write carry a stale
// copy of another's field and undo it, which this sees.
TEST_F(SchedulerUpdateTest, ConcurrentUpdatesOfDifferentFieldsLoseNone) {
  constexpr int kRounds = 5000;
  struct Field {
    PartitionFieldMask mask;
    void (*set)(PartitionSpec&, int);
    int (*get)(const PartitionSpec&);
  };
  const Field fields[] = {
      {{.memory_quota_bytes = true},
       [](PartitionSpec& s, int v) { s.memory_quota_bytes = 256 * kMiB + v; },
       [](const PartitionSpec& s) { return static_cast<int>(s.memory_quota_bytes - 256 * kMiB); }},
      {{.max_queued_tasks = true},
       [](PartitionSpec& s, int v) { s.max_queued_tasks = 1000 + v; },
       [](const PartitionSpec& s) { return s.max_queued_tasks - 1000; }},
      {{.max_running_tasks = true},
       [](PartitionSpec& s, int v) { s.max_running_tasks = 100 + v; },
       [](const PartitionSpec& s) { return s.max_running_tasks - 100; }},
      {{.max_sessions = true},
       [](PartitionSpec& s, int v) { s.max_sessions = v; },
       [](const PartitionSpec& s) { return s.max_sessions; }},
  };
  constexpr int kFields = 4;
  // Start values: 0 for each field, as the fields' encodings read them.
  PartitionSpec start = Spec("p", 256 * kMiB, 0.5);
  start.max_queued_tasks = 1000;
  start.max_running_tasks = 100;
  ASSERT_THAT(scheduler_->UpdatePartition("p", PartitionFieldMask::All(), start), IsOk());

  std::atomic<int> acknowledged[kFields] = {};
  std::atomic<int> stale_reads = 0;
  std::atomic<int> failures = 0;
  // All start together, so their updates interleave rather than run one thread after another.
  std::atomic<int> ready = 0;
  std::vector<std::thread> threads;
  for (int f = 0; f < kFields; ++f) {
    threads.emplace_back([&, f] {
      ++ready;
      while (ready.load() < kFields) std::this_thread::yield();
      for (int v = 1; v <= kRounds; ++v) {
        int floor[kFields];
        for (int g = 0; g < kFields; ++g) floor[g] = acknowledged[g].load();
        PartitionSpec values = start;
        fields[f].set(values, v);
        absl::StatusOr<PartitionSpec> updated =
            scheduler_->UpdatePartition("p", fields[f].mask, values);
        if (!updated.ok()) {
          ++failures;
          continue;
        }
        acknowledged[f].store(v);
        for (int g = 0; g < kFields; ++g) {
          if (fields[g].get(*updated) < floor[g]) ++stale_reads;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stale_reads.load(), 0) << "an update undid another's acknowledged field";
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionSpec final_spec, scheduler_->GetPartition("p"));
  for (int f = 0; f < kFields; ++f) {
    EXPECT_EQ(fields[f].get(final_spec), kRounds) << "field " << f;
  }
}

}  // namespace
}  // namespace gpukit
