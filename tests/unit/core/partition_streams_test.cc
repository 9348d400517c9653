// PartitionStreams: a set of streams per partition and QoS class, made on first use with
// the class's priority, handed out round robin, and destroyed when the table and every
// lease have let go of it. The device records each stream it creates and destroys.
#include "daemon/core/partition_streams.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::gpukit::testing::StreamRecord;
using ::testing::HasSubstr;

std::unique_ptr<ForwardingDevice> RecordingDevice() {
  return std::make_unique<ForwardingDevice>(*CpuDevice::Create({}));
}

int LiveStreams(const ForwardingDevice& device) {
  int live = 0;
  for (const StreamRecord& s : device.streams()) live += !s.destroyed;
  return live;
}

class PartitionStreamsTest : public ::testing::Test {
 protected:
  StreamId Acquire(absl::string_view partition, QosClass qos) {
    absl::StatusOr<StreamLease> lease = table_.Acquire(partition, *device_, qos);
    EXPECT_THAT(lease, IsOk());
    if (!lease.ok()) return {};
    leases_.push_back(lease->owner);
    return lease->stream;
  }

  std::unique_ptr<ForwardingDevice> device_ = RecordingDevice();
  PartitionStreams table_{/*streams_per_class=*/2};
  std::vector<std::shared_ptr<const void>> leases_;
};

struct PriorityCase {
  QosClass qos;
  StreamPriority priority;
};

class PartitionStreamsPriorityTest : public PartitionStreamsTest,
                                     public ::testing::WithParamInterface<PriorityCase> {};

TEST_P(PartitionStreamsPriorityTest, FirstUseCreatesTheSetWithTheClassPriority) {
  EXPECT_EQ(PriorityOf(GetParam().qos), GetParam().priority);
  EXPECT_TRUE(device_->streams().empty()) << "nothing is created before it is used";
  const StreamId stream = Acquire("a", GetParam().qos);
  const std::vector<StreamRecord> created = device_->streams();
  ASSERT_EQ(created.size(), 2u);
  for (const StreamRecord& s : created) EXPECT_EQ(s.priority, GetParam().priority);
  EXPECT_EQ(stream, created[0].id);
  EXPECT_EQ(table_.set_count(), 1);
}

INSTANTIATE_TEST_SUITE_P(
    Classes, PartitionStreamsPriorityTest,
    ::testing::Values(PriorityCase{QosClass::kGuaranteed, StreamPriority::kHigh},
                      PriorityCase{QosClass::kBurstable, StreamPriority::kNormal},
                      PriorityCase{QosClass::kBestEffort, StreamPriority::kLow}),
    [](const ::testing::TestParamInfo<PriorityCase>& info) {
      return std::string(QosName(info.param.qos));
    });

TEST_F(PartitionStreamsTest, HandsOutTheSetsStreamsRoundRobin) {
  const StreamId first = Acquire("a", QosClass::kBurstable);
  const StreamId second = Acquire("a", QosClass::kBurstable);
  const StreamId third = Acquire("a", QosClass::kBurstable);
  const StreamId fourth = Acquire("a", QosClass::kBurstable);
  EXPECT_NE(first, second);
  EXPECT_EQ(third, first);
  EXPECT_EQ(fourth, second);
  EXPECT_EQ(device_->streams().size(), 2u) << "later sessions reuse the set";
}

TEST_F(PartitionStreamsTest, PartitionsAndClassesNeverShareAStream) {
  std::vector<StreamId> seen;
  for (absl::string_view partition : {"a", "b"}) {
    for (QosClass qos : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
      std::vector<StreamId> mine = {Acquire(partition, qos), Acquire(partition, qos)};
      for (StreamId stream : mine) {
        EXPECT_THAT(seen, ::testing::Not(::testing::Contains(stream)))
            << partition << " " << QosName(qos);
      }
      seen.insert(seen.end(), mine.begin(), mine.end());
    }
  }
  EXPECT_EQ(device_->streams().size(), 12u);
  EXPECT_EQ(table_.set_count(), 6);
}

