// RemoteDevice: gpukitd's view of a device that a child process, the device executor, runs.
//
// A CUDA fault is sticky and poisons every context of its process, so a tenant's kernel that
// writes out of bounds would stop the GPU for every tenant of a daemon that ran it in its own
// process. RemoteDevice is the Device the rest of gpukitd uses; behind it:
//   - gpukitd owns the memory: device memory comes from a ShareableSegmentSource (cuMemCreate
//     POSIX descriptors on a GPU, memfds on the CPU backend) through a caching MemoryPool, host
//     memory for copies (spill buffers, staging) from memfd segments; the executor maps both.
//   - the executor (gpukit-executor, runtime/executor/executor_main.cc) holds the device and
//     runs every copy, op and launch. Requests go over a unix SOCK_SEQPACKET socketpair
//     (proto/gpukit/executor/executor.proto, descriptors with SCM_RIGHTS); work is sent
//     without waiting for a reply (errors of enqueued work come back with the next wait on
//     its stream, as on a GPU); calls that return something (waits, module loads, imports)
//     wait for their reply.
//   - RemoteDevice keeps every table worth keeping (segments, buffers, host segments, client
//     imports, streams, modules, functions), so that when the executor reports a sticky fault,
//     dies (a signal, an abort, the OOM killer) or runs work past the launch deadline (a
//     hang), it kills it, promotes the standby executor it started in advance (or starts
//     one), replays the tables into it under the same ids, and serves again. Every buffer
//     keeps its bytes (the memory never left gpukitd).
// Waits for work that was queued or running when the executor went fail: the oldest wait on
// the stream where a fault was seen (preferring one with a kernel launch in flight) gets
// ABORTED (its work faulted; the arrays it was writing are undefined), a hang's gets
// DEADLINE_EXCEEDED, every other UNAVAILABLE (the work may not have run; inputs are intact
// and a retry is safe). Each carries the payload kExecutorFaultPayload naming the kind, so
// the daemon can attribute faults to tenants. Calls made during the restart wait for it.
//
// Host pointers given to copies are translated to the executor's mapping when they lie in a
// host buffer of this device (AllocateHostBuffer) or in host memory registered with its
// descriptor (RegisterHostMemory's shared_fd): zero-copy. Any other host memory (a gRPC
// message) goes through a staging block of gpukitd's host segments: one memcpy more.
//
// Legacy CUDA IPC handles (ExportForm::kCudaIpcHandle) belong to a CUDA context, which dies
// with the executor: they are refused with FAILED_PRECONDITION (descriptors are the way).
//
//   RemoteDeviceOptions options;
//   options.executor_path = "/usr/libexec/gpukit/gpukit-executor";
//   options.executor_args = {"--backend=cpu", "--index=0"};
//   options.memory = std::make_unique<MemfdSegmentSource>(4 << 30, 64 << 10);
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteDevice> device,
//                           RemoteDevice::Create(std::move(options)));
//
// Thread safety: all methods are thread-safe (see Device).
#ifndef GPUKIT_RUNTIME_EXECUTOR_REMOTE_DEVICE_H_
#define GPUKIT_RUNTIME_EXECUTOR_REMOTE_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/device.h"
#include "runtime/executor/shareable_segment_source.h"
#include "runtime/memory_pool.h"

namespace gpukit {

namespace executor {
class RunOp;  // proto/gpukit/executor/executor.proto
}  // namespace executor

// The payload type URL on statuses of work the executor's failure cost; its value is the
// kind: "fault", "hang" or "exited" (the work's own failure), "restart" (a bystander's).
inline constexpr absl::string_view kExecutorFaultPayload = "gpukit.dev/executor-fault";

struct RemoteDeviceOptions {
  // The executor binary and its arguments (--backend, --index, ...).
  std::string executor_path;
  std::vector<std::string> executor_args;
  // Where device memory comes from; RemoteDevice owns it.
  std::unique_ptr<ShareableSegmentSource> memory;
  MemoryPoolOptions memory_pool;
  // Host segments for copies: spill buffers and staging. Cached up to this much.
  int64_t host_cache_bytes = int64_t{256} << 20;
  // Work that a wait has waited for this long is taken for a hang: the executor is killed.
  absl::Duration launch_deadline = absl::Seconds(30);
  // Starts the next executor in advance, so a restart need not wait for a device to open.
  bool standby = true;
  // How long an executor may take to open its device and say hello.
  absl::Duration start_timeout = absl::Seconds(120);
};

// What operators see of the executor (ListDevices).
struct ExecutorFaultRecord {
  absl::Time time;
  std::string kind;   // "fault", "exited", "hang"
  std::string error;  // the device's or the system's words
};
struct ExecutorState {
  int64_t pid = 0;  // 0 while restarting
  int64_t restarts = 0;
  bool standby_ready = false;
  std::optional<ExecutorFaultRecord> last_fault;
  // Requests that waited for the executor's reply since the device was created (waits,
  // queries, loads, device times, ...): each one round trip over the channel.
  int64_t round_trips = 0;
  // Datagrams sent to the executor: one-way requests (defining and freeing buffers,
  // destroying events, and the work of a DeviceBatch) are held back and go with the next,
  // so a synchronous op in a DeviceBatch is one datagram and its reply.
  int64_t messages = 0;
  // Of them, Wakes (ExpectWork).
  int64_t wakes = 0;
};

class RemoteDevice final : public Device {
 public:
  // Starts the executor (and the standby) and waits for its hello. FAILED_PRECONDITION with
  // the executor's reason when its device cannot be opened (no GPU, an old one).
  static absl::StatusOr<std::unique_ptr<RemoteDevice>> Create(RemoteDeviceOptions options);
  // Stops the executors (closing the channel lets them exit; they are killed if they do not).
  ~RemoteDevice() override;

