// Device: the one interface every backend implements (CPU simulation now, CUDA later).
//
// Everything above runtime/ talks to a GPU only through this interface, and only through
// opaque ids: no CUDA type and no device pointer crosses it. That keeps the door open for a
// device executor in a child process (a faulting kernel poisons its whole process, so
// containing a tenant's bad kernel needs a process boundary): every call here can be
// carried over a pipe or shared memory as it is.
//
// Work is asynchronous and stream-ordered, as on a GPU: Copy*, RunOp and Launch enqueue
// work on a stream and return once it is queued (validation errors are returned at once);
// RecordEvent + WaitEvent observe completion and report the first execution error of the
// work enqueued on that stream before the event. A batch of ops bracketed by events, waited
// for once at its last event, gets each op's error and device time from WaitEventPairs.
//
//   GPUKIT_ASSIGN_OR_RETURN(BufferId buf, device.Allocate(1024));
//   GPUKIT_RETURN_IF_ERROR(device.CopyHostToDevice(buf, 0, host, 1024, stream));
//   GPUKIT_ASSIGN_OR_RETURN(EventId done, device.RecordEvent(stream));
//   GPUKIT_RETURN_IF_ERROR(device.WaitEvent(done));   // host memory may be reused now
//   GPUKIT_RETURN_IF_ERROR(device.DestroyEvent(done));
//
// Thread safety: every method may be called from any thread. Work on one stream runs in
// enqueue order; work on different streams may run concurrently. Freeing a buffer that
// queued work still uses is the caller's error (the session layer waits first).
#ifndef GPUKIT_RUNTIME_DEVICE_H_
#define GPUKIT_RUNTIME_DEVICE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/base/unix_fd.h"
#include "runtime/host_buffer.h"
#include "runtime/op_registry.h"
#include "runtime/sm_layout.h"

