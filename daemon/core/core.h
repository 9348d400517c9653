// Core: the daemon's one API, below gRPC. Services translate protobuf to these calls and
// back; nothing here knows protobuf or gRPC (Triton's "core" with thin frontends).
//
// It ties the layers together for each request: resolve the session (renewing its lease),
// resolve and pin its arrays (restoring spilled ones), plan the op with the OpRegistry,
// submit a task to the scheduler and wait for admission, reserve memory for the result
// (reclaiming BestEffort and over-request memory by spilling when the partition allows),
// run it on the session's stream between two events, charge the device time the events
// measured to the partition's pacing and account it to the session, partition, QoS class
// and tenant (ListSessions, ListTenants), and register the result with the session. Custom
// kernels take the same way: CompileKernel compiles client source with the JIT compiler
// (no task: it uses no device) into a kernel the session owns, and LaunchKernel runs one
// of its entries as a task of kind kernel on the session's pinned arrays.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<Core> core,
//                           Core::Create(clock, std::move(devices), options));
//   GPUKIT_ASSIGN_OR_RETURN(SessionGrant s, core->OpenSession(params));
//   GPUKIT_ASSIGN_OR_RETURN(ArrayView a, core->CreateArray(s.session_id, {kFloat32, {4}}));
//
// Streams: each partition has its own streams for each QoS class (PartitionStreams), so
// one partition's work never queues behind another's on a stream and the device time
// between a task's two events is its own partition's. A partition's streams of a class are
// created lazily, when its first session of that class opens: partitions are created
// through the scheduler, which knows no devices, so session opening is the one place that
// sees a partition together with its device, and a class no session uses costs no streams
// (no threads on the CPU backend). They stay while the partition exists, for its later
// sessions, unless its SM placement changes (sm_placement.h: computed from its device's
// partitions when a session opens): then later sessions get new streams, made in the new
// placement, and open sessions keep theirs until they close. DeletePartition forgets them,
// and they are destroyed once no session uses them any more: sessions hold their streams
// until the Session object goes, which is after the last request still running on it. The
// device's spill stream stays per device.
//
// Thread safety: every method is thread-safe; requests of one session may run concurrently
// (their device work is ordered on the session's stream). Opening a session (admission,
// stream, registration) and deleting a partition (the scheduler's delete, forgetting its
// streams) each happen as one step under partitions_mu_, so a session that races with the
// deletion of its partition is either refused (NOT_FOUND) or registered in time to be
// closed by it; no session outlives its partition and no streams outlive both. Streams are
// never destroyed under the core's or the session manager's locks: destroying one waits
// for the device.
#ifndef GPUKIT_DAEMON_CORE_CORE_H_
#define GPUKIT_DAEMON_CORE_CORE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "daemon/core/fault_ledger.h"
#include "daemon/core/partition_streams.h"
#include "daemon/core/pending_tokens.h"
#include "daemon/core/running_task.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/session/device_array.h"
#include "daemon/session/session_manager.h"
#include "runtime/base/unix_fd.h"
#include "runtime/device.h"
#include "runtime/executor/remote_device.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/op_registry.h"

