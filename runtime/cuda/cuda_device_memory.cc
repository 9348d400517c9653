// CudaDevice's memory: the pools buffers and host buffers come from, buffers (allocate, free,
// look up), registered host memory, export and import between processes, and segments of
// gpukitd's memory mapped in the device executor. The rest of the class is in cuda_device.cc
// (creation, streams, copies, events, modules, launches) and cuda_device_ops.cc.
#include <cuda.h>  // types and constants only; calls go through CudaDriver

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_device_internal.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/shared_mapping.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::Status CudaDevice::EnableMemoryPools(const CudaDeviceOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(
      host_pool_,
      MemoryPool::Create(std::make_unique<PinnedHostSource>(cu_, context_), options.host_pool));
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaSegmentSource> source,
                          CudaSegmentSource::Create(cu_, context_, device_));
  memory_source_ = source->Describe();
  memory_exportable_ = source->kind() == CudaSegmentSource::Kind::kVmmPosixFd;
  if (source->kind() != CudaSegmentSource::Kind::kVmmPosixFd) {
    spdlog::warn("{}: device memory through {}", Describe(), memory_source_);
  }
  GPUKIT_ASSIGN_OR_RETURN(pool_, MemoryPool::Create(std::move(source), options.memory_pool));
  spdlog::info("{}: memory pool over {}, caching up to {} MiB of free memory", Describe(),
               memory_source_, options.memory_pool.max_cached_bytes >> 20);
  return absl::OkStatus();
}

// ---- Memory ----

MemoryInfo CudaDevice::GetMemoryInfo() const {
  absl::MutexLock lock(&mu_);
  return {properties_.memory_total_bytes, used_bytes_};
}

absl::StatusOr<uint64_t> CudaDevice::AllocateDeviceMemory(int64_t bytes) {
  absl::StatusOr<PoolBlock> block = pool_->Allocate(bytes);
  if (absl::IsResourceExhausted(block.status())) {
    int64_t used_bytes;
    {
      absl::MutexLock lock(&mu_);
      used_bytes = used_bytes_;
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(Describe(), " is out of memory: cannot allocate ", bytes,
                     " bytes (gpukit buffers hold ", used_bytes, " of its ",
                     properties_.memory_total_bytes, " bytes; ", block.status().message(), ")"));
  }
  if (!block.ok()) return block.status();
  return block->address;
}

absl::Status CudaDevice::ReleaseDeviceMemory(uint64_t address) { return pool_->Free(address); }

absl::StatusOr<BufferId> CudaDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("allocation of ", bytes, " bytes"));
  }
  if (bytes > properties_.memory_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(Describe(), " cannot hold ", bytes,
                                                     " bytes: it has ",
                                                     properties_.memory_total_bytes, " in all"));
  }
  uint64_t address = 0;  // a zero-byte buffer holds no memory
  if (bytes > 0) {
    GPUKIT_ASSIGN_OR_RETURN(address, AllocateDeviceMemory(bytes));
  }
  absl::MutexLock lock(&mu_);
  used_bytes_ += bytes;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, Allocation{address, bytes});
  return BufferId{id};
}

absl::Status CudaDevice::Free(BufferId buffer) {
  Allocation doomed;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer.value);
    if (it == buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
    }
    doomed = std::move(it->second);
    buffers_.erase(it);
    if (doomed.in_segment) {
      // The segment's memory stays mapped until UnmapSegment; the buffer was only a range.
      if (auto segment = segments_.find(doomed.segment_key); segment != segments_.end()) {
        --segment->second.buffers;
      }
      return absl::OkStatus();
    }
    if (doomed.imported == nullptr) used_bytes_ -= doomed.bytes;
  }
  // Outside the lock: both may wait for the GPU.
  if (doomed.imported != nullptr) {
    GPUKIT_RETURN_IF_ERROR(Bind());
    doomed.imported.reset();  // unmaps
    return absl::OkStatus();
  }
  if (doomed.address == 0) return absl::OkStatus();
  if (doomed.legacy_ipc) {
    GPUKIT_RETURN_IF_ERROR(Bind());
    return CheckCu(cu_.cuMemFree(static_cast<CUdeviceptr>(doomed.address)), "cuMemFree");
  }
  return ReleaseDeviceMemory(doomed.address);
}

