#include "runtime/cpu/cpu_device.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/base/parallel_copy.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_op_kernels.h"

namespace gpukit {

// A shared file of another process's (gpukitd's memfd segment) mapped whole by MapSegment.
struct CpuDevice::Segment {
  Segment(void* mapping, int64_t bytes) : mapping(mapping), bytes(bytes) {}
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment() { munmap(mapping, static_cast<size_t>(bytes)); }
  void* const mapping;
  const int64_t bytes;
  int64_t buffers = 0;  // live buffers over it (BufferInSegment), guarded by CpuDevice::mu_
};

// Memory of the device's own (an anonymous mapping from kOwnMappingBytes up, aligned_alloc
// below), of another process (ImportBuffer: a shared file mapped here, `imported`), or a
// range of a mapped segment (`segment`, which stays mapped while the buffer lives);
// `mapping` and `mapping_bytes` are what to unmap, null for aligned_alloc's memory.
struct CpuDevice::Buffer {
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (segment != nullptr) return;  // the segment's memory, unmapped by UnmapSegment
    if (mapping != nullptr) {
      munmap(mapping, static_cast<size_t>(mapping_bytes));
    } else {
      std::free(data);
    }
  }
  std::byte* data = nullptr;
  int64_t bytes = 0;
  void* mapping = nullptr;
  int64_t mapping_bytes = 0;
  bool imported = false;
  Segment* segment = nullptr;  // not owned
};

// The device's sticky fault: OK until a kernel returns one (IsStickyFault), then that fault
// for good. Checked on every enqueue, so the healthy path is one atomic load.
class CpuDevice::Health {
 public:
  // What work on a poisoned device fails with: the fault, said to be an earlier one's (the
  // work that faulted got the fault itself, so the two can be told apart).
  absl::Status Check() const {
    if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    return absl::Status(fault_.code(),
                        absl::StrCat("the device is poisoned by an earlier fault: ",
                                     fault_.message()));
  }
  // The fault itself (CheckHealth).
  absl::Status Fault() const {
    if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    return fault_;
  }
  // Keeps the first fault.
  void Poison(const absl::Status& fault) {
    absl::MutexLock lock(&mu_);
    if (!fault_.ok()) return;
    fault_ = fault;
    poisoned_.store(true, std::memory_order_release);
  }

 private:
  std::atomic<bool> poisoned_{false};
  mutable absl::Mutex mu_;
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
};

namespace {

// From this size up, the device's memory is its own anonymous mapping, unmapped at Free, as a
// GPU's memory is apart from the host's heap. Through malloc, large buffers stayed in glibc's
// arenas after Free: glibc raises its mmap threshold to the size of each large block freed
// (up to 32 MiB), so from the second round on 16 MiB arrays came from the arenas of whichever
// gRPC thread ran the request, and those arenas kept them. Rounds of 8 sessions x 4 arrays of
// 16 MiB (tests/integration/memory_return_test.cc) left gpukitd at an idle RSS of
// 164 -> 580 -> 776 -> 990 -> 984 -> 1211 MiB. Small buffers stay with malloc: a mapping
// costs a system call and a page at least, and RunOp's small outputs are most allocations.
constexpr int64_t kOwnMappingBytes = int64_t{1} << 20;

}  // namespace

struct CpuDevice::Event {
  const void* stream = nullptr;  // the Stream it was recorded on
  uint64_t seq = 0;              // order among the stream's events
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  int64_t busy_ns ABSL_GUARDED_BY(mu) = 0;  // the stream's simulated device clock then
};

// Runs work in enqueue order. Work enqueued while the stream is idle runs at once on the
// caller's thread (as if a GPU had finished it immediately), which saves two thread
// hand-offs per small request; work enqueued while the stream is busy, or that must not run
// on the caller's thread (OpDef::cpu_on_stream_thread), is queued and run by the stream's worker
// thread. Exactly one thread executes the stream's work at a time (`busy_`), so order is
// kept. The first error since the last event is kept and handed to the next event, like a
// stream's sticky error on a GPU. Once the device is poisoned, work is skipped (its error is
// the fault) and only events still complete.
class CpuDevice::Stream {
 public:
  using Work = std::function<absl::Status()>;