  ExecutorState executor_state() const;
#if GPUKIT_FAULT_INJECTION
  // Test builds: the next `count` datagrams to the executor are not sent, each failing with
  // `error` as a failing sendmsg would (ENOBUFS, say) while the executor lives on.
  void FailSendsForTesting(int count, absl::Status error);
#endif

  const DeviceProperties& properties() const override;
  MemoryInfo GetMemoryInfo() const override;

  absl::StatusOr<BufferId> Allocate(int64_t bytes) override;
  absl::Status Free(BufferId buffer) override;
  absl::StatusOr<int64_t> BufferBytes(BufferId buffer) const override;
  absl::StatusOr<HostBuffer> AllocateHostBuffer(int64_t bytes) override;
  absl::Status RegisterHostMemory(void* data, int64_t bytes, int shared_fd = -1) override;
  absl::Status UnregisterHostMemory(void* data) override;
  absl::StatusOr<ExportedBuffer> ExportBuffer(BufferId buffer, ExportForm form) override;
  absl::StatusOr<BufferId> ImportBuffer(ImportedMemory memory) override;

  using Device::CreateStream;
  absl::StatusOr<StreamId> CreateStream(const StreamOptions& options) override;
  absl::Status DestroyStream(StreamId stream) override;
  // What the executor's device answered when the stream was made (CreateStream waits for it).
  absl::StatusOr<int> StreamSmCount(StreamId stream) const override;

  absl::Status CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src, int64_t bytes,
                                StreamId stream) override;
  absl::Status CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset, int64_t bytes,
                                StreamId stream) override;
  absl::Status CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                  int64_t src_offset, int64_t bytes, StreamId stream) override;
  // One one-way Fill request: the executor's device zeroes the range in the stream's order.
  absl::Status FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) override;

  absl::StatusOr<EventId> RecordEvent(StreamId stream) override;
  absl::Status WaitEvent(EventId event) override;
  absl::StatusOr<bool> QueryEvent(EventId event) override;
  absl::Status DestroyEvent(EventId event) override;
  // One request for all of them (held, as DestroyEvent's is).
  absl::Status DestroyEvents(absl::Span<const EventId> events) override;
  absl::StatusOr<int64_t> EventElapsedNs(EventId start, EventId end) override;
  // One WaitEvent for the last pair's end (a round trip), then the pairs measured already by
  // their end's wait (measured from the start) are answered here and the rest in one more
  // round trip (per 512 pairs), which the executor answers at once, each pair with its end
  // event's own error (an event whose work has not run is FAILED_PRECONDITION, never waited
  // for). Pair by pair (the default, the last's status reused) when that wait failed (a fault,
  // a restart: each pair then gets what WaitEvent attributes to it), when a pair is not of the
  // executor serving now or names an unknown event, or when the request fails.
  std::vector<EventPairOutcome> WaitEventPairs(absl::Span<const EventPair> pairs) override;

  bool SupportsOp(absl::string_view op_name) const override;
  absl::Status RunOp(const OpLaunch& launch, StreamId stream) override;
  // One RunOp request that carries both events (the executor records them around the op).
  absl::Status RunOpBetweenEvents(const OpLaunch& launch, StreamId stream, EventId* start,
                                  EventId* end) override;

  absl::StatusOr<ModuleId> LoadModule(absl::string_view image) override;
  absl::Status UnloadModule(ModuleId module) override;
  absl::StatusOr<FunctionId> GetFunction(ModuleId module, absl::string_view name) override;
  absl::Status Launch(FunctionId function, const LaunchConfig& config,
                      absl::Span<const KernelArg> args, StreamId stream) override;

  // Work enqueued inside the batch is held and goes with the next request that waits for an
  // answer (or another thread's request); the outermost EndBatch sends what is still held.
  void BeginBatch() override;
  void EndBatch() override;
  // Sends the executor a Wake when its channel has been quiet for half the executor reader's
  // polling time (ExecutorReaderPollTime; never on hosts where it does not poll): its reader
  // may be asleep, and a wake-up after a pause costs 100-250 us on the GPU host, which the
  // Wake overlaps with gpukitd's handling of the request (docs/benchmarks.md, "A burst's
  // first op: the wake-ups after a pause").
  void ExpectWork() override;

  class Impl;

 private:
  explicit RemoteDevice(std::unique_ptr<Impl> impl);
  // RunOp's checks and request: the op is supported and its buffers are known and hold its
  // operands; `encoded` gets the op (EncodeRunOp) with the places of its buffers of the pool.
  // With `order`, it also looks up the order lock of `stream` (NOT_FOUND for an unknown one)
  // in the same look at the tables: RunOpBetweenEvents takes the tables' lock once fewer per
  // op.
  absl::Status EncodeOp(const OpLaunch& launch, StreamId stream, executor::RunOp& encoded,
                        std::shared_ptr<absl::Mutex>* order = nullptr) const;
  // WaitEvent(event); with `pairs` (of event's stream, none after it) the executor's reply
  // also carries their outcomes, which go to `carried` (one per pair, in order) when the wait
  // ended OK in the executor; `carried` stays empty otherwise (the wait needed no request,
  // or the executor gave no outcomes).
  absl::Status WaitCarrying(EventId event, absl::Span<const EventPair> pairs,
                            std::vector<EventPairOutcome>* carried);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_REMOTE_DEVICE_H_
