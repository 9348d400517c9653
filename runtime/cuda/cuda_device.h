// CudaDevice: the Device interface on one NVIDIA GPU, through the CUDA Driver API.
//
// One device object per GPU, working in that GPU's primary context (retained at Create,
// released by the destructor; the JIT compiler and cuBLASLt share it). Every method makes
// the context current on its calling thread first, so calls may come from any thread.
// Buffers come from a caching memory pool (runtime/memory_pool.h) over VMM segments
// (runtime/cuda/device_memory.h): allocating and freeing a buffer is a table operation once
// the pool holds memory, and every large buffer is a segment that can be exported to another
// process. Streams are non-blocking CUDA streams with priorities, copies and launches are
// enqueued asynchronously on them, events are timing CUDA events, reused from a free list.
// Host memory passed to copies may be pageable: the driver stages it, and the Device
// contract (host memory valid until an event after the copy completes) covers the rest.
// Built-in ops run as gpukit's own kernels (BuiltinOpRunner): loaded from the fatbins the
// build precompiled (kernels/cuda/embedded_kernels.h) when this GPU runs them, else compiled
// by the NVRTC JIT compiler, on first use or in the background from Create on
// (compile_builtin_kernels_at_start; the destructor waits for compiles in flight). Create
// logs which path the device takes. With neither,
// SupportsOp is false for all of them and RunOp validates its operands, then returns
// UNIMPLEMENTED. float32, float16 and bfloat16 matmuls run through
// cuBLASLt instead when it is available (runtime/cuda/cublaslt.h), with a workspace per
// stream (CublasLtMatmul::kWorkspaceBytes, allocated on the stream's first such matmul,
// counted in GetMemoryInfo, freed by DestroyStream); matmuls cuBLASLt does not take (other
// dtypes, inputs of a dtype other than the compute dtype, batches broadcast along some axes
// only, k = 0: see RouteMatmul) run on gpukit's kernel.
// Only SM 80 (Ampere) and newer GPUs are accepted.
//
// In the device executor (issue 15) the device also maps memory gpukitd owns: VMM segments
// from runtime/cuda/vmm_segment_source.h, mapped whole under gpukitd's key (MapSegment), with
// buffers over ranges of them (BufferInSegment). A kernel that faults then takes only the
// executor's context down; the memory and its bytes stay with gpukitd for the next executor.
// CheckHealth tells the executor's supervisor whether the context is poisoned.
//
// No CUDA type appears in this header: the Device interface stays the only view callers
// have, and they need no CUDA headers to include it.
//
//   CudaDeviceOptions options;
//   options.index = 0;
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> gpu, CudaDevice::Create(options));
//   GPUKIT_ASSIGN_OR_RETURN(ModuleId module, gpu->LoadModule(ptx));
//   GPUKIT_ASSIGN_OR_RETURN(FunctionId add, gpu->GetFunction(module, "add_scalar"));
//   GPUKIT_RETURN_IF_ERROR(gpu->Launch(add, config, args, stream));
//   nvrtc_options.push_back("--gpu-architecture=" + gpu->cuda_info().arch);
//
// Errors from the driver carry the call and the driver's error name ("cuMemAlloc:
// CUDA_ERROR_OUT_OF_MEMORY (out of memory)"). A kernel that faults leaves the context
// unusable (CUDA's sticky errors): WaitEvent and every later call return INTERNAL with the
// fault's name, and nothing aborts; only a new process can use the GPU again.
//
// Thread safety: all methods are thread-safe (see Device). Tables are guarded by a mutex
// that is never held across a call that waits for the GPU.
#ifndef GPUKIT_RUNTIME_CUDA_CUDA_DEVICE_H_
#define GPUKIT_RUNTIME_CUDA_CUDA_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/builtin_op_runner.h"
#include "runtime/device.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/memory_pool.h"

struct CUctx_st;              // cuda.h's CUcontext, kept opaque here
struct CUgreenCtx_st;         // cuda.h's CUgreenCtx
struct CUdevResourceDesc_st;  // cuda.h's CUdevResourceDesc
struct CUdevResource_st;      // cuda.h's CUdevResource