  explicit Stream(Health& health) : health_(health), thread_([this] { Run(); }) {}
  ~Stream() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  void Enqueue(Work work, bool on_stream_thread = false) {
    Push({std::move(work), /*is_event=*/false}, on_stream_thread);
  }

  void EnqueueEvent(std::shared_ptr<Event> event) {
    event->stream = this;
    event->seq = next_event_seq_.fetch_add(1);
    Push({[this, event = std::move(event)] {
            absl::Status status = std::exchange(pending_error_, absl::OkStatus());
            if (status.ok()) status = health_.Check();
            absl::MutexLock lock(&event->mu);
            event->done = true;
            event->status = std::move(status);
            event->busy_ns = busy_ns_;
            return absl::OkStatus();
          },
          /*is_event=*/true},
         /*on_stream_thread=*/false);
  }

 private:
  struct Task {
    Work work;
    bool is_event = false;  // runs even on a poisoned device, so waiters wake up
  };

  void Push(Task task, bool on_stream_thread) {
    mu_.Lock();
    if (on_stream_thread || busy_ || !queue_.empty()) {
      queue_.push_back(std::move(task));
      mu_.Unlock();
      return;
    }
    busy_ = true;
    mu_.Unlock();
    Execute(task);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }

  // Called only by the thread that set busy_. Time spent in work advances the stream's
  // simulated device clock (busy_ns_), which events read.
  void Execute(const Task& task) {
    absl::Status status = task.is_event ? absl::OkStatus() : health_.Check();
    if (status.ok()) {
      const absl::Time start = absl::Now();
      status = task.work();
      busy_ns_ += absl::ToInt64Nanoseconds(absl::Now() - start);
      if (IsStickyFault(status)) health_.Poison(status);
    }
    if (!status.ok() && pending_error_.ok()) pending_error_ = std::move(status);
  }

  void Run() {
    while (true) {
      Task task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
              return !s->busy_ && (s->stopping_ || !s->queue_.empty());
            },
            this));
        if (queue_.empty()) return;  // stopping, and everything queued has run
        task = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      Execute(task);
      absl::MutexLock lock(&mu_);
      busy_ = false;
    }
  }

  Health& health_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status pending_error_;  // touched only by the thread that set busy_
  int64_t busy_ns_ = 0;         // likewise
  std::atomic<uint64_t> next_event_seq_{0};
  std::thread thread_;          // last: starts after the fields above exist
};

absl::StatusOr<std::unique_ptr<CpuDevice>> CpuDevice::Create(const CpuDeviceOptions& options) {
  if (options.memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU device memory_bytes = ", options.memory_bytes, " must be > 0"));
  }
  if (absl::Status layout = CheckSmLayout(options.nominal_sms); !layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU device nominal_sms: ", layout.message()));
  }
  return std::unique_ptr<CpuDevice>(new CpuDevice(options));
}

CpuDevice::CpuDevice(const CpuDeviceOptions& options)
    : nominal_sms_(options.nominal_sms), health_(std::make_unique<Health>()) {
  properties_.index = options.index;
  properties_.name = "CPU simulation device";
  properties_.backend = BackendKind::kCpu;
  properties_.memory_total_bytes = options.memory_bytes;
}

CpuDevice::~CpuDevice() {
  // Streams first: their threads may still touch buffers.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Stream>> streams;
  {
    absl::MutexLock lock(&mu_);
    streams.swap(streams_);
  }
  streams.clear();
}

MemoryInfo CpuDevice::GetMemoryInfo() const {
  absl::MutexLock lock(&mu_);
  return {properties_.memory_total_bytes, used_bytes_};
}

absl::StatusOr<BufferId> CpuDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("allocation of ", bytes, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  if (bytes > properties_.memory_total_bytes - used_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("device ", properties_.index, " cannot hold ",
                                                     bytes, " more bytes (", used_bytes_, " of ",
                                                     properties_.memory_total_bytes, " in use)"));
  }
  constexpr int64_t kAlignment = 64;
  const int64_t rounded = (std::max<int64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  auto buffer = std::make_unique<Buffer>();
  if (rounded >= kOwnMappingBytes) {
    void* mapping = mmap(nullptr, static_cast<size_t>(rounded), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping != MAP_FAILED) {
      buffer->mapping = mapping;
      buffer->mapping_bytes = rounded;
      buffer->data = static_cast<std::byte*>(mapping);
    }
  } else {
    buffer->data = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
  }
  if (buffer->data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host allocation of ", bytes, " bytes for the CPU device failed"));
  }
  buffer->bytes = bytes;
  used_bytes_ += bytes;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, std::move(buffer));
  return BufferId{id};
}