namespace gpukit {

struct CoreOptions {
  AdmissionLimits limits;
  SessionOptions sessions;
  // Streams per partition and QoS class that the sessions of that partition and class are
  // spread over (round robin), created with the class's priority (Guaranteed high,
  // Burstable normal, BestEffort low) when the first such session opens. More streams let
  // more of a partition's sessions run at once. Default 2: on the CPU backend each stream
  // is a thread, and a device has partitions x classes in use x this many of them (plus
  // the spill stream), so the old per-device default of 4 would now mean 12 threads for
  // each partition that uses all three classes; on a GPU, each stream that runs a matmul
  // also keeps a cuBLASLt workspace.
  int streams_per_partition = 2;
  // The share of a device's SMs BestEffort streams may use, in (0, 1]; 1: all. Below 1 a
  // GPU confines them to a green context of that many SMs (StreamOptions::sm_share), so the
  // rest are always free of BestEffort work when Guaranteed or Burstable work arrives.
  double best_effort_sm_share = 1;
  // Partitions made at start-up. Without one named "default", a "default" partition gets
  // what the others leave of device 0 (every device 0 resource when the list is empty).
  std::vector<PartitionSpec> partitions;
  absl::Duration pacing_burst = absl::Milliseconds(20);
  // SchedulerOptions' in-flight bounds of BestEffort and Burstable work beside Guaranteed.
  absl::Duration best_effort_in_flight = absl::Milliseconds(1);
  absl::Duration burstable_in_flight = absl::Milliseconds(4);
  // SchedulerOptions::pacing_anticipation; off in gpukitd by default. Measured on an H200
  // (docs/benchmarks.md): at 250 us, partitions of 0.8 / 0.2 flooding with synchronous
  // clients got 0.73 / 0.27 of the work instead of 0.54 / 0.46, but a BestEffort flood beside
  // a Guaranteed partition whose one synchronous client finishes a small op every 300 us fell
  // to 0.62x its throughput: the flood gave way for 250 us after each of them.
  absl::Duration pacing_anticipation = absl::ZeroDuration();
  int task_history = 1000;
  // The architecture custom kernels are compiled for when the session's device is the CPU
  // backend (which cannot run them, but compiling checks the source and fills the cache).
  // A CUDA device compiles for its own GPU.
  std::string cpu_kernel_arch = "sm_90";
  // Compiled kernels one session may hold at once (each may hold a module on the device).
  int max_kernels_per_session = 256;
  // Ops of one pipeline (OpenPipeline, ComputeService.Submit) queued on the device at once;
  // OpPipeline::RunOp waits for the oldest to complete beyond it. Each holds a task of its
  // partition until it has run, so past a quarter of it (OpPipeline::BaseWindow, 32) a
  // pipeline takes more only while its partition has slots to spare (see op_pipeline.h).
  int max_ops_in_flight = 128;
  // The most output bytes a pipeline's ops in flight may hold for it to take slots past its
  // base window (see op_pipeline.h).
  int64_t pipeline_growth_bytes = int64_t{64} << 20;
  // Host memory regions one session may hold at once (each a mapping in gpukitd).
  int max_host_regions_per_session = 64;
  // How long a RegisterHostMemory token waits for its descriptor.
  absl::Duration host_memory_token_ttl = absl::Seconds(10);
};

struct SessionGrant {
  std::string session_id;
  std::string partition;
  absl::Duration lease;
  int device_index = 0;
  QosClass qos = QosClass::kBestEffort;
  ResourceSpec resources;
};

struct ArrayView {
  std::string handle;
  TensorDesc desc;
  int64_t bytes = 0;
  int device_index = 0;
};

// An operand of RunOp as the client named it.
struct OpInput {
  bool is_scalar = false;
  std::string handle;  // when !is_scalar
  ScalarValue scalar;  // when is_scalar
};

// A kernel compiled for a session (CompileKernel).
struct KernelView {
  std::string handle;                      // "k-..."
  std::vector<std::string> entries;        // as requested
  std::vector<std::string> lowered_names;  // their symbols in the module, index for index
  std::string arch;                        // "sm_90": what it was compiled for
  KernelOrigin origin = KernelOrigin::kCompiled;
  absl::Duration compile_time;  // NVRTC's time; zero when a cache had it
  std::string log;              // NVRTC's warnings, if any
};

// An argument of LaunchKernel as the client named it: one of the session's arrays (passed
// as its device address) or a scalar passed by value.
struct KernelArgInput {
  bool is_array = false;
  std::string handle;       // when is_array
  uint8_t bytes[8] = {};    // when !is_array: the value, little-endian
  uint32_t size_bytes = 0;  // when !is_array: 1 to 8
};

// A host memory region registered for a session, waiting for its descriptor.
struct HostRegionGrant {
  std::string handle;  // "m-..."
  std::string token;   // 32 hex digits, single use
  absl::Duration token_ttl;
};

// An array of client memory whose descriptor is still to come (ImportArrayByDescriptor).
struct ArrayImportGrant {
  ArrayView array;    // what it will be once the descriptor has arrived
  std::string token;  // 32 hex digits, single use
  absl::Duration token_ttl;
};

// An array exported to its client (ExportArray), waiting for the client to fetch it.
struct ArrayExport {
  std::string cuda_ipc_handle;  // ExportForm::kCudaIpcHandle: the handle, and no token
  std::string token;  // 32 hex digits, single use
  absl::Duration token_ttl;
  int64_t allocation_bytes = 0;
  int64_t offset_bytes = 0;
  int64_t bytes = 0;
  int device_index = 0;
};

struct SessionSummary {
  std::string session_id;
  std::string tenant;
  std::string partition;
  ClientDescription client;
  Principal owner;  // who opened it (OpenSessionParams::owner)
  int64_t arrays = 0;
  int64_t memory_bytes = 0;   // resident on the device
  int64_t spilled_bytes = 0;  // in host memory after a reclaim
  absl::Duration age;
  absl::Duration lease_remaining;
  int device_index = 0;
  QosClass qos = QosClass::kBestEffort;
  ResourceSpec resources;
  // Device time of its finished tasks (events around each), and how many finished.
  absl::Duration device_time;
  int64_t tasks_finished = 0;
};

struct DeviceSummary {
  DeviceProperties properties;
  int64_t memory_used_bytes = 0;
  // Set when the device runs in a device executor process (not in-process).
  std::optional<ExecutorState> executor;
  // The executor's last fault (time, kind, error) with, where the daemon could tell, the
  // session, tenant and work it was running (recorded when that work's request returned,
  // moments after the restart); and the tenants whose launches are held back for faulting
  // again and again (FaultLedger).
  std::optional<WorkFault> last_fault;
  std::vector<std::string> held_back;
};

class OpPipeline;

class Core {
 public:
  // `devices` must not be empty. The clock must outlive the core. `jit` compiles custom
  // kernels; without it CompileKernel is FAILED_PRECONDITION (NVRTC missing on this host).
  static absl::StatusOr<std::unique_ptr<Core>> Create(const Clock& clock,
                                                      std::vector<std::unique_ptr<Device>> devices,
                                                      const CoreOptions& options,
                                                      std::shared_ptr<JitCompiler> jit = nullptr);
  ~Core();