namespace gpukit {

enum class BackendKind { kCpu, kCuda };
absl::string_view BackendName(BackendKind backend);

// Opaque ids, unique per device for its lifetime; 0 is never a valid id.
struct BufferId {
  uint64_t value = 0;
  friend bool operator==(BufferId, BufferId) = default;
};
struct StreamId {
  uint64_t value = 0;
  friend bool operator==(StreamId, StreamId) = default;
};
struct EventId {
  uint64_t value = 0;
};
struct ModuleId {
  uint64_t value = 0;
};
struct FunctionId {
  uint64_t value = 0;
};

// Two events of one stream that bracket one piece of work (an op): WaitEventPairs.
struct EventPair {
  EventId start;
  EventId end;
};
// What WaitEventPairs gives for one pair: the status WaitEvent(end) returns (the first error of
// the work enqueued between the event before `end` and `end`) and, where that is OK, the
// device time EventElapsedNs(start, end) gives (an error of that becomes `status`; 0 then).
struct EventPairOutcome {
  absl::Status status;
  int64_t elapsed_ns = 0;
};

// How an exported buffer's memory is named for another process (Device::ExportBuffer).
enum class ExportForm {
  // A VMM allocation's POSIX file descriptor, passed over a unix socket: the memory lives on
  // while any process maps it, whatever its owner does.
  kDescriptor,
  // A legacy CUDA IPC handle (64 bytes of cuIpcGetMemHandle) of cuMemAlloc memory, for
  // processes that cannot receive descriptors. The CUDA driver leaves what happens to a
  // mapping undefined once the owner frees the memory, so the owner must keep it allocated
  // for as long as any process may map it.
  kCudaIpcHandle,
};

// A buffer's memory as another process can map it (Device::ExportBuffer).
struct ExportedBuffer {
  // kDescriptor: the descriptor, which the receiving process imports
  // (cuMemImportFromShareableHandle) and maps whole.
  ScopedFd fd;
  // kCudaIpcHandle: the handle, which the receiving process opens (cuIpcOpenMemHandle).
  std::string cuda_ipc_handle;
  int64_t allocation_bytes = 0;  // the size of what the descriptor names (to map whole)
  int64_t offset_bytes = 0;      // where the buffer starts in it
  int64_t bytes = 0;             // the buffer's size
};

// Memory another process allocated that a buffer may use as its own (Device::ImportBuffer).
// It comes in one of two forms: a file descriptor, mapped whole (on CUDA a VMM allocation's
// POSIX descriptor from cuMemExportToShareableHandle; on the CPU backend a shared file such as
// a memfd), or, when `cuda_ipc_handle` is set, a legacy CUDA IPC handle (the 64 bytes of
// cuIpcGetMemHandle, for cuMemAlloc memory).
struct ImportedMemory {
  ScopedFd fd;
  int64_t allocation_bytes = 0;  // the size of what `fd` names
  std::string cuda_ipc_handle;
  int64_t offset_bytes = 0;  // where the buffer starts in the allocation
  int64_t bytes = 0;         // the buffer's size
};

struct DeviceProperties {
  int index = 0;
  std::string name;
  BackendKind backend = BackendKind::kCpu;
  int64_t memory_total_bytes = 0;
  // Devices that run compiled kernels (CUDA): NVRTC's --gpu-architecture for them ("sm_90")
  // and their launch limits. Empty and 0 elsewhere.
  std::string kernel_arch;
  int max_grid_dim[3] = {0, 0, 0};
  int max_block_dim[3] = {0, 0, 0};
  int max_threads_per_block = 0;
  // Shared memory a block may use when it opts in (static plus dynamic).
  int max_shared_memory_per_block_optin_bytes = 0;
};

struct MemoryInfo {
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;  // held by live buffers
};

// Scheduling hint for a stream; backends map it to their own priority range.
enum class StreamPriority { kLow, kNormal, kHigh };

// How long, about, one slice of a large matmul runs on a low-priority and on a
// normal-priority stream (runtime/cuda/matmul_plan.h, "Slices"): the longest a
// higher-priority stream's kernel waits behind such a matmul. High-priority streams never
// slice; zero: never. Backends that cannot slice ignore it.
struct MatmulSliceLengths {
  absl::Duration low_priority = absl::Microseconds(100);
  absl::Duration normal_priority = absl::Microseconds(500);
};

// How a stream is made (see ValidateStreamOptions).
struct StreamOptions {
  StreamPriority priority = StreamPriority::kNormal;
  // The share of the device's SMs its kernels may run on, in (0, 1]; 1: all of them. Without
  // `sm_first`, a CUDA device puts a stream with a share below 1 in a green context of that
  // share of its SMs (rounded down to the GPU's granularity, at least its minimum; one green
  // context per SM count, shared by every stream that asks for it, so two such streams get the
  // same SMs whatever their shares). It confines that stream's kernels only: kernels of other
  // streams still use every SM.
  double sm_share = 1;
  // Where the stream's SMs start, as a fraction of the SMs the device's groups hold (every SM
  // where the split's remainder is a group), in [0, 1) with sm_first + sm_share <= 1: the
  // stream gets the groups of [sm_first, sm_first + sm_share) (PlaceSmGroups in
  // runtime/sm_layout.h), so that streams whose placements do not overlap run on disjoint
  // SMs, and streams of one placement share them (one green context per distinct group range
  // on CUDA). Placements may overlap: what overlaps shares SMs. Unset: `sm_share` alone, as
  // above.
  std::optional<double> sm_first;
};

struct LaunchConfig {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_memory_bytes = 0;
};

// One argument of a raw kernel launch: a buffer (passed as its device address), a scalar
// passed by value (`bytes` holds its little-endian representation, `size_bytes` of 1 to 8),
// or a struct passed by value (kBlock: `size_bytes` bytes at `block`, which must stay valid
// until Launch returns; the built-in kernels' parameter blocks).
struct KernelArg {
  enum class Kind { kBuffer, kScalar, kBlock } kind = Kind::kScalar;
  BufferId buffer;
  uint8_t bytes[8] = {};
  uint32_t size_bytes = 0;
  const void* block = nullptr;
};

// An operand of a built-in op as the device sees it: a buffer with its layout, or a scalar.
struct OpOperand {
  bool is_scalar = false;
  BufferId buffer;     // when !is_scalar
  TensorDesc desc;     // when !is_scalar
  ScalarValue scalar;  // when is_scalar
};

// A built-in op planned by the OpRegistry, ready to run on a device.
struct OpLaunch {
  const OpDef* op = nullptr;
  OpPlan plan;
  std::vector<OpOperand> inputs;
  BufferId output;  // allocated by the caller with plan.output's size
  // Whether a large op may run in slices on a lower-priority stream (MatmulSliceLengths), so
  // that higher-priority streams' work can pass between them. Slices cost speed (little in
  // 500 us slices, up to a third in 100 us ones: docs/benchmarks.md), so the caller clears
  // this when no work of a higher priority can come (no session of a higher class on the
  // device).
  bool sliceable = true;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceProperties& properties() const = 0;
  virtual MemoryInfo GetMemoryInfo() const = 0;