absl::Status CpuDevice::Free(BufferId buffer) {
  std::unique_ptr<Buffer> doomed;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  if (Segment* segment = it->second->segment; segment != nullptr) {
    --segment->buffers;
  } else if (!it->second->imported) {
    used_bytes_ -= it->second->bytes;
  }
  doomed = std::move(it->second);
  buffers_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<BufferId> CpuDevice::ImportBuffer(ImportedMemory memory) {
  if (!memory.cuda_ipc_handle.empty()) return Device::ImportBuffer(std::move(memory));
  GPUKIT_RETURN_IF_ERROR(CheckImportedRange(memory));
  GPUKIT_ASSIGN_OR_RETURN(int64_t file_bytes, FileBytes(memory.fd.get()));
  if (file_bytes < memory.allocation_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the shared file has ", file_bytes,
                                                   " bytes, not the ", memory.allocation_bytes,
                                                   " the import names"));
  }
  void* mapping = mmap(nullptr, static_cast<size_t>(memory.allocation_bytes),
                       PROT_READ | PROT_WRITE, MAP_SHARED, memory.fd.get(), 0);
  if (mapping == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot map the shared file: ", std::strerror(errno)));
  }
  auto buffer = std::make_unique<Buffer>();
  buffer->mapping = mapping;
  buffer->mapping_bytes = memory.allocation_bytes;
  buffer->imported = true;
  buffer->data = static_cast<std::byte*>(mapping) + memory.offset_bytes;
  buffer->bytes = memory.bytes;
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  buffers_.emplace(id, std::move(buffer));
  return BufferId{id};
}

absl::Status CpuDevice::MapSegment(uint64_t key, ScopedFd fd, int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key, " of ", bytes, " bytes: a segment needs > 0 bytes"));
  }
  const auto key_in_use = [key] {
    return absl::InvalidArgumentError(absl::StrCat("segment key ", key, " is in use"));
  };
  {
    absl::MutexLock lock(&mu_);
    if (segments_.contains(key)) return key_in_use();
  }
  absl::StatusOr<int64_t> file_bytes = FileBytes(fd.get());
  if (!file_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("segment ", key, ": cannot map descriptor ",
                                                   fd.get(), ": ", file_bytes.status().message()));
  }
  if (*file_bytes < bytes) {
    return absl::InvalidArgumentError(absl::StrCat("segment ", key, ": the shared file has ",
                                                   *file_bytes, " bytes, not ", bytes));
  }
  void* mapping =
      mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mapping == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key, ": cannot map the shared file: ", std::strerror(errno)));
  }
  auto segment = std::make_unique<Segment>(mapping, bytes);
  absl::MutexLock lock(&mu_);
  // Another thread may have mapped the key meanwhile; then `segment` unmaps on return.
  if (!segments_.try_emplace(key, std::move(segment)).second) return key_in_use();
  return absl::OkStatus();
}

absl::Status CpuDevice::UnmapSegment(uint64_t key) {
  std::unique_ptr<Segment> doomed;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  auto it = segments_.find(key);
  if (it == segments_.end()) {
    return absl::NotFoundError(absl::StrCat("no mapped segment ", key));
  }
  if (it->second->buffers > 0) {
    const int64_t n = it->second->buffers;
    return absl::FailedPreconditionError(absl::StrCat(
        "segment ", key, " is in use (", n, n == 1 ? " buffer" : " buffers", " over it)"));
  }
  doomed = std::move(it->second);
  segments_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<BufferId> CpuDevice::BufferInSegment(uint64_t key, int64_t offset, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = segments_.find(key);
  if (it == segments_.end()) {
    return absl::NotFoundError(absl::StrCat("no mapped segment ", key));
  }
  Segment& segment = *it->second;
  if (offset < 0 || bytes < 0 || offset > segment.bytes || bytes > segment.bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes, ") outside segment ",
                                              key, " of ", segment.bytes, " bytes"));
  }
  auto buffer = std::make_unique<Buffer>();
  buffer->data = static_cast<std::byte*>(segment.mapping) + offset;
  buffer->bytes = bytes;
  buffer->segment = &segment;
  ++segment.buffers;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, std::move(buffer));
  return BufferId{id};
}

