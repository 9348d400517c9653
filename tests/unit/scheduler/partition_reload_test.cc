// How a reloaded file's partitions replace the running ones (daemon/scheduler/partition_reload.h).
#include "daemon/scheduler/partition_reload.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int64_t kGiB = int64_t{1} << 30;
const std::vector<DeviceCapacity> kDevices = {{0, 8 * kGiB}, {1, 8 * kGiB}};

PartitionSpec Spec(std::string name, int64_t gib, double compute, int device = 0) {
  return {.name = std::move(name),
          .device_index = device,
          .memory_quota_bytes = gib * kGiB,
          .compute_share = compute};
}

PartitionStatus Running(PartitionSpec spec, int sessions = 0) {
  PartitionStatus status;
  status.spec = std::move(spec);
  status.sessions = sessions;
  return status;
}

std::vector<std::string> CreatedNames(const PartitionReloadPlan& plan) {
  std::vector<std::string> names;
  for (const PartitionSpec& spec : plan.creations) names.push_back(spec.name);
  return names;
}

TEST(PartitionReloadTest, SameFileChangesNothing) {
  const std::vector<PartitionStatus> running = {Running(Spec("a", 4, 0.5), 1),
                                                Running(Spec("default", 4, 0.5), 2)};
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      PartitionReloadPlan plan,
      PlanPartitionReload(running, {"a", "default"}, {Spec("a", 4, 0.5)}, kDevices));
  EXPECT_TRUE(plan.empty());
}

TEST(PartitionReloadTest, CreatesNewUpdatesChangedAndResizesTheImpliedDefault) {
  const std::vector<PartitionStatus> running = {Running(Spec("a", 2, 0.25), 3),
                                                Running(Spec("default", 6, 0.75), 1)};
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      PartitionReloadPlan plan,
      PlanPartitionReload(running, {"a", "default"},
                          {Spec("a", 3, 0.25), Spec("b", 1, 0.25), Spec("c", 1, 0.5, 1)},
                          kDevices));
  EXPECT_THAT(plan.deletions, IsEmpty());
  EXPECT_THAT(CreatedNames(plan), UnorderedElementsAre("b", "c"));
  ASSERT_EQ(plan.updates.size(), 2u);
  EXPECT_EQ(plan.updates[0].to.name, "a");
  EXPECT_THAT(plan.updates[0].changes, ElementsAre("memory 2 GiB -> 3 GiB"));
  // "default" gets what a (3 GiB, 0.25) and b (1 GiB, 0.25) leave of device 0.
  EXPECT_EQ(plan.updates[1].to.name, "default");
  EXPECT_EQ(plan.updates[1].to.memory_quota_bytes, 4 * kGiB);
  EXPECT_DOUBLE_EQ(plan.updates[1].to.compute_share, 0.5);
  // Lowered first: never above either end, so no step overcommits the device.
  EXPECT_EQ(plan.updates[1].lowered.memory_quota_bytes, 4 * kGiB);
  EXPECT_DOUBLE_EQ(plan.updates[1].lowered.compute_share, 0.5);
  EXPECT_EQ(plan.updates[0].lowered.memory_quota_bytes, 2 * kGiB);
}

TEST(PartitionReloadTest, DeletesRemovedPartitionsOnlyWithoutSessions) {
  const std::vector<PartitionStatus> running = {
      Running(Spec("idle", 1, 0.1)), Running(Spec("busy", 1, 0.1), 2),
      Running(Spec("keep", 1, 0.1)), Running(Spec("default", 5, 0.7))};
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionReloadPlan plan,
                              PlanPartitionReload(running, {"idle", "busy", "keep", "default"},
                                                  {Spec("keep", 1, 0.1)}, kDevices));
  EXPECT_THAT(plan.deletions, ElementsAre("idle"));
  ASSERT_EQ(plan.kept.size(), 1u);
  EXPECT_EQ(plan.kept[0].name, "busy");
  EXPECT_THAT(plan.kept[0].reason, HasSubstr("has 2 session(s)"));
  // "default" grows into what "idle" leaves, not into "busy"'s share.
  ASSERT_EQ(plan.updates.size(), 1u);
  EXPECT_EQ(plan.updates[0].to.memory_quota_bytes, 6 * kGiB);
  EXPECT_NEAR(plan.updates[0].to.compute_share, 0.8, 1e-9);
}

