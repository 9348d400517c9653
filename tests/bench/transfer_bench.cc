// Bulk transfers between a client and gpukitd: bytes inside gRPC messages (Array::Write and
// Read, 4 MiB chunks) against host shared memory (HostMemory: the daemon copies between the
// client's memfd and the array; on a GPU the memory is pinned and the copy is a DMA), in the
// same run against the same daemon.
//
//   gpukit_transfer_bench --gpukitd build/daemon/gpukitd [--mib 256] [--reps 5] [--backend cpu]
//
// Rows: upload and download through gRPC; through host memory with the client's memcpy into
// (or out of) the shared memory counted, as for data that lives elsewhere; and the copy alone,
// for data produced in the shared memory in the first place. Median wall time of `reps`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpukit/client.h"
#include "tests/integration/daemon_process.h"
#include "tests/testing/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

double MedianSeconds(int reps, const std::function<bool()>& run) {
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto start = Clock::now();
    if (!run()) return -1;
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    if (i > 0) times.push_back(t);  // the first run warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int Die(const std::string& what) {
  std::fprintf(stderr, "gpukit_transfer_bench: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string gpukitd;
  std::string backend = "cpu";
  int64_t mib = 256;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gpukitd") gpukitd = argv[i + 1];
    if (flag == "--mib") mib = std::atoll(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--backend") backend = argv[i + 1];
  }
  if (mib <= 0 || reps <= 0) {
    std::fprintf(stderr, "usage: %s [--gpukitd PATH] [--mib N] [--reps N] [--backend cpu|cuda]\n",
                 argv[0]);
    return 2;
  }
  gpukit::testing::ScopedTempDir dir;
  gpukit::testing::DaemonOptions daemon_options;
  daemon_options.dir = dir.path();
  daemon_options.backend = backend;
  daemon_options.daemon_path = gpukitd;
  daemon_options.config_json = R"({"limits": {"maxArraySize": "4GiB"}})";
  daemon_options.ready_timeout = absl::Seconds(60);
  auto daemon = gpukit::testing::DaemonProcess::Start(daemon_options);
  if (!daemon.ok()) return Die(std::string(daemon.status().message()));

  gpukit::ClientOptions options;
  options.address = (*daemon)->address();
  options.tenant = "bench";
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Die(std::string(client.status().message()));
  const int64_t bytes = mib << 20;
  const int64_t count = bytes / 4;
  auto array = (*client)->Empty({count}, gpukit::DType::kFloat32);
  if (!array.ok()) return Die(std::string(array.status().message()));
  auto memory = (*client)->RegisterHostMemory(bytes);
  if (!memory.ok()) return Die(std::string(memory.status().message()));
  std::vector<char> data(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 131 + 7);

  const double grpc_up = MedianSeconds(reps, [&] { return array->Write(data.data(), bytes).ok(); });
  const double grpc_down =
      MedianSeconds(reps, [&] { return array->Read(data.data(), bytes).ok(); });
  const double shm_up = MedianSeconds(reps, [&] {
    std::memcpy(memory->data(), data.data(), bytes);
    return array->Write(*memory).ok();
  });
  const double shm_down = MedianSeconds(reps, [&] {
    if (!array->Read(*memory).ok()) return false;
    std::memcpy(data.data(), memory->data(), bytes);
    return true;
  });
  const double shm_up_only = MedianSeconds(reps, [&] { return array->Write(*memory).ok(); });
  const double shm_down_only = MedianSeconds(reps, [&] { return array->Read(*memory).ok(); });
  // The last download must hold what was uploaded: nothing above measured a broken copy.
  for (int64_t i = 0; i < bytes; i += 4093) {
    if (memory->data()[i] != static_cast<char>(i * 131 + 7)) return Die("data mismatch");
  }

  std::printf("backend %s, %lld MiB, median of %d\n", backend.c_str(), static_cast<long long>(mib),
              reps);
  auto row = [&](const char* name, double t, double reference) {
    std::printf("%-52s %9.2f ms %7.2f GB/s  %6.1fx\n", name, t * 1e3, bytes / t / 1e9,
                reference / t);
  };
  row("upload, bytes in gRPC messages (reference)", grpc_up, grpc_up);
  row("upload, memcpy into host memory + copy", shm_up, grpc_up);
  row("upload from host memory (data already there)", shm_up_only, grpc_up);
  row("download, bytes in gRPC messages (reference)", grpc_down, grpc_down);
  row("download, copy + memcpy out of host memory", shm_down, grpc_down);
  row("download into host memory (data used there)", shm_down_only, grpc_down);
  return 0;
}
