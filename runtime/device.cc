#include "runtime/device.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/sm_layout.h"

namespace gpukit {

absl::string_view BackendName(BackendKind backend) {
  switch (backend) {
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

absl::StatusOr<HostBuffer> Device::AllocateHostBuffer(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("host buffer of ", bytes, " bytes"));
  }
  if (bytes == 0) return HostBuffer();
  constexpr int64_t kAlignment = 64;
  if (bytes > std::numeric_limits<int64_t>::max() - kAlignment) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " host bytes"));
  }
  const int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* data = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host memory exhausted: cannot allocate ", bytes, " bytes"));
  }
  return HostBuffer(static_cast<char*>(data), bytes, /*pinned=*/false,
                    [](char* p) { std::free(p); });
}

absl::Status Device::RegisterHostMemory(void* /*data*/, int64_t /*bytes*/, int /*shared_fd*/) {
  return absl::OkStatus();
}

absl::Status Device::UnregisterHostMemory(void* /*data*/) { return absl::OkStatus(); }

absl::StatusOr<ExportedBuffer> Device::ExportBuffer(BufferId buffer, ExportForm /*form*/) {
  GPUKIT_RETURN_IF_ERROR(BufferBytes(buffer).status());
  return absl::FailedPreconditionError(
      absl::StrCat("buffers of the ", BackendName(properties().backend),
                   " backend cannot be mapped by another process; use host shared memory"));
}

absl::StatusOr<BufferId> Device::ImportBuffer(ImportedMemory memory) {
  return absl::FailedPreconditionError(
      absl::StrCat("the ", BackendName(properties().backend), " backend cannot use ",
                   memory.cuda_ipc_handle.empty() ? "shared memory of another process"
                                                  : "CUDA IPC handles (they need a GPU)",
                   " as a buffer"));
}

absl::Status Device::MapSegment(uint64_t /*key*/, ScopedFd /*fd*/, int64_t /*bytes*/) {
  return absl::FailedPreconditionError(absl::StrCat("the ", BackendName(properties().backend),
                                                    " device cannot map another process's memory"));
}

absl::Status Device::UnmapSegment(uint64_t key) {
  return absl::NotFoundError(absl::StrCat("no mapped segment ", key));
}

absl::StatusOr<BufferId> Device::BufferInSegment(uint64_t key, int64_t /*offset*/,
                                                 int64_t /*bytes*/) {
  return absl::NotFoundError(absl::StrCat("no mapped segment ", key));
}

absl::Status Device::CheckHealth() { return absl::OkStatus(); }

absl::Status Device::FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(int64_t size, BufferBytes(buffer));
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("zero fill of [", offset, ", ", offset, " + ", bytes,
                                              ") is outside a buffer of ", size, " bytes"));
  }
  // Never freed, so it outlives every copy still queued from it.
  constexpr int64_t kBlockBytes = int64_t{1} << 20;
  static const char* const kZeros = new char[kBlockBytes]();
  for (int64_t done = 0; done < bytes; done += kBlockBytes) {
    GPUKIT_RETURN_IF_ERROR(CopyHostToDevice(buffer, offset + done, kZeros,
                                            std::min(kBlockBytes, bytes - done), stream));
  }
  return absl::OkStatus();
}

namespace {

// One pair's outcome once its end event's wait gave `end_status`: that status, or, when it
// is OK, the device time EventElapsedNs gives (or its error).
EventPairOutcome PairOutcome(Device& device, const EventPair& pair, absl::Status end_status) {
  EventPairOutcome outcome;
  outcome.status = std::move(end_status);
  if (!outcome.status.ok()) return outcome;
  absl::StatusOr<int64_t> ns = device.EventElapsedNs(pair.start, pair.end);
  if (ns.ok()) {
    outcome.elapsed_ns = *ns;
  } else {
    outcome.status = ns.status();
  }
  return outcome;
}

}  // namespace

std::vector<EventPairOutcome> Device::WaitEventPairs(absl::Span<const EventPair> pairs) {
  if (pairs.empty()) return {};
  // The last first: once it has completed every earlier one has, and each wait after it
  // answers at once.
  absl::Status last = WaitEvent(pairs.back().end);
  if (!last.ok()) return WaitEventPairsOneByOne(*this, pairs, std::move(last));
  // Every end has completed: a pair that went well takes one call (ElapsedNsIfCompleted);
  // the others are asked step by step, in their own words.
  std::vector<EventPairOutcome> outcomes(pairs.size());
  for (size_t i = 0; i + 1 < pairs.size(); ++i) {
    absl::StatusOr<int64_t> ns = ElapsedNsIfCompleted(pairs[i].start, pairs[i].end);
    outcomes[i] = ns.ok() ? EventPairOutcome{absl::OkStatus(), *ns}
                          : PairOutcome(*this, pairs[i], WaitEvent(pairs[i].end));
  }
  outcomes.back() = PairOutcome(*this, pairs.back(), std::move(last));
  return outcomes;
}