  // Allocates `bytes` (> 0 or 0) of device memory, uninitialised. RESOURCE_EXHAUSTED when
  // the device cannot hold it.
  virtual absl::StatusOr<BufferId> Allocate(int64_t bytes) = 0;
  // NOT_FOUND for an unknown or already freed buffer.
  virtual absl::Status Free(BufferId buffer) = 0;
  // Size the buffer was allocated with; NOT_FOUND if unknown.
  virtual absl::StatusOr<int64_t> BufferBytes(BufferId buffer) const = 0;

  // Host memory for data the device copies in bulk (spilled arrays): on a GPU page-locked,
  // so copies to and from it need no staging and run at the bus's speed; ordinary memory
  // here by default. 64-byte aligned; uninitialised; empty for 0 bytes. RESOURCE_EXHAUSTED
  // when the host has no memory for it. The buffer must not outlive the device.
  virtual absl::StatusOr<HostBuffer> AllocateHostBuffer(int64_t bytes);
  // Host memory mapped by the caller (a client's shared memory) that copies will use in bulk:
  // on a GPU it is page-locked for the copy engines; nothing happens by default. A range
  // that cannot be registered still works for copies, at the speed of ordinary memory, so
  // failures are for logging. Unregister before unmapping; `data` must be what was registered.
  // `shared_fd`, when >= 0, is a descriptor of the shared file mapped at `data` from its
  // start (a client's memfd): a device whose copies run in another process (the device
  // executor) maps that file there so copies stay zero-copy. Not kept past the call.
  virtual absl::Status RegisterHostMemory(void* data, int64_t bytes, int shared_fd = -1);
  virtual absl::Status UnregisterHostMemory(void* data);

  // Memory another process owns, mapped whole (gpukitd's, for its device executor): on CUDA
  // a VMM allocation's POSIX descriptor (cuMemCreate + cuMemExportToShareableHandle), on the
  // CPU backend a shared file (a memfd). `key` is the caller's name for it, unique among the
  // mapped segments. Buffers over ranges of it come from BufferInSegment; Free of such a
  // buffer forgets the range and leaves the memory mapped; UnmapSegment unmaps it once no
  // buffer uses it (FAILED_PRECONDITION while one does). The memory does not count in
  // GetMemoryInfo's used bytes (its owner accounts for it). INVALID_ARGUMENT for a descriptor
  // that cannot be mapped or a key in use; FAILED_PRECONDITION by default.
  virtual absl::Status MapSegment(uint64_t key, ScopedFd fd, int64_t bytes);
  virtual absl::Status UnmapSegment(uint64_t key);
  // A buffer over [offset, offset + bytes) of a mapped segment. NOT_FOUND for an unknown
  // key, OUT_OF_RANGE for a range outside the segment.
  virtual absl::StatusOr<BufferId> BufferInSegment(uint64_t key, int64_t offset, int64_t bytes);

  // Whether the device can still run work. A CUDA context that took a sticky fault (an
  // illegal address, a trap, ...) cannot: every later call fails, and only a new process can
  // use the GPU again; then this returns the fault (INTERNAL naming it). OK by default.
  virtual absl::Status CheckHealth();

  // Exports a buffer's memory to another process in `form`; the buffer stays usable here. Its
  // memory is then an allocation of its own (nothing else of the device's can be reached
  // through it; the buffer moves there first if it must) and is never given to another
  // buffer: once freed, a descriptor's lives on only as long as mappings elsewhere. A buffer
  // is exported in one form only (the other is FAILED_PRECONDITION), as often as asked.
  // Queued work on the buffer must have completed. FAILED_PRECONDITION on backends whose
  // memory cannot be exported (the CPU backend: use host shared memory), INVALID_ARGUMENT for
  // a zero-byte buffer, NOT_FOUND for an unknown one.
  virtual absl::StatusOr<ExportedBuffer> ExportBuffer(BufferId buffer, ExportForm form);
  // A buffer over memory another process allocated and shares (a client's own device memory):
  // no copy, the buffer's memory is the owner's. Freeing the buffer unmaps it and leaves the
  // memory to its owner, who must keep it until then. It does not count in GetMemoryInfo's
  // used bytes, and ExportBuffer refuses it. INVALID_ARGUMENT for memory that cannot be
  // mapped (a forged handle, a descriptor that is not shareable memory) or a range outside it;
  // FAILED_PRECONDITION on backends that cannot map the form (a CUDA IPC handle on the CPU
  // backend; every form by default).
  virtual absl::StatusOr<BufferId> ImportBuffer(ImportedMemory memory);

