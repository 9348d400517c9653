// ForwardingDevice: a Device that passes every call to another one, with hooks for tests.
//
// Lets a test act in the middle of a call the code under test makes, deterministically and
// without threads: free an input while an op is being launched, close the session whose
// work is running, or use memory behind the back of whoever owns the device.
//
//   auto device = std::make_unique<ForwardingDevice>(*CpuDevice::Create({}));
//   ForwardingDevice* hooks = device.get();
//   hooks->before_run_op = [&](const OpLaunch&) { core->FreeArray(session, input); };
//
// The device-code hooks (load_module, get_function, launch, unload_module) stand in for the
// wrapped device when set, so that code which loads and launches kernels can be tested on
// the CPU device, which has no device code; with set_backend(BackendKind::kCuda) the device
// also reports itself as a GPU.
//
// It also records every stream created through it, with the priority asked for and whether
// it has been destroyed (streams()), so a test can count streams and find leaks:
//
//   for (const StreamRecord& s : hooks->streams()) EXPECT_TRUE(s.destroyed);
//
// Thread safety: as the wrapped device's; set the hooks before the device is shared. The
// stream records are thread-safe.
#ifndef GPUKIT_TESTS_TESTING_FORWARDING_DEVICE_H_
#define GPUKIT_TESTS_TESTING_FORWARDING_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device.h"

namespace gpukit::testing {

struct StreamRecord {
  StreamId id;
  StreamPriority priority = StreamPriority::kNormal;
  bool destroyed = false;
  double sm_share = 1;
  std::optional<double> sm_first;
};

class ForwardingDevice final : public Device {
 public:
  explicit ForwardingDevice(std::unique_ptr<Device> inner) : inner_(std::move(inner)) {}

  // Called at the start of RunOp, before the call is passed on.
  std::function<void(const OpLaunch&)> before_run_op;
  // When set, answers SupportsOp in place of the wrapped device.
  std::function<bool(absl::string_view)> supports_op;
  // When set, each answers its call in place of the wrapped device.
  std::function<absl::StatusOr<ModuleId>(absl::string_view image)> load_module;
  std::function<absl::Status(ModuleId)> unload_module;
  std::function<absl::StatusOr<FunctionId>(ModuleId, absl::string_view name)> get_function;
  std::function<absl::Status(FunctionId, const LaunchConfig&, absl::Span<const KernelArg>,
                             StreamId)>
      launch;
  // Called with the stream of every call that enqueues work (the copies, RunOp, Launch)
  // before the call is passed on: where a request's work runs.
  std::function<void(StreamId)> on_enqueue;
  // Called at the start of CreateStream; a status other than OK fails the call with it.
  std::function<absl::Status(StreamPriority)> before_create_stream;
  // Called at the start of DestroyStream, before the call is passed on.
  std::function<void(StreamId)> before_destroy_stream;
  // Called at the start of Allocate and ImportBuffer, before the call is passed on: where a
  // request's memory is being made; and at the start of Free, where it goes.
  std::function<void(int64_t bytes)> before_allocate;
  std::function<void(const ImportedMemory&)> before_import_buffer;
  std::function<void(BufferId)> before_free;
  // When set, each answers its call in place of the wrapped device (after before_allocate
  // or before_free): a test may recycle freed buffers as the daemon's memory pool does.
  std::function<absl::StatusOr<BufferId>(int64_t bytes)> allocate;
  std::function<absl::Status(BufferId)> free_buffer;
  // When set, answers FillZero in place of the wrapped device (after on_enqueue).
  std::function<absl::Status(BufferId, int64_t offset, int64_t bytes, StreamId)> fill_zero;
  // Called at the start of RegisterHostMemory (a client's shared memory being mapped for the
  // device), before the call is passed on.
  std::function<void(void* data, int64_t bytes)> before_register_host_memory;
  // Called at BeginBatch and EndBatch, before the call is passed on.
  std::function<void()> on_begin_batch;
  std::function<void()> on_end_batch;
  // When set, answers ExportBuffer in place of the wrapped device (the CPU device exports
  // nothing).
  std::function<absl::StatusOr<ExportedBuffer>(BufferId, ExportForm)> export_buffer;