namespace gpukit {

class TransferEngine;
class CublasLtMatmul;
class CudaSegmentSource;
class SharedMapping;

struct CudaDriver;

struct CudaDeviceOptions {
  // CUDA device ordinal as the driver numbers visible devices (after CUDA_VISIBLE_DEVICES).
  int index = 0;
  // Compiles the built-in op kernels (kernels/cuda) for this GPU where the binary carries
  // no precompiled code it runs. Without either, or when its NVRTC cannot compile for this
  // GPU, the device runs no built-in ops (SupportsOp is false); raw launches still work.
  std::shared_ptr<JitCompiler> jit;
  // Where the built-in kernels must be compiled (no precompiled code this GPU runs, or PTX
  // the driver compiles), starts compiling all of them in the background at Create, half
  // the cores at a time, instead of each on its first use. The daemon's devices do (the
  // first tenant then waits for its module's compile at most); off by default, so that a
  // short-lived device (a test's) compiles only what it uses and its destructor, which
  // waits for compiles in flight, returns at once.
  bool compile_builtin_kernels_at_start = false;
  // Loads the built-in modules from the build's precompiled fatbins where this GPU runs them.
  // Off: only `jit` compiles them (tests of the NVRTC path and of a device without either).
  bool use_precompiled_kernels = true;
  // Runs float32/float16/bfloat16 matmuls through cuBLASLt when libcublasLt is found
  // (runtime/jit/library_search.h's search, `cublaslt_dir` first when set). Without it the
  // device logs "cuBLASLt not available (...); matmul uses gpukit's own kernel" and does so.
  bool use_cublaslt = true;
  // Matmul slices on low- and normal-priority streams; slice sizes in FLOPs come from
  // EstimatedMatmulFlopsPerSecond for this GPU.
  MatmulSliceLengths matmul_slices;
  std::string cublaslt_dir;
  // The caching pool buffers come from (its defaults are explained where they are set).
  MemoryPoolOptions memory_pool;
  // Pinned host memory for AllocateHostBuffer (spilled arrays). Up to 1 GiB of it stays
  // locked for reuse, since locking pages costs more than the copy itself.
  MemoryPoolOptions host_pool = {.small_block_limit_bytes = int64_t{1} << 20,
                                 .max_cached_bytes = int64_t{1} << 30};
};

// What a CudaDevice knows about its GPU beyond DeviceProperties: what the JIT compiler and
// launch validation need. Read once at Create.
struct CudaDeviceInfo {
  int sm_major = 0;  // compute capability, e.g. 9 and 0 for an H100
  int sm_minor = 0;
  std::string arch;        // "sm_90": NVRTC's --gpu-architecture for this GPU
  int driver_version = 0;  // e.g. 13000
  int multiprocessor_count = 0;
  int max_threads_per_block = 0;
  int max_block_dim[3] = {0, 0, 0};
  int max_grid_dim[3] = {0, 0, 0};
  // Shared memory a block may use without and with opting in (the opt-in limit applies to a
  // kernel's static plus dynamic shared memory).
  int max_shared_memory_per_block_bytes = 0;
  int max_shared_memory_per_block_optin_bytes = 0;
  // cuCtxGetStreamPriorityRange: `greatest` is the numerically smallest value.
  int least_stream_priority = 0;
  int greatest_stream_priority = 0;
};

class CudaDevice final : public Device {
 public:
  // Retains the GPU's primary context. FAILED_PRECONDITION without a usable driver (the
  // driver's reason), for a GPU older than SM 80 ("gpukitd requires SM >= 80 (Ampere or
  // newer); device 0 (Tesla V100-SXM2-16GB) is sm_70"); INVALID_ARGUMENT for an index the
  // driver does not have.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(const CudaDeviceOptions& options);
  // Devices the driver shows; FAILED_PRECONDITION without a usable driver.
  static absl::StatusOr<int> DeviceCount();

  // Waits for all queued work, then frees every buffer, event, stream and module and
  // releases the primary context. Errors (a faulted context) are logged.
  ~CudaDevice() override;