  // Sessions.
  absl::StatusOr<SessionGrant> OpenSession(OpenSessionParams params);
  absl::StatusOr<absl::Duration> KeepAlive(absl::string_view session_id);
  absl::StatusOr<CloseStats> CloseSession(absl::string_view session_id);
  // Who opened a session (live, or lapsed and not yet reaped), without renewing its lease:
  // the services check it against the caller before any request touches the session.
  // NOT_FOUND (SessionNotFoundError) for unknown and closed sessions.
  absl::StatusOr<Principal> SessionOwner(absl::string_view session_id) const;
  // Whether a session of a higher QoS class than this one's is open on its device (its work
  // may have to give way: Scheduler::HigherClassSessionOpen), likewise without renewing its
  // lease. NOT_FOUND as SessionOwner.
  absl::StatusOr<bool> HigherClassSessionOpen(absl::string_view session_id) const;
  // Closes sessions whose lease lapsed; returns how many.
  int ExpireLeases();
  void CloseAllSessions();

  // Arrays. Every call renews the session's lease; foreign handles are NOT_FOUND.
  //
  // No request reports OK for work whose session ended while it ran. Every call that
  // changes state (CreateArray, FreeArray, WriteArray, ReadArray, RunOp, LaunchKernel,
  // FreeKernel, the host memory calls and their descriptor deliveries, ExportArray, the
  // imports) looks its session up again when its work is done, renewing the lease once
  // more; if the session was closed or its lease lapsed meanwhile, the call fails with
  // NOT_FOUND "session ... ended (closed, or its lease lapsed) while the request ran",
  // whatever else happened, because what it did went into state the session's end frees.
  // A task still waiting in its partition's queue when the session ends fails the same way.
  // CreateArray's array reads as zeros: it zeroes the memory (a transfer task "zero" on the
  // session's stream, waited for) before the handle exists, and frees it if that fails.
  absl::StatusOr<ArrayView> CreateArray(absl::string_view session_id, const TensorDesc& desc);
  absl::StatusOr<ArrayView> DescribeArray(absl::string_view session_id, absl::string_view handle);
  // Returns the bytes freed.
  absl::StatusOr<int64_t> FreeArray(absl::string_view session_id, absl::string_view handle);
  // Copies `data` into the array at `offset` and waits for it. OUT_OF_RANGE past the end.
  // Both are transfer tasks of the session's partition.
  absl::Status WriteArray(absl::string_view session_id, absl::string_view handle, int64_t offset,
                          absl::Span<const char> data, const TaskOptions& task = {});
  // Copies `out.size()` bytes from `offset` into `out` and waits for it.
  absl::Status ReadArray(absl::string_view session_id, absl::string_view handle, int64_t offset,
                         absl::Span<char> out, const TaskOptions& task = {});

