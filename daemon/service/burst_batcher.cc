#include "daemon/service/burst_batcher.h"

namespace gpukit::service {

void BurstBatcher::BeforeOp(Device& device) {
  const int cap = batches_ended_ >= 4 ? kOpsPerDeviceBatch : 1 << batches_ended_;
  if (batch_ != nullptr && ops_in_batch_ >= cap) {
    EndBatch();
    ++batches_ended_;
  }
  if (batch_ == nullptr) {
    batch_ = std::make_unique<DeviceBatch>(device);
    ops_in_batch_ = 0;
  }
  ++ops_in_batch_;
}

void BurstBatcher::EndBurst() {
  if (batch_ != nullptr) EndBatch();
  batches_ended_ = 0;
}

void BurstBatcher::EndBatch() {
  batch_.reset();
  if (after_batch_) after_batch_();
}

}  // namespace gpukit::service