TEST_F(PartitionStreamsTest, SameNameOnAnotherDeviceGetsThatDevicesStreams) {
  std::unique_ptr<ForwardingDevice> other = RecordingDevice();
  Acquire("a", QosClass::kBestEffort);
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamLease lease,
                              table_.Acquire("a", *other, QosClass::kBestEffort));
  ASSERT_EQ(other->streams().size(), 2u);
  EXPECT_EQ(lease.stream, other->streams()[0].id);
  lease.owner.reset();
  leases_.clear();
  table_.RemoveAll();
  EXPECT_EQ(LiveStreams(*other), 0);
}

TEST_F(PartitionStreamsTest, RemovedSetIsDestroyedWhenItsLastLeaseDrops) {
  Acquire("a", QosClass::kGuaranteed);
  Acquire("a", QosClass::kBestEffort);
  Acquire("b", QosClass::kBestEffort);
  ASSERT_EQ(LiveStreams(*device_), 6);
  std::vector<std::shared_ptr<const void>> removed = table_.Remove("a");
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(table_.set_count(), 1);
  removed.clear();
  EXPECT_EQ(LiveStreams(*device_), 6) << "the leases still hold a's streams";
  leases_.erase(leases_.begin(), leases_.begin() + 2);  // a's sessions end
  EXPECT_EQ(LiveStreams(*device_), 2) << "only b's are left";
  // "a" made again starts a new set.
  const size_t before = device_->streams().size();
  Acquire("a", QosClass::kBestEffort);
  EXPECT_EQ(device_->streams().size(), before + 2);
}

TEST_F(PartitionStreamsTest, RemovingAPartitionThatNeverHadASessionReturnsNothing) {
  Acquire("a", QosClass::kBestEffort);
  EXPECT_TRUE(table_.Remove("b").empty());
  EXPECT_EQ(table_.set_count(), 1);
}

TEST_F(PartitionStreamsTest, StreamsAreDestroyedWhenTheTableAndEveryLeaseAreGone) {
  Acquire("a", QosClass::kBestEffort);
  Acquire("b", QosClass::kBurstable);
  {
    PartitionStreams gone(/*streams_per_class=*/3);
    GPUKIT_ASSERT_OK(gone.Acquire("c", *device_, QosClass::kGuaranteed).status());
  }
  EXPECT_EQ(LiveStreams(*device_), 4) << "c's set went with its table and no lease";
  leases_.clear();
  EXPECT_EQ(LiveStreams(*device_), 4) << "the table still holds a's and b's";
  table_.RemoveAll();
  EXPECT_EQ(LiveStreams(*device_), 0);
  EXPECT_EQ(table_.set_count(), 0);
}

TEST_F(PartitionStreamsTest, FailedCreationDestroysWhatItMadeAndTheNextUseTriesAgain) {
  int calls = 0;
  device_->before_create_stream = [&calls](StreamPriority) {
    return ++calls == 2 ? absl::ResourceExhaustedError("no more streams") : absl::OkStatus();
  };
  EXPECT_THAT(table_.Acquire("a", *device_, QosClass::kBestEffort),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("no more streams")));
  ASSERT_EQ(device_->streams().size(), 1u);
  EXPECT_TRUE(device_->streams()[0].destroyed);
  EXPECT_EQ(table_.set_count(), 0);
  Acquire("a", QosClass::kBestEffort);
  EXPECT_EQ(LiveStreams(*device_), 2);
}

TEST(PartitionStreamsSmShareTest, OnlyBestEffortStreamsAreConfinedToTheirShare) {
  std::unique_ptr<ForwardingDevice> device = RecordingDevice();
  PartitionStreams table(/*streams_per_class=*/1, /*best_effort_sm_share=*/0.75);
  std::vector<std::shared_ptr<const void>> leases;
  for (QosClass qos : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    absl::StatusOr<StreamLease> lease = table.Acquire("p", *device, qos);
    ASSERT_THAT(lease, IsOk());
    leases.push_back(lease->owner);
  }
  const std::vector<StreamRecord> made = device->streams();
  ASSERT_EQ(made.size(), 3u);
  for (const StreamRecord& s : made) {
    EXPECT_EQ(s.sm_share, s.priority == StreamPriority::kLow ? 0.75 : 1.0);
  }
}

}  // namespace
}  // namespace gpukit