  // INVALID_ARGUMENT for options ValidateStreamOptions refuses.
  virtual absl::StatusOr<StreamId> CreateStream(const StreamOptions& options) = 0;
  absl::StatusOr<StreamId> CreateStream(StreamPriority priority) {
    return CreateStream(StreamOptions{.priority = priority});
  }
  // Waits for the stream's queued work, then destroys it.
  virtual absl::Status DestroyStream(StreamId stream) = 0;
  // The SMs `stream`'s kernels may run on, as its StreamOptions gave them (SmLayout's
  // arithmetic over the device's SM groups; every SM for a plain stream): on CUDA its green
  // context's count, on the CPU backend the same arithmetic over a nominal GPU's SMs
  // (CpuDeviceOptions). For status and tests; no device call. NOT_FOUND for an unknown
  // stream; UNAVAILABLE where the device could not tell (a stream a RemoteDevice made while
  // its executor restarted); FAILED_PRECONDITION by default.
  virtual absl::StatusOr<int> StreamSmCount(StreamId stream) const;

  // Copies enqueue on `stream`; the host memory must stay valid until an event recorded
  // after the copy completes. OUT_OF_RANGE if the range exceeds the buffer.
  virtual absl::Status CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src,
                                        int64_t bytes, StreamId stream) = 0;
  virtual absl::Status CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset, int64_t bytes,
                                        StreamId stream) = 0;
  virtual absl::Status CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                          int64_t src_offset, int64_t bytes, StreamId stream) = 0;
  // Sets `bytes` bytes of `buffer` from `offset` on to zero, enqueued on `stream` like a copy
  // (an event recorded after it completes says it is done). OUT_OF_RANGE if the range exceeds
  // the buffer. The default copies from a static zeroed host block in 1 MiB pieces; backends
  // override it with a device memset. Thread-safe as the copies are.
  virtual absl::Status FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream);

  virtual absl::StatusOr<EventId> RecordEvent(StreamId stream) = 0;
  // Blocks until the work before the event has run; returns the first error that work
  // produced (since the previous event on the same stream).
  virtual absl::Status WaitEvent(EventId event) = 0;
  // True once the work before the event has run (its error is reported by WaitEvent).
  virtual absl::StatusOr<bool> QueryEvent(EventId event) = 0;
  virtual absl::Status DestroyEvent(EventId event) = 0;
  // DestroyEvent for each of `events`; returns the first error (each event is destroyed
  // whatever another's). The default destroys them one by one; a device behind a channel
  // (RemoteDevice) sends them as one request.
  virtual absl::Status DestroyEvents(absl::Span<const EventId> events);
  // Device time, in nanoseconds, that the work enqueued between two completed events of one
  // stream took: what pacing charges. On a GPU the time between the events (cuEventElapsed
  // Time); on the CPU backend the time its threads spent executing that work (the simulated
  // device clock), so time a stream sat idle is not counted. FAILED_PRECONDITION if either
  // event has not completed, INVALID_ARGUMENT for events of different streams or `end`
  // recorded before `start`.
  virtual absl::StatusOr<int64_t> EventElapsedNs(EventId start, EventId end) = 0;
  // A pair's outcome without blocking: FAILED_PRECONDITION while `end` has not completed;
  // else the error WaitEvent(end) returns, or, when that is OK, EventElapsedNs(start, end).
  // The default makes those calls (QueryEvent, WaitEvent, EventElapsedNs); a GPU answers a
  // completed pair of a healthy device in one driver call (CudaDevice).
  virtual absl::StatusOr<int64_t> ElapsedNsIfCompleted(EventId start, EventId end);
  // Waits until the last pair's end event has completed, then gives, for each pair (events of
  // one stream, each pair's end recorded no earlier than the one before it: a batch of
  // pipelined ops), its EventPairOutcome: what a batch of ops that waits only for its last op
  // needs (each op's own error and device time). Every pair gets an answer, whatever another
  // pair's; an unknown event is that pair's NOT_FOUND, as WaitEvent gives it. Costs: the
  // default waits for the last and measures pair by pair (ElapsedNsIfCompleted); a device in
  // another process (RemoteDevice) takes one round trip for the batch (the pairs go with the
  // wait, up to 512 of them), unless the wait failed (a fault, a restart), when it too goes
  // pair by pair so that each pair's error is what WaitEvent gives. Empty `pairs`: empty
  // answer, no wait.
  virtual std::vector<EventPairOutcome> WaitEventPairs(absl::Span<const EventPair> pairs);

  // Runs a built-in op planned by the OpRegistry. UNIMPLEMENTED if this backend has no
  // implementation of the op (see SupportsOp).
  virtual bool SupportsOp(absl::string_view op_name) const = 0;
  virtual absl::Status RunOp(const OpLaunch& launch, StreamId stream) = 0;
  // RecordEvent, RunOp, RecordEvent on `stream`: the op between two new events, returned in
  // `*start` and `*end` (what a pipelined op's task waits for and measures). On an error no
  // event is left; nothing is queued unless the end event's record failed after the op was
  // queued. The default makes the three calls; a device behind a channel (RemoteDevice)
  // sends them as one request.
  virtual absl::Status RunOpBetweenEvents(const OpLaunch& launch, StreamId stream, EventId* start,
                                          EventId* end);

  // Compiled device code (a cubin or PTX image) and raw kernel launches. Backends that
  // cannot run device code return FAILED_PRECONDITION.
  virtual absl::StatusOr<ModuleId> LoadModule(absl::string_view image) = 0;
  virtual absl::Status UnloadModule(ModuleId module) = 0;
  virtual absl::StatusOr<FunctionId> GetFunction(ModuleId module, absl::string_view name) = 0;
  virtual absl::Status Launch(FunctionId function, const LaunchConfig& config,
                              absl::Span<const KernelArg> args, StreamId stream) = 0;

  // Batching, for a device behind a channel (RemoteDevice; in-process devices ignore it):
  // between BeginBatch and EndBatch on one thread, the stream work that thread enqueues
  // (copies, fills, ops, launches, events) may be held back and sent together with the next
  // request that waits for an answer (a wait, a query), with another thread's work, or at
  // the outermost EndBatch at the latest. Nothing else changes: the order of a stream's work,
  // errors, waits. A thread that enqueues work and then blocks on something other than this
  // device's own waits must end its batch first, unless what it blocks on is another thread's
  // wait on this device (which sends what is held first: OpPipeline::Sync). Nests. Use
  // DeviceBatch, not the calls.
  virtual void BeginBatch() {}
  virtual void EndBatch() {}

  // A hint that stream work follows within tens of microseconds (a client's request has
  // arrived and is being handled): a device behind a channel whose far end may be asleep
  // wakes it now, so that its wake-up overlaps the caller's handling of the request
  // (RemoteDevice; in-process devices ignore it). Cheap: at most one small one-way message,
  // and only after a quiet spell; no effect on what runs or in which order.
  virtual void ExpectWork() {}
};