absl::Status CpuDevice::CheckHealth() { return health_->Fault(); }

absl::StatusOr<int64_t> CpuDevice::BufferBytes(BufferId buffer) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  return it->second->bytes;
}

absl::StatusOr<std::byte*> CpuDevice::Resolve(BufferId buffer, int64_t offset,
                                              int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  const int64_t size = it->second->bytes;
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes, ") outside buffer ",
                                              buffer.value, " of ", size, " bytes"));
  }
  return it->second->data + offset;
}

absl::StatusOr<StreamId> CpuDevice::CreateStream(const StreamOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(const int sms, StreamSmCountFor(nominal_sms_, options));
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  streams_.emplace(id, std::make_unique<Stream>(*health_));
  stream_sms_[id] = sms;
  return StreamId{id};
}

absl::StatusOr<int> CpuDevice::StreamSmCount(StreamId stream) const {
  absl::MutexLock lock(&mu_);
  auto it = stream_sms_.find(stream.value);
  if (it == stream_sms_.end()) {
    return absl::NotFoundError(absl::StrCat("stream ", stream.value, " not found"));
  }
  return it->second;
}

absl::Status CpuDevice::DestroyStream(StreamId stream) {
  std::unique_ptr<Stream> doomed;  // joined outside the lock: its work may need mu_
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream.value);
    if (it == streams_.end()) {
      return absl::NotFoundError(absl::StrCat("stream ", stream.value, " not found"));
    }
    doomed = std::move(it->second);
    streams_.erase(it);
    stream_sms_.erase(stream.value);
  }
  return absl::OkStatus();
}

absl::StatusOr<CpuDevice::Stream*> CpuDevice::FindStream(StreamId stream) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream.value);
  if (it == streams_.end()) {
    return absl::NotFoundError(absl::StrCat("stream ", stream.value, " not found"));
  }
  return it->second.get();
}