  // Compute: runs a built-in op as a task; the result is a new array of the session.
  absl::StatusOr<ArrayView> RunOp(absl::string_view session_id, absl::string_view op,
                                  absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                  const TaskOptions& task = {});
  const OpRegistry& ops() const { return ops_; }
  // Opens the session's pipeline: ops that run without waiting (op_pipeline.h). One per
  // session at a time: FAILED_PRECONDITION while one is open; NOT_FOUND for an unknown
  // session. Renews the lease. The pipeline must be closed (destroyed) before the core.
  absl::StatusOr<std::unique_ptr<OpPipeline>> OpenPipeline(absl::string_view session_id);

  // Custom kernels. Every call renews the session's lease; foreign handles are NOT_FOUND.
  //
  // CompileKernel compiles `request` for the session's device (a CUDA device's own
  // architecture; options.cpu_kernel_arch on the CPU backend) through the JIT compiler and
  // its caches, and registers the kernel with the session. It is not a task: it uses no
  // device, and no lock is held while NVRTC runs (up to the compiler's budget). Errors:
  // FAILED_PRECONDITION without a JIT compiler; RESOURCE_EXHAUSTED "session holds N
  // kernels, its limit" at options.max_kernels_per_session; and JitCompiler::Compile's
  // (INVALID_ARGUMENT for a bad request or a compile error with NVRTC's log,
  // DEADLINE_EXCEEDED past the compile budget).
  // A failed compile's message is cut to kMaxCompileErrorBytes (with a note of how much was
  // cut and where the rest is); the whole log stays with the session (LastCompileLog).
  absl::StatusOr<KernelView> CompileKernel(absl::string_view session_id,
                                           const CompileRequest& request);
  static constexpr size_t kMaxCompileErrorBytes = 6 << 10;
  // The log of the session's last CompileKernel. NOT_FOUND for an unknown session.
  absl::StatusOr<CompileLog> LastCompileLog(absl::string_view session_id);
  // Launches entry `entry` ("" for a kernel's only entry) of a session's kernel with `args`
  // and waits for it; returns the device time the launch took. Checks, in order, before the
  // request takes a place in the queue: the kernel (NOT_FOUND), the entry (NOT_FOUND, or
  // INVALID_ARGUMENT for "" with several entries), grid and block against the device's
  // limits (INVALID_ARGUMENT), the arguments (at most kMaxKernelArgs; scalars of 1 to 8
  // bytes: INVALID_ARGUMENT; arrays of the session: NOT_FOUND "args[i]: ..."), and the
  // backend (FAILED_PRECONDITION "kernel launch requires a GPU; the kernel compiled ..."
  // on the CPU backend). Then it runs as a task of kind kernel, named after the entry:
  // admission, its arrays pinned (spilled ones restored) for the launch's life, the module
  // loaded on first launch, the launch between two events. The device's own checks (the
  // kernel's parameter count and sizes, its thread and shared memory limits) and its
  // errors come back as they are.
  absl::StatusOr<absl::Duration> LaunchKernel(absl::string_view session_id,
                                              absl::string_view handle, absl::string_view entry,
                                              const LaunchConfig& config,
                                              absl::Span<const KernelArgInput> args,
                                              const TaskOptions& task = {});
  // Host shared memory. RegisterHostMemory adds a region of `bytes` to the session and returns
  // it with a token; DeliverDescriptor (the descriptor channel's call) pairs the token with
  // the client's descriptor and maps the memory (pinned on a GPU). Tokens are single use and
  // lapse after options.host_memory_token_ttl. Copies run as transfer tasks, like
  // WriteArray/ReadArray, from and to the region's memory. Errors: INVALID_ARGUMENT (bytes <=
  // 0 or above limits.max_array_bytes), RESOURCE_EXHAUSTED (max_host_regions_per_session),
  // NOT_FOUND (session, region, array, or an unknown, used or lapsed token),
  // FAILED_PRECONDITION (the region's descriptor has not arrived), OUT_OF_RANGE.
  absl::StatusOr<HostRegionGrant> RegisterHostMemory(absl::string_view session_id, int64_t bytes);
  // The descriptor channel's delivery: pairs a token of RegisterHostMemory or
  // ImportArrayByDescriptor with the client's descriptor. NOT_FOUND for an unknown, used or
  // lapsed token; the import's errors.
  absl::Status DeliverDescriptor(absl::string_view token, ScopedFd fd);
  absl::Status UnregisterHostMemory(absl::string_view session_id, absl::string_view region);
  absl::Status CopyFromHostMemory(absl::string_view session_id, absl::string_view handle,
                                  int64_t array_offset, absl::string_view region,
                                  int64_t region_offset, int64_t bytes,
                                  const TaskOptions& task = {});
  absl::Status CopyToHostMemory(absl::string_view session_id, absl::string_view handle,
                                int64_t array_offset, absl::string_view region,
                                int64_t region_offset, int64_t bytes,
                                const TaskOptions& task = {});