absl::StatusOr<BufferId> CudaDevice::ImportBuffer(ImportedMemory memory) {
  GPUKIT_RETURN_IF_ERROR(CheckImportedRange(memory));
  GPUKIT_RETURN_IF_ERROR(Bind());
  absl::StatusOr<std::unique_ptr<SharedMapping>> mapping =
      memory.cuda_ipc_handle.empty()
          ? SharedMapping::OpenDescriptor(cu_, device_, std::move(memory.fd),
                                          memory.allocation_bytes)
          : SharedMapping::OpenIpcHandle(cu_, memory.cuda_ipc_handle);
  if (!mapping.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(), " cannot map the shared memory: ", mapping.status().message()));
  }
  std::shared_ptr<SharedMapping> imported = *std::move(mapping);
  if (memory.offset_bytes > imported->bytes() ||
      memory.bytes > imported->bytes() - memory.offset_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("imported range [", memory.offset_bytes, ", +", memory.bytes,
                     ") is outside the shared allocation of ", imported->bytes(), " bytes"));
  }
  // A legacy handle of memory on another GPU opens through peer access; gpukit wants the
  // session's own GPU.
  int ordinal = -1;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                        static_cast<CUdeviceptr>(imported->address())),
              "cuPointerGetAttribute"));
  if (ordinal != properties_.index) {
    return absl::InvalidArgumentError(absl::StrCat("the shared memory is on CUDA device ", ordinal,
                                                   " of gpukitd's, not on ", Describe()));
  }
  const uint64_t address = imported->address() + static_cast<uint64_t>(memory.offset_bytes);
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  buffers_.emplace(id, Allocation{address, memory.bytes, std::move(imported)});
  return BufferId{id};
}

absl::Status CudaDevice::MapSegment(uint64_t key, ScopedFd fd, int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key, " of ", bytes, " bytes: a segment has > 0 bytes"));
  }
  auto key_in_use = [key] {
    return absl::InvalidArgumentError(absl::StrCat("segment key ", key, " is already mapped"));
  };
  {
    absl::MutexLock lock(&mu_);
    if (segments_.contains(key)) return key_in_use();
  }
  // Mapped outside the lock (driver calls); a racing MapSegment of the same key loses below.
  GPUKIT_RETURN_IF_ERROR(Bind());
  absl::StatusOr<std::unique_ptr<SharedMapping>> mapping =
      SharedMapping::OpenDescriptor(cu_, device_, std::move(fd), bytes);
  if (!mapping.ok()) {
    // A faulted context fails every call alike: that is the device's state, not the caller's
    // descriptor, and the caller must learn it as such.
    GPUKIT_RETURN_IF_ERROR(CheckHealth());
    return absl::InvalidArgumentError(absl::StrCat(Describe(), " cannot map segment ", key, " of ",
                                                   bytes, " bytes: ", mapping.status().message()));
  }
  std::shared_ptr<SharedMapping> mapped = *std::move(mapping);
  {
    absl::MutexLock lock(&mu_);
    if (!segments_.contains(key)) {
      segments_.emplace(key, MappedSegment{std::move(mapped), 0});
      return absl::OkStatus();
    }
  }
  mapped.reset();  // unmaps, outside the lock; the context is still current
  return key_in_use();
}

absl::Status CudaDevice::UnmapSegment(uint64_t key) {
  std::shared_ptr<SharedMapping> doomed;
  {
    absl::MutexLock lock(&mu_);
    auto it = segments_.find(key);
    if (it == segments_.end()) {
      return absl::NotFoundError(absl::StrCat("segment ", key, " is not mapped"));
    }
    if (it->second.buffers > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "segment ", key, " still holds ", it->second.buffers, " buffer(s); free them first"));
    }
    doomed = std::move(it->second.mapping);
    segments_.erase(it);
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  doomed.reset();  // unmaps
  return absl::OkStatus();
}

absl::StatusOr<BufferId> CudaDevice::BufferInSegment(uint64_t key, int64_t offset, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = segments_.find(key);
  if (it == segments_.end()) {
    return absl::NotFoundError(absl::StrCat("segment ", key, " is not mapped"));
  }
  const int64_t segment_bytes = it->second.mapping->bytes();
  if (offset < 0 || bytes < 0 || offset > segment_bytes || bytes > segment_bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes,
                                              ") is outside segment ", key, " of ", segment_bytes,
                                              " bytes"));
  }
  Allocation allocation;
  allocation.address = it->second.mapping->address() + static_cast<uint64_t>(offset);
  allocation.bytes = bytes;
  allocation.in_segment = true;
  allocation.segment_key = key;
  ++it->second.buffers;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, std::move(allocation));
  return BufferId{id};
}

