// BurstBatcher: where a burst of pipelined ops is cut into device batches.
#include "daemon/service/burst_batcher.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"

namespace gpukit::service {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Counts the ops a test announces and notes, at each batch's end, how many came before it.
class BurstBatcherTest : public ::testing::Test {
 protected:
  BurstBatcherTest() {
    device_ = std::make_unique<testing::ForwardingDevice>(*CpuDevice::Create(CpuDeviceOptions{}));
    device_->on_begin_batch = [this] { ++begun_; };
    device_->on_end_batch = [this] { ended_after_.push_back(ops_); };
  }

  void Ops(BurstBatcher& batcher, int count) {
    for (int i = 0; i < count; ++i) {
      batcher.BeforeOp(*device_);
      ++ops_;
    }
  }

  std::unique_ptr<testing::ForwardingDevice> device_;
  int ops_ = 0;
  int begun_ = 0;
  std::vector<int> ended_after_;
};

TEST_F(BurstBatcherTest, CutsTheFirstBatchOfABurstShortAndLaterOnesLonger) {
  BurstBatcher batcher;
  Ops(batcher, kOpsInFirstDeviceBatch + 2 * kOpsPerDeviceBatch + 5);
  // The last batch is held until the burst ends.
  EXPECT_THAT(ended_after_, ElementsAre(kOpsInFirstDeviceBatch,
                                        kOpsInFirstDeviceBatch + kOpsPerDeviceBatch,
                                        kOpsInFirstDeviceBatch + 2 * kOpsPerDeviceBatch));
  batcher.EndBurst();
  EXPECT_EQ(ended_after_.back(), ops_);
  EXPECT_EQ(begun_, 4);
}

TEST_F(BurstBatcherTest, ANewBurstStartsWithAShortBatchAgain) {
  BurstBatcher batcher;
  Ops(batcher, kOpsInFirstDeviceBatch + 1);
  batcher.EndBurst();
  ended_after_.clear();
  const int before = ops_;
  Ops(batcher, kOpsInFirstDeviceBatch + 1);
  EXPECT_THAT(ended_after_, ElementsAre(before + kOpsInFirstDeviceBatch));
}

TEST_F(BurstBatcherTest, EndsNothingWhenNoOpCame) {
  BurstBatcher batcher;
  batcher.EndBurst();
  EXPECT_THAT(ended_after_, IsEmpty());
  EXPECT_EQ(begun_, 0);
}

TEST_F(BurstBatcherTest, EndsTheOpenBatchWhenDestroyed) {
  {
    BurstBatcher batcher;
    Ops(batcher, 3);
  }
  EXPECT_THAT(ended_after_, ElementsAre(3));
}

}  // namespace
}  // namespace gpukit::service