  // Zero-copy device memory. ExportArray restores the array if it was spilled, waits for the
  // work the session queued before it (pipelined ops that write the array), exports its
  // buffer (Device::ExportBuffer), marks it never to be spilled again, and keeps the
  // descriptor under a token for FetchExport (the descriptor channel's call), single use,
  // lapsing after options.host_memory_token_ttl. Errors: NOT_FOUND (session, array, or an
  // unknown, used or lapsed token), and the device's (FAILED_PRECONDITION on the CPU backend).
  // In ExportForm::kCudaIpcHandle the reply carries the handle itself, and the array's memory
  // stays allocated until the session ends, even once the array is freed (the other process
  // may map it as long as it lives; CUDA does not say what happens to its mapping otherwise).
  absl::StatusOr<ArrayExport> ExportArray(absl::string_view session_id, absl::string_view handle,
                                          ExportForm form = ExportForm::kDescriptor);
  absl::StatusOr<ScopedFd> FetchExport(absl::string_view token);
  // The other way: device memory the client allocated becomes an array of its session, with
  // no copy (Device::ImportBuffer). It counts against the session's memory like any other
  // array and is never spilled; freeing it unmaps it in gpukitd and leaves the memory to the
  // client, who must keep it allocated until then. ImportArray takes a legacy CUDA IPC handle
  // (64 bytes) and an offset into its allocation. ImportArrayByDescriptor takes the size of a
  // VMM allocation and an offset, and returns a token for DeliverDescriptor; the array exists
  // once the descriptor has arrived. Errors: INVALID_ARGUMENT (shape, dtype, a range outside
  // the allocation, memory that cannot be mapped or lives on another GPU), the admission's
  // (RESOURCE_EXHAUSTED with a reason), FAILED_PRECONDITION (a backend that cannot map it),
  // NOT_FOUND.
  absl::StatusOr<ArrayView> ImportArray(absl::string_view session_id, const TensorDesc& desc,
                                        std::string cuda_ipc_handle, int64_t offset_bytes);
  absl::StatusOr<ArrayImportGrant> ImportArrayByDescriptor(absl::string_view session_id,
                                                           const TensorDesc& desc,
                                                           int64_t allocation_bytes,
                                                           int64_t offset_bytes);