  const CudaDeviceInfo& cuda_info() const { return info_; }
  // SMs `stream`'s kernels may run on: its green context's count (as the driver reports
  // it), or the GPU's. NOT_FOUND for an unknown stream. For diagnostics and tests.
  absl::StatusOr<int> StreamSmCount(StreamId stream) const override;
  // The CUDA priority the driver gave `stream` (cuStreamGetPriority): for diagnostics and
  // tests. NOT_FOUND for an unknown stream.
  absl::StatusOr<int> StreamPriorityValue(StreamId stream) const;
  // Whether the device runs gpukit's own kernels of the built-in ops (precompiled or through
  // the JIT compiler); without them SupportsOp is false for every op.
  bool runs_builtin_ops() const { return ops_ != nullptr; }
  // Whether matmuls can go through cuBLASLt, and how many have (RunOp calls that cuBLASLt
  // ran): for tests and diagnostics.
  bool cublaslt_available() const { return blas_ != nullptr; }
  int64_t cublaslt_matmul_count() const { return cublaslt_matmuls_.load(); }
  // Of those, the ones that ran in slices, and the slices (cuBLASLt calls) they took.
  int64_t cublaslt_sliced_matmul_count() const;
  int64_t cublaslt_slice_count() const;
  // The memory pool's counters, where its memory comes from ("VMM (cuMemCreate, POSIX file
  // descriptors, 2 MiB granularity)"), and a trim that returns its free segments to the
  // driver (returns the bytes): for tests, diagnostics and operators.
  MemoryPoolStats memory_pool_stats() const { return pool_->stats(); }
  const std::string& memory_source() const { return memory_source_; }
  int64_t TrimMemoryPool() { return pool_->Trim(); }

  const DeviceProperties& properties() const override { return properties_; }
  MemoryInfo GetMemoryInfo() const override;

  // RESOURCE_EXHAUSTED when the GPU cannot hold `bytes` (more than it has, or out of free
  // memory now even after the pool gave back what it caches); the device keeps working. A
  // zero-byte buffer holds no device memory. Free returns the memory to the pool.
  absl::StatusOr<BufferId> Allocate(int64_t bytes) override;
  absl::Status Free(BufferId buffer) override;
  absl::StatusOr<int64_t> BufferBytes(BufferId buffer) const override;
  // Pinned memory from a pool of page-locked host segments; copies from and to it go straight
  // to the copy engines (no staging). Ordinary memory when the host cannot lock more.
  absl::StatusOr<HostBuffer> AllocateHostBuffer(int64_t bytes) override;
  // The buffer's VMM segment as a POSIX file descriptor. A buffer in a slab shared with other
  // buffers moves first to a segment of its own (a device-to-device copy; its BufferId stays).
  // FAILED_PRECONDITION where device memory is not exportable (no VMM or no POSIX handles).
  // Exports run one at a time per device (a move waits for every stream), so concurrent
  // exports of one buffer all name the same memory. ABORTED when the buffer is freed while
  // it is exported (a caller's error).
  absl::StatusOr<ExportedBuffer> ExportBuffer(BufferId buffer, ExportForm form) override;
  // A VMM descriptor (mapped read-write for this GPU) or a legacy IPC handle of a client's
  // allocation on this GPU (SharedMapping); memory of another GPU is refused.
  absl::StatusOr<BufferId> ImportBuffer(ImportedMemory memory) override;
  // cuMemHostRegister: copies from and to the range then go straight to the copy engines.
  // `shared_fd` is not used: in this process the caller's mapping at `data` is the memory.
  absl::Status RegisterHostMemory(void* data, int64_t bytes, int shared_fd = -1) override;
  absl::Status UnregisterHostMemory(void* data) override;

  // Segments of device memory that another process owns (gpukitd's, from
  // CudaVmmSegmentSource): `fd` is a VMM allocation's POSIX descriptor, imported and mapped
  // whole, read-write for this GPU (SharedMapping::OpenDescriptor, which keeps the descriptor
  // until the unmap). Costs an import, an address reservation, a map and a cuMemSetAccess:
  // about 0.4 ms on the H100 host. INVALID_ARGUMENT for a key already mapped, `bytes` <= 0 or a
  // descriptor the driver does not map at that size (its error named); a faulted context's
  // error comes back as INTERNAL. The memory is not checked to be this GPU's: gpukitd, the
  // only caller, hands each executor its own GPU's memory.
  absl::Status MapSegment(uint64_t key, ScopedFd fd, int64_t bytes) override;
  // Unmaps a segment no buffer uses any more (cuMemUnmap, cuMemAddressFree; the memory lives on
  // in its owner). Work queued on its buffers must have completed, as for Free.
  // FAILED_PRECONDITION while a buffer of BufferInSegment uses it, NOT_FOUND for an unknown key.
  absl::Status UnmapSegment(uint64_t key) override;
  // A buffer at the segment's address + `offset`: a table entry, no driver call. Free forgets
  // it (nothing returns to the pool), it does not count in GetMemoryInfo's used bytes, and
  // ExportBuffer refuses it (its owner exports the segment). NOT_FOUND for an unknown key,
  // OUT_OF_RANGE for a range outside the segment.
  absl::StatusOr<BufferId> BufferInSegment(uint64_t key, int64_t offset, int64_t bytes) override;