TEST(PartitionReloadTest, LeavesPartitionsMadeThroughTheAdminApiAlone) {
  const std::vector<PartitionStatus> running = {Running(Spec("made-by-ctl", 1, 0.1)),
                                                Running(Spec("default", 7, 0.9))};
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionReloadPlan plan,
                              PlanPartitionReload(running, {"default"}, {}, kDevices));
  EXPECT_TRUE(plan.empty());
}

TEST(PartitionReloadTest, NamedDefaultReplacesTheImpliedOne) {
  const std::vector<PartitionStatus> running = {Running(Spec("default", 8, 1.0), 1)};
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      PartitionReloadPlan plan,
      PlanPartitionReload(running, {"default"}, {Spec("default", 2, 0.5)}, kDevices));
  ASSERT_EQ(plan.updates.size(), 1u);
  EXPECT_THAT(plan.updates[0].changes, ElementsAre("memory 8 GiB -> 2 GiB", "compute 1 -> 0.5"));
}

TEST(PartitionReloadTest, MovesAPartitionToAnotherDeviceOnlyWithoutSessions) {
  const std::vector<PartitionStatus> running = {Running(Spec("idle", 1, 0.1)),
                                                Running(Spec("busy", 1, 0.1), 1),
                                                Running(Spec("default", 6, 0.8))};
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      PartitionReloadPlan plan,
      PlanPartitionReload(running, {"idle", "busy", "default"},
                          {Spec("idle", 1, 0.1, 1), Spec("busy", 1, 0.1, 1)}, kDevices));
  EXPECT_THAT(plan.deletions, ElementsAre("idle"));
  EXPECT_THAT(CreatedNames(plan), ElementsAre("idle"));
  ASSERT_EQ(plan.kept.size(), 1u);
  EXPECT_THAT(plan.kept[0].reason, HasSubstr("moves from device 0 to 1"));
}

TEST(PartitionReloadTest, RefusesWhatDoesNotFitAsAWhole) {
  const std::vector<PartitionStatus> running = {Running(Spec("busy", 4, 0.5), 1),
                                                Running(Spec("default", 4, 0.5))};
  // "busy" stays (it has a session), so 6 GiB more does not fit device 0's 8 GiB.
  EXPECT_THAT(PlanPartitionReload(running, {"busy", "default"}, {Spec("big", 6, 0.5)}, kDevices),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("do not fit"), HasSubstr("busy"))));
}

TEST(PartitionReloadTest, RefusesDuplicateNamesAndMissingDevices) {
  EXPECT_THAT(PlanPartitionReload({}, {}, {Spec("a", 1, 0.1), Spec("a", 1, 0.1)}, kDevices),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("named twice")));
  EXPECT_THAT(PlanPartitionReload({}, {}, {Spec("a", 1, 0.1, 5)}, kDevices),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 5 does not exist")));
}

TEST(PartitionReloadTest, DescribesEveryChangedField) {
  PartitionSpec from = Spec("a", 1, 0.5);
  PartitionSpec to = from;
  to.bandwidth_cap = 0.75;
  to.max_queued_tasks = 8;
  to.spill = true;
  to.reserve_sms = true;
  to.session_defaults.memory_limit_bytes = kGiB;
  EXPECT_THAT(DescribePartitionChanges(from, to),
              ElementsAre("bandwidth 0 -> 0.75", "maxQueuedTasks 1024 -> 8", "spill false -> true",
                          "reserveSms false -> true", "defaultLimits.memory none -> 1 GiB"));
  EXPECT_THAT(DescribePartitionChanges(from, from), IsEmpty());
}

}  // namespace
}  // namespace gpukit
