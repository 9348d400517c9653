// BurstBatcher: how a Submit stream (submit_stream.h) groups a burst of pipelined ops into
// DeviceBatch scopes, so that their work goes to a device executor in a few messages instead
// of several per op.
//
// A burst is the ops of the requests that the stream's worker finds waiting one after the
// other; it ends when none waits (or at a sync point), and then whatever is held is sent.
// The batches of a burst double from one op to kOpsPerDeviceBatch: the burst's first op goes
// to the device at once, and each batch is sent while the device runs the ones before it
// (preparing an op takes gpukitd some microseconds, and a client's ops come some apart: a
// first batch of 8 held a burst of large ops' first op back by about 200 us, the device
// idle meanwhile); later batches share the messages' cost among up to kOpsPerDeviceBatch ops.
//
//   BurstBatcher batcher([&] { pipeline.ReleaseCompletions(); });  // after each batch
//   for (const Op& op : burst) {
//     batcher.BeforeOp(device);
//     ... RunOpBetweenEvents on `device` ...
//   }
//   pipeline.Sync();      // at a sync point: its wait joins the work held (device.h)
//   batcher.EndBurst();  // before waiting for the client
//
// Cost: a DeviceBatch (Device::BeginBatch/EndBatch) and a call of `after_batch` per batch;
// nothing else per op.
//
// Thread safety: one thread at a time (the stream's worker).
#ifndef GPUKIT_DAEMON_SERVICE_BURST_BATCHER_H_
#define GPUKIT_DAEMON_SERVICE_BURST_BATCHER_H_

#include <functional>
#include <memory>
#include <utility>

#include "runtime/device.h"

namespace gpukit::service {

// Most ops in a batch: half the default base window of ops in flight per pipeline
// (OpPipeline::BaseWindow, 32), so that one batch fills while the one before it runs,
// and the stream does not stop at the cap with a batch unsent. A burst's batches grow to it:
// 1, 2, 4, 8, 16, 16, ...
inline constexpr int kOpsPerDeviceBatch = 16;

class BurstBatcher {
 public:
  // `after_batch`, when set, runs after each batch ended (its work was sent).
  explicit BurstBatcher(std::function<void()> after_batch = nullptr)
      : after_batch_(std::move(after_batch)) {}
  BurstBatcher(const BurstBatcher&) = delete;
  BurstBatcher& operator=(const BurstBatcher&) = delete;
  // EndBurst.
  ~BurstBatcher() { EndBurst(); }

  // Before an op whose work goes to `device`: opens a batch, or ends the full one (its work
  // is sent) and opens the next.
  void BeforeOp(Device& device);
  // Ends the batch open, if any (its work is sent); the next op begins a new burst.
  void EndBurst();

 private:
  // Ends batch_ (there is one) and runs after_batch_.
  void EndBatch();

  const std::function<void()> after_batch_;
  std::unique_ptr<DeviceBatch> batch_;
  int ops_in_batch_ = 0;
  int batch_cap_ = 1;  // the open batch's: doubles with each batch of the burst
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_BURST_BATCHER_H_