// A scope of Device::BeginBatch/EndBatch:
//
//   {
//     DeviceBatch batch(device);
//     ... RecordEvent, RunOp, RecordEvent, WaitEvent ...  // one message to the executor
//   }
class DeviceBatch {
 public:
  explicit DeviceBatch(Device& device) : device_(device) { device_.BeginBatch(); }
  ~DeviceBatch() { device_.EndBatch(); }
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

 private:
  Device& device_;
};

// For ImportBuffer's implementations: INVALID_ARGUMENT unless `memory` names > 0 bytes at a
// non-negative offset inside its allocation (as far as the allocation's size is known: it is
// for descriptors; an IPC handle's allocation is sized by the driver once opened).
absl::Status CheckImportedRange(const ImportedMemory& memory);

// The exact pair-by-pair answer, once the last pair's end was waited for with `last` as its
// status: every other pair by WaitEvent(end) and, when OK, EventElapsedNs. What
// Device::WaitEventPairs's default falls back to (when the last wait failed, and for a pair
// ElapsedNsIfCompleted did not answer OK), and what a device whose own path fails over uses
// (RemoteDevice, after a failed wait: the last's error is not asked twice; its waits must not
// be repeated, since a restart's culprit error is given once).
std::vector<EventPairOutcome> WaitEventPairsOneByOne(Device& device,
                                                     absl::Span<const EventPair> pairs,
                                                     absl::Status last);

// INVALID_ARGUMENT naming the value when `options.sm_share` is not in (0, 1], or, with
// `sm_first`, when sm_first is not in [0, 1) or sm_first + sm_share exceeds 1 (by more than
// rounding).
absl::Status ValidateStreamOptions(const StreamOptions& options);

// The SMs a stream made with `options` gets on a device of `layout` (StreamSmCount): the
// placement's groups with `sm_first` (PlacedSmCount), else SharedSmCount. The errors of
// ValidateStreamOptions.
absl::StatusOr<int> StreamSmCountFor(const SmLayout& layout, const StreamOptions& options);

// `enqueue` (work on `stream`) between two new events, returned in `*start` and `*end`: the
// default of Device::RunOpBetweenEvents, for any work. On an error no event is left; the
// work is queued only when the end event's record failed after it.
absl::Status EnqueueBetweenEvents(Device& device, StreamId stream,
                                  const std::function<absl::Status()>& enqueue, EventId* start,
                                  EventId* end);

// Enqueues an event on `stream` and waits for it: the synchronous tail of most requests.
absl::Status SynchronizeStream(Device& device, StreamId stream);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_DEVICE_H_
