// Core: memory shared with clients: host shared memory regions (RegisterHostMemory and the
// copies through them) and exported device arrays (ExportArray).
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/core.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::StatusOr<HostRegionGrant> Core::RegisterHostMemory(absl::string_view session_id,
                                                         int64_t bytes) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  if (bytes <= 0 || bytes > options_.limits.max_array_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("host memory region of ", bytes, " bytes: must be > 0 and at most ",
                     options_.limits.max_array_bytes, " (limits.maxArraySize)"));
  }
  Device& device = *devices_[session->admission().device_index].device;
  auto region = std::make_shared<HostRegion>(NewOpaqueId("m-"), device, bytes);
  GPUKIT_RETURN_IF_ERROR(
      Conclude(*session, session->AddRegion(region, options_.max_host_regions_per_session)));
  const std::string token =
      pending_regions_.Add(PendingRegion{session, region}, options_.host_memory_token_ttl);
  return HostRegionGrant{region->handle(), token, options_.host_memory_token_ttl};
}

absl::Status Core::DeliverDescriptor(absl::string_view token, ScopedFd fd) {
  if (std::optional<PendingImport> import = pending_imports_.Take(token); import.has_value()) {
    std::shared_ptr<Session> session = import->session.lock();
    if (session == nullptr) return absl::NotFoundError("the importing session has ended");
    ImportedMemory memory;
    memory.fd = std::move(fd);
    memory.allocation_bytes = import->allocation_bytes;
    memory.offset_bytes = import->offset_bytes;
    return AdoptImportedMemory(*session, import->array.handle, import->array.desc,
                               std::move(memory))
        .status();
  }
  std::optional<PendingRegion> pending = pending_regions_.Take(token);
  std::shared_ptr<HostRegion> region = pending.has_value() ? pending->region.lock() : nullptr;
  std::shared_ptr<Session> session = pending.has_value() ? pending->session.lock() : nullptr;
  if (region == nullptr || session == nullptr) {  // also when its session has gone meanwhile
    return absl::NotFoundError("unknown, used or lapsed descriptor token");
  }
  GPUKIT_RETURN_IF_ERROR(region->Attach(std::move(fd)));
  // A session that ended meanwhile dropped the region: its mapping goes with `region` here.
  GPUKIT_RETURN_IF_ERROR(Conclude(*session, absl::OkStatus()));
  spdlog::debug("host memory region mapped: region={} bytes={}", region->handle(), region->bytes());
  return absl::OkStatus();
}

absl::Status Core::UnregisterHostMemory(absl::string_view session_id, absl::string_view region) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  // Unmapped when the last copy using it lets go.
  return Conclude(*session, session->RemoveRegion(region).status());
}

absl::Status Core::CopyFromHostMemory(absl::string_view session_id, absl::string_view handle,
                                      int64_t array_offset, absl::string_view region,
                                      int64_t region_offset, int64_t bytes,
                                      const TaskOptions& task) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<HostRegion> source, session->FindRegion(region));
  GPUKIT_ASSIGN_OR_RETURN(char* data, source->Data(region_offset, bytes));
  return WriteArray(session_id, handle, array_offset,
                    absl::Span<const char>(data, static_cast<size_t>(bytes)), task);
}

absl::Status Core::CopyToHostMemory(absl::string_view session_id, absl::string_view handle,
                                    int64_t array_offset, absl::string_view region,
                                    int64_t region_offset, int64_t bytes, const TaskOptions& task) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<HostRegion> target, session->FindRegion(region));
  GPUKIT_ASSIGN_OR_RETURN(char* data, target->Data(region_offset, bytes));
  return ReadArray(session_id, handle, array_offset,
                   absl::Span<char>(data, static_cast<size_t>(bytes)), task);
}

