// Zero-copy with gpukitd on the same host: host shared memory for bulk data, and the mapping
// of an array's device memory into this process.
//
//   gpukit_zero_copy [--addr ADDR] [--mib N]
//
// 1. Registers N MiB (default 64) of host shared memory, fills it in place, has gpukitd copy
//    it into an array (no bytes in gRPC messages), doubles the array with an op, and has
//    gpukitd copy the result back into the same shared memory.
// 2. Maps the result's device memory into this process (Array::Map): a CUdeviceptr that
//    CUDA code here may read and write, the same memory gpukitd computes on. A daemon on the
//    CPU backend has no device memory to map and says so; so does a process without a CUDA
//    driver.
// The other way, device memory this process allocated becomes an array of the session with
// Client::ImportDeviceMemory(pointer, shape, dtype) (see docs/api.md, "Import").
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "gpukit/client.h"

namespace {

int Fail(const char* what, const absl::Status& status) {
  std::cerr << "gpukit_zero_copy: " << what << ": " << status << "\n";
  return 1;
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  gpukit::ClientOptions options;
  // options.tenant stays empty: the session acts for the caller's own tenant.
  int64_t mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--addr") == 0) options.address = argv[i + 1];
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::atoll(argv[i + 1]);
  }
  if (mib <= 0) {
    std::cerr << "usage: gpukit_zero_copy [--addr ADDR] [--mib N]\n";
    return 2;
  }
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  const int64_t count = mib * (int64_t{1} << 20) / int64_t{sizeof(float)};

  // 1. Host shared memory.
  auto memory = (*client)->RegisterHostMemory(count * int64_t{sizeof(float)});
  if (!memory.ok()) return Fail("register host memory", memory.status());
  float* values = reinterpret_cast<float*>(memory->data());
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 1000);
  auto array = (*client)->Empty({count}, gpukit::DType::kFloat32);
  if (!array.ok()) return Fail("create", array.status());
  auto start = std::chrono::steady_clock::now();
  if (absl::Status s = array->Write(*memory); !s.ok()) return Fail("write", s);
  const double write_ms = MillisecondsSince(start);
  auto doubled = (*client)->Add(*array, *array);
  if (!doubled.ok()) return Fail("add", doubled.status());
  start = std::chrono::steady_clock::now();
  if (absl::Status s = doubled->Read(*memory); !s.ok()) return Fail("read", s);
  const double read_ms = MillisecondsSince(start);
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] != static_cast<float>(2 * (i % 1000))) {
      std::cerr << "gpukit_zero_copy: element " << i << " is " << values[i] << "\n";
      return 1;
    }
  }
  std::cout << "host shared memory: " << mib << " MiB in " << write_ms << " ms, doubled, "
            << mib << " MiB back in " << read_ms << " ms; checked\n";

  // 2. The result's device memory, mapped here.
  absl::StatusOr<gpukit::DeviceMapping> mapping = doubled->Map();
  if (!mapping.ok()) {
    std::cout << "device mapping: not here (" << mapping.status().message() << ")\n";
    return 0;
  }
  std::cout << "device mapping: CUdeviceptr 0x" << std::hex << mapping->device_pointer << std::dec
            << ", " << mapping->size_bytes << " bytes on CUDA device " << mapping->device_index
            << "\n";
  return 0;
}