absl::StatusOr<HostBuffer> CudaDevice::AllocateHostBuffer(int64_t bytes) {
  if (bytes <= 0) return Device::AllocateHostBuffer(bytes);
  absl::StatusOr<PoolBlock> block = host_pool_->Allocate(bytes);
  if (!block.ok()) {
    spdlog::debug("{}: no pinned host memory for {} bytes ({}); using pageable memory", Describe(),
                  bytes, std::string(block.status().message()));
    return Device::AllocateHostBuffer(bytes);
  }
  MemoryPool* pool = host_pool_.get();
  return HostBuffer(
      reinterpret_cast<char*>(block->address), bytes, /*pinned=*/true,
      [pool](char* data) { pool->Free(reinterpret_cast<uint64_t>(data)).IgnoreError(); });
}

absl::StatusOr<ExportedBuffer> CudaDevice::ExportBuffer(BufferId buffer, ExportForm form) {
  // One export at a time on the device. mu_ is dropped while MoveBuffer waits for the streams
  // and copies, so without this two exports of one buffer both read its old address, both
  // moved it, and the later one failed (ABORTED) although the buffer was exportable; worse, a
  // descriptor export of a buffer already in a segment of its own could hand out that
  // segment's descriptor while an IPC export of the buffer moved it to a cuMemAlloc
  // allocation: the importer then mapped memory the buffer had left, and the buffer carried
  // both forms. Under export_mu_ the allocation is read after
  // any earlier export has recorded its move and its form, so a second export of the buffer
  // finds it in its own memory and names that same memory. Exports are rare and each costs a
  // driver call or a copy already; no other call takes export_mu_, so only exports wait.
  absl::MutexLock export_lock(&export_mu_);
  Allocation allocation;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer.value);
    if (it == buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
    }
    allocation = it->second;
  }
  if (allocation.bytes == 0) {
    return absl::InvalidArgumentError("a zero-byte buffer has no memory to export");
  }
  if (allocation.imported != nullptr) {
    return absl::FailedPreconditionError(
        "the buffer is memory another process shared with gpukit; it cannot be exported again");
  }
  if (allocation.in_segment) {
    return absl::FailedPreconditionError(
        absl::StrCat("the buffer lies in segment ", allocation.segment_key,
                     ", memory another process owns; its owner exports it, this device cannot"));
  }
  if (form == ExportForm::kCudaIpcHandle) {
    if (allocation.exported_descriptor) {
      return absl::FailedPreconditionError(
          "the buffer was exported as a descriptor; it cannot also be a CUDA IPC handle");
    }
    return ExportIpcHandle(buffer, allocation);
  }
  if (allocation.legacy_ipc) {
    return absl::FailedPreconditionError(
        "the buffer was exported as a CUDA IPC handle; it cannot also be a descriptor");
  }
  if (!memory_exportable_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(), ": its memory cannot be exported as a descriptor: it comes from ",
                     memory_source_));
  }
  return ExportDescriptor(buffer, allocation);
}

absl::Status CudaDevice::MoveBuffer(BufferId buffer, uint64_t from, uint64_t to, int64_t bytes,
                                    bool to_legacy) {
  // Work other requests queued on the buffer (on any stream) finishes first, so that nothing
  // reads the old memory once it is freed.
  GPUKIT_RETURN_IF_ERROR(Bind());
  GPUKIT_RETURN_IF_ERROR(SynchronizeAllStreams());
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemcpyDtoD(to, from, static_cast<size_t>(bytes)), "cuMemcpyDtoD"));
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end() || it->second.address != from) {
    return absl::AbortedError("the buffer was freed or moved during its export");
  }
  it->second.address = to;
  it->second.legacy_ipc = to_legacy;
  return absl::OkStatus();
}