absl::StatusOr<ArrayExport> Core::ExportArray(absl::string_view session_id,
                                              absl::string_view handle, ExportForm form) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->FindArray(handle));
  GPUKIT_ASSIGN_OR_RETURN(ArrayPin pin, Conclude(*session, PinArray(*session, *array)));
  // Work the session queued and that has not run yet (pipelined ops writing the array) ends
  // first: the export may move the buffer on a stream of its own, and the client reads the
  // memory as soon as this returns.
  GPUKIT_RETURN_IF_ERROR(
      Conclude(*session, SynchronizeStream(array->device(), session->stream())));
  GPUKIT_ASSIGN_OR_RETURN(ExportedBuffer exported,
                          array->device().ExportBuffer(pin.buffer(), form));
  // A session that ended meanwhile freed the array: its export (and the descriptor, dropped
  // here) would hand the client memory that is no longer the array's.
  GPUKIT_RETURN_IF_ERROR(Conclude(*session, absl::OkStatus()));
  array->MarkShared(/*until_session_end=*/form == ExportForm::kCudaIpcHandle);
  ArrayExport result;
  result.token_ttl = options_.host_memory_token_ttl;
  result.allocation_bytes = exported.allocation_bytes;
  result.offset_bytes = exported.offset_bytes;
  result.bytes = exported.bytes;
  result.device_index = array->device().properties().index;
  if (form == ExportForm::kCudaIpcHandle) {
    result.cuda_ipc_handle = std::move(exported.cuda_ipc_handle);
  } else {
    result.token = pending_exports_.Add(std::move(exported.fd), result.token_ttl);
  }
  spdlog::debug("array exported: session={} array={} bytes={}", session->id(), array->handle(),
                result.bytes);
  return result;
}

absl::StatusOr<ScopedFd> Core::FetchExport(absl::string_view token) {
  std::optional<ScopedFd> fd = pending_exports_.Take(token);
  if (!fd.has_value()) return absl::NotFoundError("unknown, used or lapsed export token");
  return *std::move(fd);
}

absl::StatusOr<ArrayView> Core::AdoptImportedMemory(Session& session, std::string handle,
                                                    const TensorDesc& desc,
                                                    ImportedMemory memory) {
  GPUKIT_RETURN_IF_ERROR(session.CheckArrayRoom(options_.limits.max_arrays_per_session));
  GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(desc.shape, desc.dtype));
  GPUKIT_ASSIGN_OR_RETURN(MemoryReservation reservation,
                          Conclude(session, ReserveMemory(session, bytes)));
  Device& device = *devices_[session.admission().device_index].device;
  memory.bytes = bytes;
  GPUKIT_ASSIGN_OR_RETURN(BufferId buffer,
                          Conclude(session, device.ImportBuffer(std::move(memory))));
  auto array = std::make_shared<DeviceArray>(std::move(handle), device, buffer, desc, bytes,
                                             std::move(reservation), clock_.Now());
  array->MarkShared();
  ArrayView view = View(*array);
  GPUKIT_RETURN_IF_ERROR(Conclude(
      session, session.AddArray(std::move(array), options_.limits.max_arrays_per_session)));
  spdlog::debug("client memory imported: session={} array={} bytes={}", session.id(), view.handle,
                bytes);
  return view;
}

absl::StatusOr<ArrayView> Core::ImportArray(absl::string_view session_id, const TensorDesc& desc,
                                            std::string cuda_ipc_handle, int64_t offset_bytes) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_RETURN_IF_ERROR(ValidateShape(desc.shape, "shape"));
  ImportedMemory memory;
  memory.cuda_ipc_handle = std::move(cuda_ipc_handle);
  memory.offset_bytes = offset_bytes;
  return AdoptImportedMemory(*session, NewOpaqueId("a-"), desc, std::move(memory));
}

absl::StatusOr<ArrayImportGrant> Core::ImportArrayByDescriptor(absl::string_view session_id,
                                                               const TensorDesc& desc,
                                                               int64_t allocation_bytes,
                                                               int64_t offset_bytes) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_RETURN_IF_ERROR(ValidateShape(desc.shape, "shape"));
  GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(desc.shape, desc.dtype));
  // What can be told now is told now; the device checks the memory itself on delivery.
  ImportedMemory range;
  range.allocation_bytes = allocation_bytes;
  range.offset_bytes = offset_bytes;
  range.bytes = bytes;
  GPUKIT_RETURN_IF_ERROR(CheckImportedRange(range));
  GPUKIT_RETURN_IF_ERROR(session->CheckArrayRoom(options_.limits.max_arrays_per_session));
  ArrayImportGrant grant;
  grant.array = ArrayView{NewOpaqueId("a-"), desc, bytes, session->admission().device_index};
  grant.token_ttl = options_.host_memory_token_ttl;
  grant.token = pending_imports_.Add(
      PendingImport{session, grant.array, allocation_bytes, offset_bytes}, grant.token_ttl);
  return grant;
}

}  // namespace gpukit