  // Frees a session's kernel. Its module is unloaded now, or when a launch in flight ends.
  absl::Status FreeKernel(absl::string_view session_id, absl::string_view handle);
  // Most arguments one launch may pass: a bound on the request, far above what kernels take.
  static constexpr size_t kMaxKernelArgs = 1024;
  bool has_jit() const { return jit_ != nullptr; }
  // The custom kernels' cache figures (hits in memory and on disk, compiles, evictions); none
  // without a JIT compiler. The executors' built-in kernels are not in it. O(1).
  std::optional<KernelCacheStats> jit_cache_stats() const {
    if (jit_ == nullptr) return std::nullopt;
    return jit_->cache_stats();
  }

  // Partitions and tasks, for operators (AdminService, the configuration reload). Each is
  // one call of the scheduler under its lock (DeletePartition also takes partitions_mu_),
  // thread-safe, and costs O(partitions) or, for tasks, O(tasks live and in the history).
  //
  // CreatePartition: INVALID_ARGUMENT for a bad spec or device, ALREADY_EXISTS,
  // RESOURCE_EXHAUSTED (kDeviceOvercommitted) when it does not fit beside the device's other
  // partitions. Its streams come with its first session (see "Streams" above).
  absl::Status CreatePartition(const PartitionSpec& spec);
  // Sets the fields `mask` names of partition `name` to those of `values` in one step
  // (Scheduler::UpdatePartition: concurrent updates of different fields all land) and
  // returns its new spec. NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED.
  absl::StatusOr<PartitionSpec> UpdatePartition(absl::string_view name,
                                                const PartitionFieldMask& mask,
                                                const PartitionSpec& values);
  // DeletePartition with `force` closes the partition's sessions and returns how many; the
  // partition's streams are destroyed before it returns unless a request of a closed session
  // still runs, in which case the last such request destroys them when it ends. Without
  // `force`, FAILED_PRECONDITION (kPartitionBusy) while it has sessions. NOT_FOUND.
  absl::StatusOr<int> DeletePartition(absl::string_view name, bool force);
  // Every partition with its use and counters, by device, then name, and the SMs its streams
  // of its current placement run on (sm_count; 0 before a session made them). Takes
  // partitions_mu_, so it waits while a session's streams are being made.
  std::vector<PartitionStatus> ListPartitions() const;
  // One partition's, as ListPartitions has it. NOT_FOUND.
  absl::StatusOr<PartitionStatus> GetPartitionStatus(absl::string_view name) const;
  // The tasks `filter` selects: live ones first (by id), then finished ones newest first.
  std::vector<TaskInfo> ListTasks(const TaskFilter& filter) const;
  // Cancels a waiting or admitted task, recording `why` as its error; its request fails with
  // CANCELLED. NOT_FOUND (unknown or finished: TaskNotFoundError), FAILED_PRECONDITION for a
  // running one (device work cannot be stopped midway).
  absl::Status CancelTask(uint64_t task_id, absl::string_view why);
  // The scheduler itself, for tests and the metrics' per-device GPU time; the services and
  // the daemon's wiring use the calls above. Delete partitions through the core, not scheduler().DeletePartition,
  // which would leave their streams to the core's end.
  Scheduler& scheduler() { return *scheduler_; }
  const Scheduler& scheduler() const { return *scheduler_; }