  // Called with every WaitEventPairs's pairs and the wrapped device's answer, before it is
  // returned: a test may count the calls and pairs or change an outcome.
  std::function<void(absl::Span<const EventPair>, std::vector<EventPairOutcome>&)>
      after_wait_event_pairs;

  // Events recorded and destroyed through this device (successful calls).
  int64_t events_recorded() const { return events_recorded_.load(); }
  int64_t events_destroyed() const { return events_destroyed_.load(); }
  // Buffers made over ranges of mapped segments (successful BufferInSegment calls).
  int64_t buffers_in_segment() const { return buffers_in_segment_.load(); }

  // Every stream created through this device so far, in order of creation.
  std::vector<StreamRecord> streams() const {
    absl::MutexLock lock(&records_mu_);
    return streams_;
  }

  Device& inner() { return *inner_; }
  // Reports `backend` in properties() from now on (the rest as the wrapped device's).
  void set_backend(BackendKind backend) {
    properties_ = inner_->properties();
    properties_->backend = backend;
  }

  const DeviceProperties& properties() const override {
    return properties_ ? *properties_ : inner_->properties();
  }
  MemoryInfo GetMemoryInfo() const override { return inner_->GetMemoryInfo(); }
  absl::StatusOr<BufferId> Allocate(int64_t bytes) override {
    if (before_allocate) before_allocate(bytes);
    return allocate ? allocate(bytes) : inner_->Allocate(bytes);
  }
  absl::Status Free(BufferId buffer) override {
    if (before_free) before_free(buffer);
    return free_buffer ? free_buffer(buffer) : inner_->Free(buffer);
  }
  absl::StatusOr<int64_t> BufferBytes(BufferId buffer) const override {
    return inner_->BufferBytes(buffer);
  }
  absl::StatusOr<HostBuffer> AllocateHostBuffer(int64_t bytes) override {
    return inner_->AllocateHostBuffer(bytes);
  }
  absl::StatusOr<ExportedBuffer> ExportBuffer(BufferId buffer, ExportForm form) override {
    return export_buffer ? export_buffer(buffer, form) : inner_->ExportBuffer(buffer, form);
  }
  absl::StatusOr<BufferId> ImportBuffer(ImportedMemory memory) override {
    if (before_import_buffer) before_import_buffer(memory);
    return inner_->ImportBuffer(std::move(memory));
  }
  absl::Status RegisterHostMemory(void* data, int64_t bytes, int shared_fd = -1) override {
    if (before_register_host_memory) before_register_host_memory(data, bytes);
    return inner_->RegisterHostMemory(data, bytes, shared_fd);
  }
  absl::Status MapSegment(uint64_t key, ScopedFd fd, int64_t bytes) override {
    return inner_->MapSegment(key, std::move(fd), bytes);
  }
  absl::Status UnmapSegment(uint64_t key) override { return inner_->UnmapSegment(key); }
  absl::StatusOr<BufferId> BufferInSegment(uint64_t key, int64_t offset, int64_t bytes) override {
    absl::StatusOr<BufferId> buffer = inner_->BufferInSegment(key, offset, bytes);
    if (buffer.ok()) buffers_in_segment_.fetch_add(1);
    return buffer;
  }
  absl::Status CheckHealth() override { return inner_->CheckHealth(); }
  absl::Status UnregisterHostMemory(void* data) override {
    return inner_->UnregisterHostMemory(data);
  }
  using Device::CreateStream;
  absl::StatusOr<StreamId> CreateStream(const StreamOptions& options) override {
    const StreamPriority priority = options.priority;
    if (before_create_stream) {
      if (absl::Status status = before_create_stream(priority); !status.ok()) return status;
    }
    absl::StatusOr<StreamId> stream = inner_->CreateStream(options);
    if (stream.ok()) {
      absl::MutexLock lock(&records_mu_);
      streams_.push_back({*stream, priority, false, options.sm_share, options.sm_first});
    }
    return stream;
  }
  absl::StatusOr<int> StreamSmCount(StreamId stream) const override {
    return inner_->StreamSmCount(stream);
  }
  absl::Status DestroyStream(StreamId stream) override {
    if (before_destroy_stream) before_destroy_stream(stream);
    absl::Status destroyed = inner_->DestroyStream(stream);
    if (destroyed.ok()) {
      absl::MutexLock lock(&records_mu_);
      for (StreamRecord& record : streams_) {
        if (record.id == stream) record.destroyed = true;
      }
    }
    return destroyed;
  }
  absl::Status CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src, int64_t bytes,
                                StreamId stream) override {
    if (on_enqueue) on_enqueue(stream);
    return inner_->CopyHostToDevice(dst, dst_offset, src, bytes, stream);
  }
  absl::Status CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset, int64_t bytes,
                                StreamId stream) override {
    if (on_enqueue) on_enqueue(stream);
    return inner_->CopyDeviceToHost(dst, src, src_offset, bytes, stream);
  }
  absl::Status FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) override {
    if (on_enqueue) on_enqueue(stream);
    return fill_zero ? fill_zero(buffer, offset, bytes, stream)
                     : inner_->FillZero(buffer, offset, bytes, stream);
  }
  absl::Status CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                  int64_t src_offset, int64_t bytes, StreamId stream) override {
    if (on_enqueue) on_enqueue(stream);
    return inner_->CopyDeviceToDevice(dst, dst_offset, src, src_offset, bytes, stream);
  }
  absl::StatusOr<EventId> RecordEvent(StreamId stream) override {
    absl::StatusOr<EventId> event = inner_->RecordEvent(stream);
    if (event.ok()) events_recorded_.fetch_add(1);
    return event;
  }
  absl::Status WaitEvent(EventId event) override { return inner_->WaitEvent(event); }
  absl::StatusOr<bool> QueryEvent(EventId event) override { return inner_->QueryEvent(event); }
  absl::Status DestroyEvent(EventId event) override {
    absl::Status status = inner_->DestroyEvent(event);
    if (status.ok()) events_destroyed_.fetch_add(1);
    return status;
  }
  absl::StatusOr<int64_t> EventElapsedNs(EventId start, EventId end) override {
    return inner_->EventElapsedNs(start, end);
  }
  std::vector<EventPairOutcome> WaitEventPairs(absl::Span<const EventPair> pairs) override {
    std::vector<EventPairOutcome> outcomes = inner_->WaitEventPairs(pairs);
    if (after_wait_event_pairs) after_wait_event_pairs(pairs, outcomes);
    return outcomes;
  }
  void BeginBatch() override {
    if (on_begin_batch) on_begin_batch();
    inner_->BeginBatch();
  }
  void EndBatch() override {
    if (on_end_batch) on_end_batch();
    inner_->EndBatch();
  }
  bool SupportsOp(absl::string_view op_name) const override {
    return supports_op ? supports_op(op_name) : inner_->SupportsOp(op_name);
  }
  absl::Status RunOp(const OpLaunch& launch, StreamId stream) override {
    if (on_enqueue) on_enqueue(stream);
    if (before_run_op) before_run_op(launch);
    return inner_->RunOp(launch, stream);
  }
  absl::StatusOr<ModuleId> LoadModule(absl::string_view image) override {
    return load_module ? load_module(image) : inner_->LoadModule(image);
  }
  absl::Status UnloadModule(ModuleId module) override {
    return unload_module ? unload_module(module) : inner_->UnloadModule(module);
  }
  absl::StatusOr<FunctionId> GetFunction(ModuleId module, absl::string_view name) override {
    return get_function ? get_function(module, name) : inner_->GetFunction(module, name);
  }
  absl::Status Launch(FunctionId function, const LaunchConfig& config,
                      absl::Span<const KernelArg> args, StreamId stream) override {
    if (on_enqueue) on_enqueue(stream);
    return launch ? launch(function, config, args, stream)
                  : inner_->Launch(function, config, args, stream);
  }

 private:
  std::unique_ptr<Device> inner_;
  std::optional<DeviceProperties> properties_;
  std::atomic<int64_t> events_recorded_{0};
  std::atomic<int64_t> events_destroyed_{0};
  std::atomic<int64_t> buffers_in_segment_{0};
  mutable absl::Mutex records_mu_;
  std::vector<StreamRecord> streams_ ABSL_GUARDED_BY(records_mu_);
};

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_TESTING_FORWARDING_DEVICE_H_
