// CUDA IPC between two processes with nothing of gpukit's in between: the reference that
// gpukit's zero-copy paths (Array::Map, Client::ImportDeviceMemory) are measured against.
//
//   gpukit_ipc_bench [--rounds 200] [--mib 4]
//
// The process forks before either side touches CUDA (a forked CUDA context is unusable); the
// parent exports, the child imports, and a SOCK_SEQPACKET socketpair carries descriptors
// (SCM_RIGHTS) and handles between them. For each round the parent allocates fresh memory,
// exports it and hands it over; the child imports and maps it, reads one byte through it to
// prove it, unmaps it and answers. Printed per step, p50 and p99 in microseconds:
//
//   VMM (cuMemCreate, POSIX descriptor):
//     export        cuMemExportToShareableHandle in the exporter
//     import        cuMemImportFromShareableHandle in the importer
//     reserve       cuMemAddressReserve
//     map           cuMemMap
//     access        cuMemSetAccess (read-write for the device)
//     importer      the importer's four steps together
//     round trip    the exporter's export, send, the importer's work and its answer
//   the same, with the allocation mapped in the exporter before it exports it
//   legacy IPC (cuMemAlloc, cuIpcGetMemHandle):
//     get handle    cuIpcGetMemHandle in the exporter
//     open          cuIpcOpenMemHandle in the importer
//     close         cuIpcCloseMemHandle
//     round trip    as above
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cuda/cuda_driver.h"
#include <sys/socket.h>
#include <sys/wait.h>