  // Admin.
  std::vector<SessionSummary> ListSessions() const;
  // Every tenant that has opened a session since gpukitd started, by name: sessions open,
  // memory reserved, device time (total and by QoS class) and tasks finished
  // (Scheduler::ListTenants). O(tenants).
  std::vector<TenantUsage> ListTenants() const;
  std::vector<DeviceSummary> ListDevices() const;
  int session_count() const { return sessions_.count(); }
  // For the service manager's watchdog (daemon/systemd/watchdog.h): takes and releases, in
  // their order, the locks that requests take (partition and session opening, pipelines, the
  // scheduler's, the session table's). Returns once it has had each; blocks while one is
  // held, forever if gpukitd is deadlocked, which is what the watchdog is there to notice.
  void CheckLiveness();
  int64_t array_count() const;
  absl::string_view backend() const;
  const Device& device(int index) const { return *devices_[index].device; }
  int device_count() const { return static_cast<int>(devices_.size()); }

 private:
  friend class OpPipeline;
  struct DeviceSlot {
    std::unique_ptr<Device> device;
    StreamId spill_stream;  // spill and restore copies
  };

  Core(const Clock& clock, const CoreOptions& options, std::vector<DeviceSlot> devices,
       std::unique_ptr<Scheduler> scheduler, std::shared_ptr<JitCompiler> jit);
  // Reserves `bytes` for the session (reclaiming by spilling if the scheduler says that
  // can help) and allocates a device buffer. With `start`, the reservation starts that task
  // of the session too (RunningTask::StartWithMemory), in the same scheduler call.
  absl::StatusOr<DeviceAllocation> AllocateMemory(const Session& session, int64_t bytes,
                                                  RunningTask* start = nullptr);
  // The reservation alone (for memory the client brings: ImportArray); `start` as above.
  absl::StatusOr<MemoryReservation> ReserveMemory(const Session& session, int64_t bytes,
                                                  RunningTask* start = nullptr);
  // Makes `memory` an array `handle` of the session: reserved against its memory like any
  // other, never spilled.
  absl::StatusOr<ArrayView> AdoptImportedMemory(Session& session, std::string handle,
                                                const TensorDesc& desc, ImportedMemory memory);
  // Spills arrays chosen by the reclaim policy to cover `plan`; returns bytes freed.
  int64_t Reclaim(const ReclaimPlan& plan);
  // A new array of the session's device, named `handle` (a fresh "a-" id when empty);
  // `start` as AllocateMemory's (an op's output starts the op).
  absl::StatusOr<std::shared_ptr<DeviceArray>> NewArray(const Session& session,
                                                        const TensorDesc& desc,
                                                        std::string handle = "",
                                                        RunningTask* start = nullptr);
  // An op made ready to run, what RunOp and OpPipeline::RunOp share: checked, planned,
  // admitted as a task of kind op, its inputs pinned (spilled ones restored) and its output
  // allocated (not yet registered with the session) and pinned.
  struct PreparedOp {
    RunningTask task;
    OpLaunch launch;
    std::vector<ArrayPin> pins;  // the inputs'
    std::shared_ptr<DeviceArray> output;
    ArrayPin output_pin;
  };
  // Checks, in order, before the op takes a place in the queue: the op's name, the device's
  // support, its inputs (NOT_FOUND "inputs[i]: ..."), the plan (INVALID_ARGUMENT), the
  // session's array room and the tenant's launch hold; then admission (the scheduler's
  // errors), pins and the output's memory (RESOURCE_EXHAUSTED with a reason). Errors after
  // admission go through Conclude. The output is named `output_handle` ("": a fresh id).
  absl::StatusOr<PreparedOp> PrepareOp(const Session& session, absl::string_view op_name,
                                       absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                       const TaskOptions& options, std::string output_handle);
  // The end of a pipeline: frees its session's slot.
  void ClosePipeline(const std::string& session_id);
  // Pins one of the session's arrays resident, restoring it (with the session's admission)
  // if it was spilled.
  absl::StatusOr<ArrayPin> PinArray(const Session& session, DeviceArray& array);
  // Zeroes a new array on the session's stream: a transfer task "zero" that waits its turn
  // like an upload. The pool hands out memory other sessions freed, so no array may be
  // readable before this ran. Errors: the task's (scheduler, device, the session's end).
  absl::Status ZeroArray(const Session& session, DeviceArray& array);
  // A transfer task `name` on the session's stream over one of its arrays: admitted, the
  // array pinned resident, `enqueue` given the pinned buffer, waited for, concluded. What
  // uploads, downloads and the zeroing of new arrays share.
  absl::Status RunTransfer(const Session& session, DeviceArray& array, absl::string_view name,
                           const TaskOptions& options,
                           const std::function<absl::Status(BufferId)>& enqueue);
  // What a request on `session` returns once its work is done (see "No request reports
  // OK" above): `status`, renewing the lease, while the session is still open and its
  // lease unexpired; else NOT_FOUND naming the session, whatever `status` was.
  absl::Status Conclude(const Session& session, absl::Status status);
  template <typename T>
  absl::StatusOr<T> Conclude(const Session& session, absl::StatusOr<T> result) {
    absl::Status status = Conclude(session, result.status());
    if (!status.ok()) return status;
    return result;
  }
  // A task for a request on `session` (RunningTask::Create), whose failure goes through
  // Conclude: a task cancelled because the session ended fails as the session's end.
  absl::StatusOr<RunningTask> StartTask(const Session& session, TaskKind kind,
                                        absl::string_view name, const TaskOptions& options);
  static ArrayView View(const DeviceArray& array);
  // The status of `work` ("op add", "kernel k") of `session` that ran on `device`: when the
  // executor's failure made it fail (kExecutorFaultPayload), named after the work, and a
  // fault or hang of its own recorded against its tenant.
  absl::Status NoteExecutorFailure(const Session& session, const Device& device,
                                   absl::string_view work, absl::Status status);

