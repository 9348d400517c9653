// PartitionStreams in SM placements: a partition's sets are made in the placement Acquire is
// given, replaced when it changes (open sessions keep the old streams), and report the SMs
// the device gave them (the CPU device counts over its nominal H100: 16 groups of 8 SMs and
// a last group of 4).
#include <memory>
#include <vector>

#include "daemon/core/partition_streams.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::StreamRecord;
using ::testing::Optional;

class PartitionStreamsPlacementTest : public ::testing::Test {
 protected:
  StreamLease Acquire(absl::string_view partition, QosClass qos, const SmPlacement& placement) {
    absl::StatusOr<StreamLease> lease =
        table_.Acquire(partition, device_, qos, placement, &replaced_);
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.ok() ? *std::move(lease) : StreamLease{};
  }

  ForwardingDevice device_{*CpuDevice::Create({})};
  PartitionStreams table_{/*streams_per_class=*/1, /*best_effort_sm_share=*/0.5};
  std::vector<std::shared_ptr<const void>> replaced_;
};

TEST_F(PartitionStreamsPlacementTest, ReservedPartitionsGetDisjointSmCounts) {
  const SmPlacement big{.first = 0.0, .share = 0.8};
  const SmPlacement small{.first = 0.8, .share = 0.2};
  StreamLease a = Acquire("big", QosClass::kGuaranteed, big);
  StreamLease b = Acquire("small", QosClass::kBurstable, small);
  EXPECT_EQ(table_.SmCount("big", device_, big), 104);     // groups 0..12
  EXPECT_EQ(table_.SmCount("small", device_, small), 28);  // groups 13..15 and the last, of 4
  const std::vector<StreamRecord> made = device_.streams();
  ASSERT_EQ(made.size(), 2u);
  EXPECT_THAT(made[0].sm_first, Optional(0.0));
  EXPECT_THAT(made[1].sm_first, Optional(0.8));
}

TEST_F(PartitionStreamsPlacementTest, BestEffortTakesItsShareOfThePlacement) {
  const SmPlacement placed{.first = 0.5, .share = 0.5};
  StreamLease g = Acquire("p", QosClass::kGuaranteed, placed);
  StreamLease be = Acquire("p", QosClass::kBestEffort, placed);
  EXPECT_THAT(device_.StreamSmCount(g.stream), testing::IsOkAndHolds(68));  // 8 x 8 + 4
  EXPECT_THAT(device_.StreamSmCount(be.stream), testing::IsOkAndHolds(32));
  const std::vector<StreamRecord> made = device_.streams();
  ASSERT_EQ(made.size(), 2u);
  EXPECT_THAT(made[1].sm_first, Optional(0.5));
  EXPECT_DOUBLE_EQ(made[1].sm_share, 0.25);
  EXPECT_EQ(table_.SmCount("p", device_, placed), 68) << "the most of its classes";
}

TEST_F(PartitionStreamsPlacementTest, NewPlacementReplacesTheSetsAndOpenLeasesKeepTheirs) {
  const SmPlacement before{.first = 0.0, .share = 0.5};
  const SmPlacement after{.first = 0.0, .share = 0.25};
  StreamLease old_lease = Acquire("p", QosClass::kBurstable, before);
  EXPECT_TRUE(replaced_.empty());
  EXPECT_EQ(table_.SmCount("p", device_, after), 0) << "nothing made in the new one yet";

  StreamLease new_lease = Acquire("p", QosClass::kBurstable, after);
  EXPECT_NE(new_lease.stream, old_lease.stream);
  EXPECT_EQ(replaced_.size(), 1u) << "the table's reference to the old set, for the caller";
  EXPECT_EQ(table_.SmCount("p", device_, after), 32);
  EXPECT_EQ(table_.set_count(), 1);

  // The old set lives while its session's lease does, then goes.
  replaced_.clear();
  EXPECT_THAT(device_.StreamSmCount(old_lease.stream), testing::IsOkAndHolds(64));
  old_lease.owner.reset();
  EXPECT_THAT(device_.StreamSmCount(old_lease.stream),
              testing::StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_.StreamSmCount(new_lease.stream), testing::IsOkAndHolds(32));
}

TEST_F(PartitionStreamsPlacementTest, SamePlacementReusesTheSet) {
  const SmPlacement placed{.first = 0.25, .share = 0.5};
  StreamLease first = Acquire("p", QosClass::kGuaranteed, placed);
  StreamLease second = Acquire("p", QosClass::kGuaranteed, placed);
  EXPECT_EQ(first.stream, second.stream);
  EXPECT_TRUE(replaced_.empty());
  EXPECT_EQ(device_.streams().size(), 1u);
}

}  // namespace
}  // namespace gpukit