namespace gpukit {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Timings by step name, in microseconds.
using Samples = std::map<std::string, std::vector<double>>;

void Print(const char* title, const std::vector<std::string>& steps, Samples& samples) {
  std::printf("%s\n", title);
  for (const std::string& step : steps) {
    std::vector<double>& v = samples[step];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const double p50 = v[v.size() / 2];
    const double p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
    std::printf("  %-12s p50 %9.1f us   p99 %9.1f us\n", step.c_str(), p50, p99);
  }
}

// The child's reply: its timings of one round.
struct Reply {
  double steps[4] = {};  // VMM: import reserve map access; legacy: open close
  char byte = 0;         // read through the mapping
  int error = 0;         // a CUresult, or -1 for a protocol error
};

absl::Status Init(const CudaDriver*& cu, CUcontext& context) {
  GPUKIT_ASSIGN_OR_RETURN(cu, CudaDriver::Get());
  CUdevice device = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGet(&device, 0), "cuDeviceGet"));
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"));
  return CheckCu(cu->cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

// The importer: serves rounds until the parent closes the socket.
int Importer(int socket) {
  const CudaDriver* cu = nullptr;
  CUcontext context = nullptr;
  if (absl::Status s = Init(cu, context); !s.ok()) {
    std::fprintf(stderr, "importer: %s\n", s.ToString().c_str());
    return 1;
  }
  for (;;) {
    absl::StatusOr<ReceivedMessage> message =
        ReceiveMessage(socket, sizeof(CUipcMemHandle) + 1, absl::Seconds(60));
    if (!message.ok()) return absl::IsUnavailable(message.status()) ? 0 : 1;
    Reply reply;
    if (message->bytes.size() == 1 + sizeof(size_t) && message->bytes[0] == 'v' &&
        message->fd.valid()) {  // VMM: the allocation's size follows
      size_t bytes = 0;
      std::memcpy(&bytes, message->bytes.data() + 1, sizeof(bytes));
      auto t = Clock::now();
      CUmemGenericAllocationHandle handle = 0;
      CUresult r = cu->cuMemImportFromShareableHandle(
          &handle, reinterpret_cast<void*>(static_cast<intptr_t>(message->fd.get())),
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      reply.steps[0] = MicrosSince(t);
      CUdeviceptr address = 0;
      if (r == CUDA_SUCCESS) {
        t = Clock::now();
        r = cu->cuMemAddressReserve(&address, bytes, 0, 0, 0);
        reply.steps[1] = MicrosSince(t);
      }
      if (r == CUDA_SUCCESS) {
        t = Clock::now();
        r = cu->cuMemMap(address, bytes, 0, handle, 0);
        reply.steps[2] = MicrosSince(t);
      }
      if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access = {};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        t = Clock::now();
        r = cu->cuMemSetAccess(address, bytes, &access, 1);
        reply.steps[3] = MicrosSince(t);
      }
      if (r == CUDA_SUCCESS) r = cu->cuMemcpyDtoH(&reply.byte, address, 1);
      if (address != 0) {
        cu->cuMemUnmap(address, bytes);
        cu->cuMemAddressFree(address, bytes);
      }
      if (handle != 0) cu->cuMemRelease(handle);
      reply.error = r;
    } else if (message->bytes.size() == sizeof(CUipcMemHandle) + 1 && message->bytes[0] == 'l') {
      CUipcMemHandle handle;
      std::memcpy(&handle, message->bytes.data() + 1, sizeof(handle));
      CUdeviceptr address = 0;
      auto t = Clock::now();
      CUresult r = cu->cuIpcOpenMemHandle(&address, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      reply.steps[0] = MicrosSince(t);
      if (r == CUDA_SUCCESS) {
        r = cu->cuMemcpyDtoH(&reply.byte, address, 1);
        t = Clock::now();
        const CUresult closed = cu->cuIpcCloseMemHandle(address);
        reply.steps[1] = MicrosSince(t);
        if (r == CUDA_SUCCESS) r = closed;
      }
      reply.error = r;
    } else {
      reply.error = -1;
    }
    if (!SendMessage(socket, &reply, sizeof(reply)).ok()) return 1;
  }
}

absl::StatusOr<Reply> Exchange(int socket, const std::string& message, int fd) {
  GPUKIT_RETURN_IF_ERROR(SendMessage(socket, message.data(), message.size(), fd));
  GPUKIT_ASSIGN_OR_RETURN(ReceivedMessage answer,
                          ReceiveMessage(socket, sizeof(Reply), absl::Seconds(60)));
  if (answer.bytes.size() != sizeof(Reply)) return absl::InternalError("short reply");
  Reply reply;
  std::memcpy(&reply, answer.bytes.data(), sizeof(reply));
  if (reply.error != 0) {
    return absl::InternalError(absl::StrCat("importer failed: ", reply.error));
  }
  return reply;
}

absl::Status Exporter(int socket, size_t bytes, int rounds) {
  const CudaDriver* cu = nullptr;
  CUcontext context = nullptr;
  GPUKIT_RETURN_IF_ERROR(Init(cu, context));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuMemGetAllocationGranularity(
                                     &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                                 "cuMemGetAllocationGranularity"));
  bytes = (bytes + granularity - 1) / granularity * granularity;

  // The exporter's allocation, fresh each round; `mapped` maps it here first, as gpukitd's
  // segments are when it exports them.
  auto vmm_rounds = [&](bool mapped, Samples& vmm) -> absl::Status {
    for (int i = 0; i < rounds + 1; ++i) {  // round 0 warms up both sides
      CUmemGenericAllocationHandle handle = 0;
      GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuMemCreate(&handle, bytes, &prop, 0), "cuMemCreate"));
      CUdeviceptr here = 0;
      if (mapped) {
        CUmemAccessDesc access = {};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        GPUKIT_RETURN_IF_ERROR(
            CheckCu(cu->cuMemAddressReserve(&here, bytes, 0, 0, 0), "cuMemAddressReserve"));
        GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuMemMap(here, bytes, 0, handle, 0), "cuMemMap"));
        GPUKIT_RETURN_IF_ERROR(
            CheckCu(cu->cuMemSetAccess(here, bytes, &access, 1), "cuMemSetAccess"));
      }
      const auto start = Clock::now();
      int fd = -1;
      absl::Status status = CheckCu(cu->cuMemExportToShareableHandle(
                                        &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                                    "cuMemExportToShareableHandle");
      const double exported = MicrosSince(start);
      ScopedFd owned(fd);
      std::string message = "v";
      message.append(reinterpret_cast<const char*>(&bytes), sizeof(bytes));
      absl::StatusOr<Reply> reply =
          status.ok() ? Exchange(socket, message, owned.get()) : absl::StatusOr<Reply>(status);
      const double round_trip = MicrosSince(start);
      if (mapped) {
        cu->cuMemUnmap(here, bytes);
        cu->cuMemAddressFree(here, bytes);
      }
      cu->cuMemRelease(handle);
      if (!reply.ok()) return reply.status();
      if (i == 0) continue;
      vmm["export"].push_back(exported);
      const char* steps[] = {"import", "reserve", "map", "access"};
      double importer = 0;
      for (int s = 0; s < 4; ++s) {
        vmm[steps[s]].push_back(reply->steps[s]);
        importer += reply->steps[s];
      }
      vmm["importer"].push_back(importer);
      vmm["round trip"].push_back(round_trip);
    }
    return absl::OkStatus();
  };
  Samples vmm, vmm_mapped, legacy;
  GPUKIT_RETURN_IF_ERROR(vmm_rounds(false, vmm));
  GPUKIT_RETURN_IF_ERROR(vmm_rounds(true, vmm_mapped));
  for (int i = 0; i < rounds + 1; ++i) {
    CUdeviceptr address = 0;
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuMemAlloc(&address, bytes), "cuMemAlloc"));
    const auto start = Clock::now();
    CUipcMemHandle handle;
    absl::Status status = CheckCu(cu->cuIpcGetMemHandle(&handle, address), "cuIpcGetMemHandle");
    const double got = MicrosSince(start);
    std::string message = "l";
    message.append(reinterpret_cast<const char*>(&handle), sizeof(handle));
    absl::StatusOr<Reply> reply =
        status.ok() ? Exchange(socket, message, -1) : absl::StatusOr<Reply>(status);
    const double round_trip = MicrosSince(start);
    cu->cuMemFree(address);
    if (!reply.ok()) return reply.status();
    if (i == 0) continue;
    legacy["get handle"].push_back(got);
    legacy["open"].push_back(reply->steps[0]);
    legacy["close"].push_back(reply->steps[1]);
    legacy["round trip"].push_back(round_trip);
  }
  std::printf("raw CUDA IPC, %zu-byte allocations, %d rounds, fresh memory each round\n", bytes,
              rounds);
  Print("VMM (cuMemCreate, POSIX descriptor over a unix socket):",
        {"export", "import", "reserve", "map", "access", "importer", "round trip"}, vmm);
  Print("VMM, the allocation mapped in the exporter first (as gpukitd's are):",
        {"export", "import", "reserve", "map", "access", "importer", "round trip"}, vmm_mapped);
  Print("legacy IPC (cuMemAlloc, cuIpcGetMemHandle):", {"get handle", "open", "close", "round trip"},
        legacy);
  return absl::OkStatus();
}

}  // namespace
}  // namespace gpukit

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  int rounds = 200;
  int64_t mib = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (flag == "--mib") mib = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: gpukit_ipc_bench [--rounds N] [--mib M]\n");
      return 2;
    }
  }
  if (rounds <= 0 || mib <= 0) {
    std::fprintf(stderr, "gpukit_ipc_bench: --rounds and --mib must be positive\n");
    return 2;
  }
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    std::perror("socketpair");
    return 1;
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    close(sockets[0]);
    _exit(gpukit::Importer(sockets[1]));
  }
  close(sockets[1]);
  absl::Status status = gpukit::Exporter(sockets[0], bytes, rounds);
  close(sockets[0]);  // the importer sees the peer close and exits
  int child_status = 0;
  waitpid(child, &child_status, 0);
  if (!status.ok()) {
    std::fprintf(stderr, "gpukit_ipc_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0 ? 0 : 1;
}