absl::StatusOr<ExportedBuffer> CudaDevice::ExportDescriptor(BufferId buffer,
                                                            const Allocation& allocation) {
  GPUKIT_ASSIGN_OR_RETURN(PoolBlock block, pool_->Lookup(allocation.address));
  if (block.shares_segment) {
    // Its slab holds other buffers, which the importer must not reach: move it out.
    GPUKIT_ASSIGN_OR_RETURN(PoolBlock own, pool_->AllocateOwnSegment(allocation.bytes));
    if (absl::Status moved =
            MoveBuffer(buffer, allocation.address, own.address, allocation.bytes, false);
        !moved.ok()) {
      pool_->Free(own.address).IgnoreError();
      return moved;
    }
    pool_->Free(allocation.address).IgnoreError();
    block = own;
  }
  GPUKIT_RETURN_IF_ERROR(pool_->MarkShared(block.address));
  GPUKIT_RETURN_IF_ERROR(Bind());
  int fd = -1;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemExportToShareableHandle(
                  &fd, static_cast<CUmemGenericAllocationHandle>(block.segment.handle),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              "cuMemExportToShareableHandle"));
  ExportedBuffer exported;
  exported.fd.Reset(fd);
  {
    // Freeing a buffer while exporting it is the caller's error (as freeing it with work
    // queued is), but the descriptor must never name memory the buffer no longer has: the
    // pool may have given it to another buffer.
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer.value);
    if (it == buffers_.end() || it->second.address != block.address) {
      return absl::AbortedError(
          absl::StrCat("buffer ", buffer.value, " was freed during its export"));
    }
    it->second.exported_descriptor = true;
  }
  exported.allocation_bytes = block.segment.bytes;
  exported.offset_bytes = 0;
  exported.bytes = allocation.bytes;
  return exported;
}

absl::StatusOr<ExportedBuffer> CudaDevice::ExportIpcHandle(BufferId buffer,
                                                           const Allocation& allocation) {
  uint64_t address = allocation.address;
  if (!allocation.legacy_ipc) {
    // cuIpcGetMemHandle names whole cuMemAlloc allocations: give the buffer one of its own.
    GPUKIT_RETURN_IF_ERROR(Bind());
    CUdeviceptr own = 0;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(cu_.cuMemAlloc(&own, static_cast<size_t>(allocation.bytes)), "cuMemAlloc"));
    if (absl::Status moved = MoveBuffer(buffer, allocation.address, own, allocation.bytes, true);
        !moved.ok()) {
      LogQuietlyIfFailed(cu_.cuMemFree(own), "cuMemFree");
      return moved;
    }
    ReleaseDeviceMemory(allocation.address).IgnoreError();
    address = own;
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  CUipcMemHandle handle;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuIpcGetMemHandle(&handle, static_cast<CUdeviceptr>(address)),
                                 "cuIpcGetMemHandle"));
  ExportedBuffer exported;
  exported.cuda_ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  exported.allocation_bytes = allocation.bytes;
  exported.offset_bytes = 0;
  exported.bytes = allocation.bytes;
  return exported;
}

absl::Status CudaDevice::RegisterHostMemory(void* data, int64_t bytes, int /*shared_fd*/) {
  if (data == nullptr || bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host range of ", bytes, " bytes at null"));
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemHostRegister(data, static_cast<size_t>(bytes), 0), "cuMemHostRegister"));
  absl::MutexLock lock(&mu_);
  registered_host_[reinterpret_cast<uintptr_t>(data)] = bytes;
  return absl::OkStatus();
}

absl::Status CudaDevice::UnregisterHostMemory(void* data) {
  {
    absl::MutexLock lock(&mu_);
    if (registered_host_.erase(reinterpret_cast<uintptr_t>(data)) == 0) {
      return absl::NotFoundError("host range was not registered");
    }
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  return CheckCu(cu_.cuMemHostUnregister(data), "cuMemHostUnregister");
}

bool CudaDevice::IsPinnedHostRange(const void* data, int64_t bytes) const {
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  if (host_pool_->Owns(start, bytes)) return true;
  absl::MutexLock lock(&mu_);
  auto it = registered_host_.upper_bound(start);
  if (it == registered_host_.begin()) return false;
  --it;
  const uintptr_t offset = start - it->first;
  return offset < static_cast<uintptr_t>(it->second) &&
         static_cast<uintptr_t>(bytes) <= static_cast<uintptr_t>(it->second) - offset;
}

absl::StatusOr<int64_t> CudaDevice::BufferBytes(BufferId buffer) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  return it->second.bytes;
}

absl::StatusOr<uint64_t> CudaDevice::Resolve(BufferId buffer, int64_t offset, int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  const int64_t size = it->second.bytes;
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes, ") outside buffer ",
                                              buffer.value, " of ", size, " bytes"));
  }
  return it->second.address + static_cast<uint64_t>(offset);
}

}  // namespace gpukit