absl::Status CpuDevice::CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src,
                                         int64_t bytes, StreamId stream) {
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  GPUKIT_ASSIGN_OR_RETURN(std::byte * to, Resolve(dst, dst_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(Stream * s, FindStream(stream));
  s->Enqueue([to, src, bytes] {
    ParallelCopy(to, src, bytes);  // an empty copy may name a null host pointer
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset, int64_t bytes,
                                         StreamId stream) {
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  GPUKIT_ASSIGN_OR_RETURN(const std::byte* from, Resolve(src, src_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(Stream * s, FindStream(stream));
  s->Enqueue([dst, from, bytes] {
    ParallelCopy(dst, from, bytes);  // an empty copy may name a null host pointer
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuDevice::FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) {
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  GPUKIT_ASSIGN_OR_RETURN(std::byte * to, Resolve(buffer, offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(Stream * s, FindStream(stream));
  s->Enqueue([to, bytes] {
    if (bytes > 0) std::memset(to, 0, static_cast<size_t>(bytes));
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                           int64_t src_offset, int64_t bytes, StreamId stream) {
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  GPUKIT_ASSIGN_OR_RETURN(std::byte * to, Resolve(dst, dst_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(const std::byte* from, Resolve(src, src_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(Stream * s, FindStream(stream));
  s->Enqueue([to, from, bytes] {
    std::memmove(to, from, bytes);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::StatusOr<EventId> CpuDevice::RecordEvent(StreamId stream) {
  // Recorded even on a poisoned device: the event carries the first error of the work before
  // it, which for the work that faulted is the fault itself (WaitEvent).
  GPUKIT_ASSIGN_OR_RETURN(Stream * s, FindStream(stream));
  auto event = std::make_shared<Event>();
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    events_.emplace(id, event);
  }
  s->EnqueueEvent(std::move(event));
  return EventId{id};
}

absl::StatusOr<std::shared_ptr<CpuDevice::Event>> CpuDevice::FindEvent(EventId event) const {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value);
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("event ", event.value, " not found"));
  }
  return it->second;
}

absl::Status CpuDevice::WaitEvent(EventId event) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> e, FindEvent(event));
  absl::Status status;
  {
    // Waits even on a poisoned device: work that was running when the fault came finishes
    // first, so its memory may be freed once this returns.
    absl::MutexLock lock(&e->mu);
    e->mu.Await(absl::Condition(&e->done));
    status = e->status;
  }
  // The work's own error first: the work that faulted gets the fault itself, later work a
  // mention of it (Health::Check), so the two can be told apart.
  if (!status.ok()) return status;
  return health_->Check();
}

absl::StatusOr<bool> CpuDevice::QueryEvent(EventId event) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> e, FindEvent(event));
  {
    absl::MutexLock lock(&e->mu);
    if (!e->done) return false;
  }
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  return true;
}

absl::StatusOr<int64_t> CpuDevice::EventElapsedNs(EventId start, EventId end) {
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> a, FindEvent(start));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> b, FindEvent(end));
  if (a->stream != b->stream) {
    return absl::InvalidArgumentError(absl::StrCat("events ", start.value, " and ", end.value,
                                                   " were recorded on different streams"));
  }
  if (b->seq < a->seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("event ", end.value, " was recorded before event ", start.value));
  }
  int64_t a_ns, b_ns;
  {
    absl::MutexLock lock(&a->mu);
    if (!a->done) {
      return absl::FailedPreconditionError(absl::StrCat("event ", start.value, " has not completed"));
    }
    a_ns = a->busy_ns;
  }
  {
    absl::MutexLock lock(&b->mu);
    if (!b->done) {
      return absl::FailedPreconditionError(absl::StrCat("event ", end.value, " has not completed"));
    }
    b_ns = b->busy_ns;
  }
  return b_ns - a_ns;
}

absl::Status CpuDevice::DestroyEvent(EventId event) {
  absl::MutexLock lock(&mu_);
  if (events_.erase(event.value) == 0) {
    return absl::NotFoundError(absl::StrCat("event ", event.value, " not found"));
  }
  return absl::OkStatus();
}

bool CpuDevice::SupportsOp(absl::string_view op_name) const {
  absl::StatusOr<const OpDef*> op = OpRegistry::Builtin().Find(op_name);
  return op.ok() && (*op)->cpu != nullptr;
}

absl::Status CpuDevice::RunOp(const OpLaunch& launch, StreamId stream) {
  GPUKIT_RETURN_IF_ERROR(health_->Check());
  if (launch.op == nullptr) return absl::InvalidArgumentError("RunOp without an op");
  const CpuOpKernel kernel = launch.op->cpu;
  if (kernel == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("op \"", launch.op->name, "\" has no CPU implementation"));
  }
  // Resolve every buffer now, so a stale id fails the call rather than the stream.
  std::vector<const void*> inputs;
  for (const OpOperand& operand : launch.inputs) {
    if (operand.is_scalar) {
      inputs.push_back(nullptr);
      continue;
    }
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(operand.desc.shape, operand.desc.dtype));
    GPUKIT_ASSIGN_OR_RETURN(const std::byte* data, Resolve(operand.buffer, 0, bytes));
    inputs.push_back(data);
  }
  GPUKIT_ASSIGN_OR_RETURN(int64_t out_bytes,
                          ByteSize(launch.plan.output.shape, launch.plan.output.dtype));
  GPUKIT_ASSIGN_OR_RETURN(std::byte * out, Resolve(launch.output, 0, out_bytes));
  GPUKIT_ASSIGN_OR_RETURN(Stream * s, FindStream(stream));
  s->Enqueue(
      [kernel, launch, inputs = std::move(inputs), out] { return kernel(launch, inputs, out); },
      launch.op->cpu_on_stream_thread);
  return absl::OkStatus();
}

namespace {
absl::Status NoDeviceCode() {
  return absl::FailedPreconditionError(
      "kernel launch requires a GPU; the CPU simulation backend cannot run device code");
}
}  // namespace

absl::StatusOr<ModuleId> CpuDevice::LoadModule(absl::string_view) { return NoDeviceCode(); }
absl::Status CpuDevice::UnloadModule(ModuleId) { return NoDeviceCode(); }
absl::StatusOr<FunctionId> CpuDevice::GetFunction(ModuleId, absl::string_view) {
  return NoDeviceCode();
}
absl::Status CpuDevice::Launch(FunctionId, const LaunchConfig&, absl::Span<const KernelArg>,
                               StreamId) {
  return NoDeviceCode();
}

}  // namespace gpukit
