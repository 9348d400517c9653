// CpuDevice: the CPU simulation backend.
//
// Runs the whole Device interface on host memory so gpukitd serves the same API without a
// GPU (and CI tests it). Buffers are 64-byte aligned host allocations counted against a
// configured memory size; from 1 MiB up each is its own anonymous mapping, returned to the
// system at Free (as a GPU's memory is apart from the host's heap). Each stream runs its work
// in order: work enqueued on an idle stream runs at once on the caller's thread, work enqueued
// behind other work runs later on the stream's worker thread, so callers must observe
// completion through events exactly as on a GPU. Copies between host memory and buffers are
// ParallelCopy's: from two of its pieces (8 MiB) up, a copy runs on a few threads at once, as
// a GPU's copy engine would not be limited to one CPU core's bandwidth. Built-in ops run the
// reference kernels of kernels/cpu. Device code cannot run here: LoadModule and Launch return
// FAILED_PRECONDITION "kernel launch requires a GPU".
//
// Memory another process owns (gpukitd's memfd segments, when this device runs in the device
// executor) is mapped whole by MapSegment (MAP_SHARED, read-write; the descriptor is closed
// once mapped) and carved by BufferInSegment; such buffers cost one map entry and no memory
// of the device's own.
//
// A sticky fault (a kernel's error that IsStickyFault recognises: the test build's
// _test_fault) poisons the device as a CUDA context is poisoned by an illegal address: work
// already queued is skipped, and every later enqueue (copies, RunOp, RecordEvent) and wait
// (WaitEvent, QueryEvent of a completed event, EventElapsedNs) fails with the fault, which
// CheckHealth returns. A wait still waits for work that was running when the fault came, so
// its memory may be freed after; Free, DestroyStream, DestroyEvent, UnmapSegment and the
// destructor go on working, so the owner can tear the device down.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> device, CpuDevice::Create({}));
//
// Thread safety: all methods are thread-safe (see Device).
#ifndef GPUKIT_RUNTIME_CPU_CPU_DEVICE_H_
#define GPUKIT_RUNTIME_CPU_CPU_DEVICE_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device.h"

namespace gpukit {

struct CpuDeviceOptions {
  int index = 0;
  // Memory the simulated device offers; allocations beyond it are RESOURCE_EXHAUSTED.
  int64_t memory_bytes = int64_t{4} << 30;
  // The GPU whose SMs StreamSmCount pretends the streams run on, so that SM placements
  // (StreamOptions::sm_first) are checked and counted here as on a GPU: an H100's 132 SMs in
  // green context groups of 8 and the split's remainder of 4 as a last group, as CudaDevice
  // lays them out. Streams run on host threads whatever it says.
  SmLayout nominal_sms{.sm_count = 132, .group_sms = 8, .rest_sms = 4};
};

class CpuDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<CpuDevice>> Create(const CpuDeviceOptions& options);
  ~CpuDevice() override;

  const DeviceProperties& properties() const override { return properties_; }
  MemoryInfo GetMemoryInfo() const override;

  absl::StatusOr<BufferId> Allocate(int64_t bytes) override;
  absl::Status Free(BufferId buffer) override;
  absl::StatusOr<int64_t> BufferBytes(BufferId buffer) const override;
  // A shared file (a memfd) mapped as the buffer's memory; CUDA IPC handles are refused.
  absl::StatusOr<BufferId> ImportBuffer(ImportedMemory memory) override;

  // mmap of the whole file, MAP_SHARED read-write: one system call; the descriptor is closed
  // once mapped. INVALID_ARGUMENT for `bytes` <= 0, a key in use, or a descriptor that cannot
  // be mapped or names fewer than `bytes` bytes.
  absl::Status MapSegment(uint64_t key, ScopedFd fd, int64_t bytes) override;
  // munmap. FAILED_PRECONDITION while a buffer from BufferInSegment uses the segment,
  // NOT_FOUND for an unknown key.
  absl::Status UnmapSegment(uint64_t key) override;
  // A buffer over [offset, offset + bytes) (bytes >= 0) of the segment; no memory is
  // allocated and none counts as used. Free forgets it and leaves the segment mapped.
  // NOT_FOUND for an unknown key, OUT_OF_RANGE for a range outside the segment.
  absl::StatusOr<BufferId> BufferInSegment(uint64_t key, int64_t offset, int64_t bytes) override;
  // OK, or the sticky fault that poisoned the device.
  absl::Status CheckHealth() override;

  using Device::CreateStream;
  // Every stream is a thread of its own: priority and SMs change nothing here, but the
  // options are validated and the SMs counted over CpuDeviceOptions::nominal_sms.
  absl::StatusOr<StreamId> CreateStream(const StreamOptions& options) override;
  absl::Status DestroyStream(StreamId stream) override;
  // StreamSmCountFor(nominal_sms, the stream's options).
  absl::StatusOr<int> StreamSmCount(StreamId stream) const override;

  absl::Status CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src, int64_t bytes,
                                StreamId stream) override;
  absl::Status CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset, int64_t bytes,
                                StreamId stream) override;
  absl::Status FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) override;
  absl::Status CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                  int64_t src_offset, int64_t bytes, StreamId stream) override;

  absl::StatusOr<EventId> RecordEvent(StreamId stream) override;
  absl::Status WaitEvent(EventId event) override;
  absl::StatusOr<bool> QueryEvent(EventId event) override;
  absl::Status DestroyEvent(EventId event) override;
  absl::StatusOr<int64_t> EventElapsedNs(EventId start, EventId end) override;

  bool SupportsOp(absl::string_view op_name) const override;
  absl::Status RunOp(const OpLaunch& launch, StreamId stream) override;

  absl::StatusOr<ModuleId> LoadModule(absl::string_view image) override;
  absl::Status UnloadModule(ModuleId module) override;
  absl::StatusOr<FunctionId> GetFunction(ModuleId module, absl::string_view name) override;
  absl::Status Launch(FunctionId function, const LaunchConfig& config,
                      absl::Span<const KernelArg> args, StreamId stream) override;

 private:
  struct Buffer;
  struct Segment;
  class Health;
  class Stream;
  struct Event;

  explicit CpuDevice(const CpuDeviceOptions& options);

  // Host address of `buffer` + offset after checking [offset, offset + bytes) lies inside.
  absl::StatusOr<std::byte*> Resolve(BufferId buffer, int64_t offset, int64_t bytes) const;
  absl::StatusOr<Stream*> FindStream(StreamId stream) const;
  absl::StatusOr<std::shared_ptr<Event>> FindEvent(EventId event) const;

  DeviceProperties properties_;
  const SmLayout nominal_sms_;
  // Before streams_: their threads report faults to it until they are joined.
  std::unique_ptr<Health> health_;

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Buffer>> buffers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Segment>> segments_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, int> stream_sms_ ABSL_GUARDED_BY(mu_);  // by stream id
  absl::flat_hash_map<uint64_t, std::shared_ptr<Event>> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CPU_CPU_DEVICE_H_