  const Clock& clock_;
  const CoreOptions options_;
  const OpRegistry& ops_;
  std::vector<DeviceSlot> devices_;
  std::unique_ptr<Scheduler> scheduler_;
  const std::shared_ptr<JitCompiler> jit_;  // null: no custom kernels
  SessionManager sessions_;
  FaultLedger faults_;
  // Host memory regions waiting for their descriptors, and exported arrays' descriptors
  // waiting to be fetched, by token.
  struct PendingRegion {
    std::weak_ptr<Session> session;
    std::weak_ptr<HostRegion> region;
  };
  PendingTokens<PendingRegion> pending_regions_;
  PendingTokens<ScopedFd> pending_exports_;
  struct PendingImport {
    std::weak_ptr<Session> session;
    ArrayView array;
    int64_t allocation_bytes = 0;
    int64_t offset_bytes = 0;
  };
  PendingTokens<PendingImport> pending_imports_;
  // Orders session opening against partition deletion (see the top of this file). Taken
  // before the scheduler's and the session manager's locks, never after.
  mutable absl::Mutex partitions_mu_;
  PartitionStreams streams_ ABSL_GUARDED_BY(partitions_mu_);
  // The SM placement of `partition` now, from the partitions of its device (PlaceSms).
  SmPlacement PlacementOf(absl::string_view partition, int device_index) const;
  // `statuses` with each partition's sm_count from its streams.
  std::vector<PartitionStatus> WithSmCounts(std::vector<PartitionStatus> statuses) const
      ABSL_LOCKS_EXCLUDED(partitions_mu_);
  // Sessions with an open pipeline (one each).
  absl::Mutex pipelines_mu_;
  absl::flat_hash_set<std::string> pipelines_ ABSL_GUARDED_BY(pipelines_mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_CORE_H_