  // Whether the context has taken a sticky fault. It asks cuStreamQuery about a stream of its
  // own on which nothing is ever enqueued: the call cannot wait for anything (the stream is
  // empty and non-blocking, so it orders nothing against the other streams, which stay busy
  // meanwhile) and, like every driver call on a context, it returns the context's sticky
  // error once the driver has seen the fault. Calls that would also do (cuEventQuery of a
  // fresh event, cuCtxSynchronize) either enqueue work or wait for every stream, and
  // cuCtxSynchronize's signature changed in CUDA 13 (cuda_driver.h). One driver call, a few
  // microseconds. A fault still running on the GPU is seen once the driver notices it (at the
  // latest by the WaitEvent of the work that faulted). INTERNAL naming the driver's error
  // ("device 0 (...) has taken a fault ...: cuStreamQuery: CUDA_ERROR_ILLEGAL_ADDRESS (...)")
  // when the context is poisoned; OK otherwise.
  absl::Status CheckHealth() override;

  // kHigh gets the greatest priority of the context's range, kLow the least, kNormal the
  // middle of the range.
  using Device::CreateStream;
  absl::StatusOr<StreamId> CreateStream(const StreamOptions& options) override;
  absl::Status DestroyStream(StreamId stream) override;

  // INVALID_ARGUMENT for a device-to-device copy between overlapping ranges of one buffer
  // (CUDA does not define it).
  absl::Status CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src, int64_t bytes,
                                StreamId stream) override;
  absl::Status CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset, int64_t bytes,
                                StreamId stream) override;
  absl::Status FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) override;
  absl::Status CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                  int64_t src_offset, int64_t bytes, StreamId stream) override;

  absl::StatusOr<EventId> RecordEvent(StreamId stream) override;
  // Returns the stream's sticky error, if its work faulted, as INTERNAL naming the fault.
  absl::Status WaitEvent(EventId event) override;
  absl::StatusOr<bool> QueryEvent(EventId event) override;
  absl::Status DestroyEvent(EventId event) override;
  // cuEventElapsedTime, whose resolution is about half a microsecond.
  absl::StatusOr<int64_t> EventElapsedNs(EventId start, EventId end) override;
  // One cuEventElapsedTime for a completed pair of a healthy context; anything else (work
  // not done, an error) is answered by the default's calls, each in its own words.
  absl::StatusOr<int64_t> ElapsedNsIfCompleted(EventId start, EventId end) override;

  bool SupportsOp(absl::string_view op_name) const override;
  absl::Status RunOp(const OpLaunch& launch, StreamId stream) override;

  // A cubin or PTX image (PTX is compiled by the driver for this GPU). INVALID_ARGUMENT with
  // the driver's error log for an image it cannot load.
  absl::StatusOr<ModuleId> LoadModule(absl::string_view image) override;
  // Functions of the module become NOT_FOUND. Work already queued must have completed.
  absl::Status UnloadModule(ModuleId module) override;
  // NOT_FOUND "no kernel named X in the module (module M)". Asking twice gives the same id.
  absl::StatusOr<FunctionId> GetFunction(ModuleId module, absl::string_view name) override;
  // Validates before enqueueing: INVALID_ARGUMENT for grid or block dimensions of 0 or above
  // the GPU's limits, more threads per block than the device or the kernel allows, more
  // shared memory than a block may have, a scalar of 0 or more than 8 bytes, an empty
  // parameter block, or (drivers from CUDA 12.4, which report a kernel's parameters) an
  // argument count or size the kernel does not take ("kernel X takes 3 parameters, got
  // 2"); NOT_FOUND for an unknown function, stream or buffer. Dynamic
  // shared memory above the default 48 KiB is opted into for the kernel automatically.
  absl::Status Launch(FunctionId function, const LaunchConfig& config,
                      absl::Span<const KernelArg> args, StreamId stream) override;

 private:
  struct Allocation {
    uint64_t address = 0;  // CUdeviceptr; 0 for a zero-byte buffer
    int64_t bytes = 0;
    // Set for memory of another process (ImportBuffer); the pool's otherwise.
    std::shared_ptr<SharedMapping> imported;
    // Exported as a descriptor (in a pool segment marked shared), or as a legacy IPC handle:
    // then the memory is a cuMemAlloc allocation of its own, freed with cuMemFree.
    bool exported_descriptor = false;
    bool legacy_ipc = false;
    // Set for a range of a mapped segment (BufferInSegment): the memory is the segment's,
    // never the pool's, and `segment_key` names it.
    bool in_segment = false;
    uint64_t segment_key = 0;
  };
  // A segment of another process's memory (MapSegment) and how many buffers lie in it.
  struct MappedSegment {
    std::shared_ptr<SharedMapping> mapping;
    int64_t buffers = 0;
  };
  struct Stream;
  struct Event;
  class EventPool;
  struct Module;
  struct Function;

  CudaDevice(const CudaDriver& cu, int device, CUctx_st* context, DeviceProperties properties,
             CudaDeviceInfo info);

  // Moves `buffer`'s data from `from` to `to` (as large, not yet the buffer's) once all queued
  // work has run, and records it there (a legacy allocation when `to_legacy`). The caller
  // frees `from` on success and `to` on failure.
  absl::Status MoveBuffer(BufferId buffer, uint64_t from, uint64_t to, int64_t bytes,
                          bool to_legacy);
  absl::StatusOr<ExportedBuffer> ExportDescriptor(BufferId buffer, const Allocation& allocation);
  absl::StatusOr<ExportedBuffer> ExportIpcHandle(BufferId buffer, const Allocation& allocation);

  // Sets up the memory pool over the GPU's segment source.
  absl::Status EnableMemoryPools(const CudaDeviceOptions& options);
  // Sets up the built-in ops over the precompiled fatbins if `use_precompiled` and this GPU
  // runs them, else over `jit` if it can compile for this GPU, compiling in the background
  // (logs which, or why neither).
  void EnableBuiltinOps(std::shared_ptr<JitCompiler> jit, bool compile_at_start,
                        bool use_precompiled);
  // Opens cuBLASLt for matmul, if wanted and found (logs the outcome either way).
  void EnableCublasLt(const CudaDeviceOptions& options);
  // Runs a planned matmul through cuBLASLt when it takes it: true when it is enqueued (or
  // there is nothing to compute), false when gpukit's kernel must run it instead.
  absl::StatusOr<bool> RunMatmulOnCublasLt(const OpLaunch& launch, const Stream& stream,
                                           StreamId stream_id);
  // The cuBLASLt workspace of `stream` (address and bytes), allocated on first use; bytes 0
  // when the GPU has no memory for one (cuBLASLt then picks among algorithms that need none).
  std::pair<uint64_t, uint64_t> BlasWorkspace(StreamId stream);

  // Waits for the work queued on every stream of the device. Every piece of work gpukit
  // queues runs on one of them (the transfer engine and cuBLASLt use the caller's), so this
  // waits for all of it.
  absl::Status SynchronizeAllStreams();

  // Makes the primary context current on the calling thread (cheap when it already is).
  absl::Status Bind() const;

  // The memory seam: device memory from the pool, with the device's out-of-memory message.
  absl::StatusOr<uint64_t> AllocateDeviceMemory(int64_t bytes);
  absl::Status ReleaseDeviceMemory(uint64_t address);

  // Whether [data, data + bytes) is page-locked memory gpukit knows: a host buffer of the
  // pool or a registered range. Copies from and to it skip the transfer engine.
  bool IsPinnedHostRange(const void* data, int64_t bytes) const;

  // Device address of `buffer` + offset after checking [offset, offset + bytes) lies inside.
  absl::StatusOr<uint64_t> Resolve(BufferId buffer, int64_t offset, int64_t bytes) const;
  absl::StatusOr<std::shared_ptr<Stream>> FindStream(StreamId stream) const;
  absl::StatusOr<std::shared_ptr<Event>> FindEvent(EventId event) const;
  absl::StatusOr<std::shared_ptr<Function>> FindFunction(FunctionId function) const;
  // "device 0 (NVIDIA H100 80GB HBM3)", for messages.
  std::string Describe() const;

  const CudaDriver& cu_;
  const int device_;         // CUdevice
  CUctx_st* const context_;  // the retained primary context
  const DeviceProperties properties_;
  const CudaDeviceInfo info_;
  // The built-in ops; null when neither the fatbins nor a JIT compiler serve this GPU.
  std::shared_ptr<JitCompiler> jit_;
  std::unique_ptr<BuiltinOpRunner> ops_;
  // Large host <-> device copies through pinned staging buffers.
  std::unique_ptr<TransferEngine> transfers_;
  // Matmul through cuBLASLt; null when it is not available or not wanted.
  std::unique_ptr<CublasLtMatmul> blas_;
  std::atomic<int64_t> cublaslt_matmuls_{0};
  // CudaDeviceOptions' matmul slice lengths in seconds, by StreamPriority (kHigh: 0).
  double matmul_slice_seconds_[3] = {0, 0, 0};
  // Green contexts for streams confined to part of the SMs (StreamOptions::sm_share), by SM
  // count, made on first use and destroyed after every stream; `green_available_` is decided
  // on first use (the driver has the calls and the device's SM resource).
  struct GreenContext {
    CUgreenCtx_st* green = nullptr;
    int sm_count = 0;
  };
  absl::StatusOr<const GreenContext*> GreenContextFor(double sm_share);
  // A green context of the SMs `desc` describes, with its SM count as the driver reports it
  // (`expected_sms` where it cannot say).
  absl::StatusOr<GreenContext> CreateGreenContext(CUdevResourceDesc_st* desc, int expected_sms);
  // Placed streams (StreamOptions::sm_first): the device's SMs are split once into groups of
  // the GPU's granularity and the split's remainder (`sm_groups_`, the remainder last), laid
  // out in `group_layout_`: the remainder is its last group (rest_sms) where the driver
  // combines it with the groups, else unused by placed streams (logged once, at info). Each
  // distinct range of groups gets one green context made of them (`placed_contexts_`, by
  // first group and count). Null where a plain stream serves (every group, or no green
  // contexts on this driver).
  absl::StatusOr<const GreenContext*> PlacedGreenContext(double first, double share);
  // Whether green contexts can be made; decides it (and reads sm_resource_) on first call.
  bool GreenAvailableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(green_mu_);
  absl::Mutex green_mu_;
  std::optional<bool> green_available_ ABSL_GUARDED_BY(green_mu_);
  std::unique_ptr<CUdevResource_st> sm_resource_ ABSL_GUARDED_BY(green_mu_);  // the device's SMs
  absl::flat_hash_map<int, GreenContext> green_contexts_ ABSL_GUARDED_BY(green_mu_);
  std::unique_ptr<CUdevResource_st[]> sm_groups_ ABSL_GUARDED_BY(green_mu_);  // groups + 1
  SmLayout group_layout_ ABSL_GUARDED_BY(green_mu_);  // groups 0 until split
  std::map<std::pair<int, int>, GreenContext> placed_contexts_ ABSL_GUARDED_BY(green_mu_);
  // Where buffers come from; set by Create, destroyed before the context is released.
  std::unique_ptr<MemoryPool> pool_;
  std::string memory_source_;
  bool memory_exportable_ = false;
  // Pinned host buffers (AllocateHostBuffer); copies whose host side lies in one skip the
  // transfer engine.
  std::unique_ptr<MemoryPool> host_pool_;
  // Host ranges registered with cuMemHostRegister: start address -> bytes.
  std::map<uintptr_t, int64_t> registered_host_ ABSL_GUARDED_BY(mu_);
  // Released CUDA events, recorded again by RecordEvent instead of creating new ones.
  std::shared_ptr<EventPool> event_pool_;
  // The empty stream CheckHealth queries; set by Create.
  std::shared_ptr<Stream> health_stream_;

  // Held for the whole of ExportBuffer, so that exports of one buffer see each other's moves
  // (see ExportBuffer); taken before mu_, never by any other call.
  absl::Mutex export_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::atomic<uint64_t> next_id_{1};  // ids of every kind
  int64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Allocation> buffers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  // Events under a lock of their own: each op records one or two and destroys them, and the
  // device time of each is asked, from several threads, beside buffer lookups under mu_.
  mutable absl::Mutex events_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Event>> events_ ABSL_GUARDED_BY(events_mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Module>> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Function>> functions_ ABSL_GUARDED_BY(mu_);
  // Segment key (MapSegment) -> its mapping.
  absl::flat_hash_map<uint64_t, MappedSegment> segments_ ABSL_GUARDED_BY(mu_);
  // Stream id -> its cuBLASLt workspace buffer.
  absl::flat_hash_map<uint64_t, BufferId> blas_workspaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_CUDA_DEVICE_H_