absl::StatusOr<int64_t> Device::ElapsedNsIfCompleted(EventId start, EventId end) {
  GPUKIT_ASSIGN_OR_RETURN(const bool done, QueryEvent(end));
  if (!done) {
    return absl::FailedPreconditionError(absl::StrCat("event ", end.value, " has not completed"));
  }
  GPUKIT_RETURN_IF_ERROR(WaitEvent(end));
  return EventElapsedNs(start, end);
}

std::vector<EventPairOutcome> WaitEventPairsOneByOne(Device& device,
                                                     absl::Span<const EventPair> pairs,
                                                     absl::Status last) {
  std::vector<EventPairOutcome> outcomes(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    outcomes[i] = PairOutcome(
        device, pairs[i], i + 1 == pairs.size() ? std::move(last) : device.WaitEvent(pairs[i].end));
  }
  return outcomes;
}

absl::Status ValidateStreamOptions(const StreamOptions& options) {
  if (!(options.sm_share > 0 && options.sm_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream sm_share = ", options.sm_share, " must be in (0, 1]"));
  }
  if (options.sm_first.has_value()) {
    // Any layout answers the same errors; its groups do not matter here.
    return PlaceSmGroups(SmLayout{.sm_count = 1, .group_sms = 1}, *options.sm_first,
                         options.sm_share)
        .status();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> StreamSmCountFor(const SmLayout& layout, const StreamOptions& options) {
  GPUKIT_RETURN_IF_ERROR(ValidateStreamOptions(options));
  if (!options.sm_first.has_value()) return SharedSmCount(layout, options.sm_share);
  GPUKIT_ASSIGN_OR_RETURN(SmGroupRange groups,
                          PlaceSmGroups(layout, *options.sm_first, options.sm_share));
  return PlacedSmCount(layout, groups);
}

absl::StatusOr<int> Device::StreamSmCount(StreamId) const {
  return absl::FailedPreconditionError(absl::StrCat(BackendName(properties().backend), " device ",
                                                    properties().index,
                                                    " does not report the SMs of its streams"));
}

absl::Status CheckImportedRange(const ImportedMemory& memory) {
  if (memory.bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an imported buffer needs > 0 bytes, not ", memory.bytes));
  }
  if (memory.offset_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative offset ", memory.offset_bytes, " into imported memory"));
  }
  if (memory.cuda_ipc_handle.empty() &&
      (memory.allocation_bytes <= 0 || memory.offset_bytes > memory.allocation_bytes ||
       memory.bytes > memory.allocation_bytes - memory.offset_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("imported range [", memory.offset_bytes, ", +", memory.bytes,
                     ") is outside the shared allocation of ", memory.allocation_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Device::RunOpBetweenEvents(const OpLaunch& launch, StreamId stream, EventId* start,
                                        EventId* end) {
  return EnqueueBetweenEvents(
      *this, stream, [&] { return RunOp(launch, stream); }, start, end);
}

absl::Status EnqueueBetweenEvents(Device& device, StreamId stream,
                                  const std::function<absl::Status()>& enqueue, EventId* start,
                                  EventId* end) {
  GPUKIT_ASSIGN_OR_RETURN(EventId first, device.RecordEvent(stream));
  // Nothing was queued when `enqueue` fails (its checks come first).
  absl::Status status = enqueue();
  absl::StatusOr<EventId> last =
      status.ok() ? device.RecordEvent(stream) : absl::StatusOr<EventId>(status);
  if (!last.ok()) {
    // Destroying a pending event is allowed on every backend.
    device.DestroyEvent(first).IgnoreError();
    return last.status();
  }
  *start = first;
  *end = *last;
  return absl::OkStatus();
}

absl::Status Device::DestroyEvents(absl::Span<const EventId> events) {
  absl::Status first;
  for (EventId event : events) first.Update(DestroyEvent(event));
  return first;
}

absl::Status SynchronizeStream(Device& device, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(EventId event, device.RecordEvent(stream));
  absl::Status status = device.WaitEvent(event);
  absl::Status destroyed = device.DestroyEvent(event);
  return status.ok() ? destroyed : status;
}

}  // namespace gpukit
