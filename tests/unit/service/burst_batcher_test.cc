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

TEST_F(BurstBatcherTest, SendsABurstsFirstOpAloneThenDoublesItsBatchesUpToTheCap) {
  BurstBatcher batcher;
  Ops(batcher, 1 + 2 + 4 + 8 + 2 * kOpsPerDeviceBatch + 5);
  // Batches of 1, 2, 4, 8, then 16 each; the last is held until the burst ends.
  EXPECT_THAT(ended_after_,
              ElementsAre(1, 3, 7, 15, 15 + kOpsPerDeviceBatch, 15 + 2 * kOpsPerDeviceBatch));
  batcher.EndBurst();
  EXPECT_EQ(ended_after_.back(), ops_);
  EXPECT_EQ(begun_, 7);
}

TEST_F(BurstBatcherTest, ANewBurstStartsWithAnOpAloneAgain) {
  BurstBatcher batcher;
  Ops(batcher, 20);
  batcher.EndBurst();
  ended_after_.clear();
  const int before = ops_;
  Ops(batcher, 2);
  EXPECT_THAT(ended_after_, ElementsAre(before + 1));
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
    Ops(batcher, 3);  // a batch of 1, then one of 2 open
  }
  EXPECT_THAT(ended_after_, ElementsAre(1, 3));
}

}  // namespace
}  // namespace gpukit::service
