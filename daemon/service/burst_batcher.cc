#include "daemon/service/burst_batcher.h"

#include <algorithm>

namespace gpukit::service {

void BurstBatcher::BeforeOp(Device& device) {
  if (batch_ != nullptr && ops_in_batch_ >= batch_cap_) {
    EndBatch();
    batch_cap_ = std::min(2 * batch_cap_, kOpsPerDeviceBatch);
  }
  if (batch_ == nullptr) {
    batch_ = std::make_unique<DeviceBatch>(device);
    ops_in_batch_ = 0;
  }
  ++ops_in_batch_;
}

void BurstBatcher::EndBurst() {
  if (batch_ != nullptr) EndBatch();
  batch_cap_ = 1;
}

void BurstBatcher::EndBatch() {
  batch_.reset();
  if (after_batch_) after_batch_();
}

}  // namespace gpukit::service
