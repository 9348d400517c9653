// Bulk transfers between a client and gpukitd: bytes inside gRPC messages (Array::Write and
// Read of a client with ClientOptions::use_shared_memory off: 4 MiB chunks) against the same
// calls of a default client (which go through its staging region, host shared memory) and
// against explicit HostMemory (the daemon copies between the client's memfd and the array;
// on a GPU the memory is pinned and the copy is a DMA), in the same run against the same
// daemon.
//
//   gpukit_transfer_bench --gpukitd build/daemon/gpukitd [--mib 256] [--reps 5] [--backend cpu]
//   gpukit_transfer_bench --gpukitd build/daemon/gpukitd --sweep 1 [--reps 30]
//
// Rows: upload and download through gRPC; through the default client's staging region; through
// host memory with the client's memcpy into (or out of) the shared memory counted, as for data
// that lives elsewhere; and the copy alone, for data produced in the shared memory in the
// first place. Median wall time of `reps`.
//
// --sweep 1 times transfers of 4 KiB to 16 MiB instead, in gRPC messages and through host
// memory with the client's memcpy (what the staging region does, whatever its threshold): where
// they cross is where ClientOptions' staging threshold belongs.
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
#include "runtime/base/mutex_mode.h"
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

char Pattern(int64_t i) { return static_cast<char>(i * 131 + 7); }

// Times one size's transfers in gRPC messages (`grpc`'s array) and through host memory with
// the client's memcpy (`shm`'s array and `memory`); prints one row.
bool SweepRow(int64_t bytes, int reps, gpukit::Client& grpc, gpukit::Client& shm,
              gpukit::HostMemory& memory, std::vector<char>& data) {
  auto grpc_array = grpc.Empty({bytes}, gpukit::DType::kUInt8);
  auto shm_array = shm.Empty({bytes}, gpukit::DType::kUInt8);
  if (!grpc_array.ok() || !shm_array.ok()) return false;
  const double grpc_up =
      MedianSeconds(reps, [&] { return grpc_array->Write(data.data(), bytes).ok(); });
  const double grpc_down =
      MedianSeconds(reps, [&] { return grpc_array->Read(data.data(), bytes).ok(); });
  const double shm_up = MedianSeconds(reps, [&] {
    std::memcpy(memory.data(), data.data(), bytes);
    return shm_array->Write(memory).ok();
  });
  const double shm_down = MedianSeconds(reps, [&] {
    if (!shm_array->Read(memory).ok()) return false;
    std::memcpy(data.data(), memory.data(), bytes);
    return true;
  });
  std::printf("%8lld KiB  up %8.1f us %8.1f us %5.2fx   down %8.1f us %8.1f us %5.2fx\n",
              static_cast<long long>(bytes >> 10), grpc_up * 1e6, shm_up * 1e6, grpc_up / shm_up,
              grpc_down * 1e6, shm_down * 1e6, grpc_down / shm_down);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  std::string gpukitd;
  std::string backend = "cpu";
  int64_t mib = 256;
  int reps = 5;
  bool sweep = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gpukitd") gpukitd = argv[i + 1];
    if (flag == "--mib") mib = std::atoll(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--backend") backend = argv[i + 1];
    if (flag == "--sweep") sweep = std::atoi(argv[i + 1]) != 0;
  }
  if (mib <= 0 || reps <= 0) {
    std::fprintf(stderr,
                 "usage: %s [--gpukitd PATH] [--mib N] [--reps N] [--backend cpu|cuda] "
                 "[--sweep 0|1]\n",
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
  options.use_shared_memory = false;
  auto grpc_client = gpukit::Client::Connect(options);
  if (!grpc_client.ok()) return Die(std::string(grpc_client.status().message()));

  if (sweep) {
    const int64_t largest = int64_t{16} << 20;
    auto memory = (*client)->RegisterHostMemory(largest);
    if (!memory.ok()) return Die(std::string(memory.status().message()));
    std::vector<char> data(static_cast<size_t>(largest));
    for (int64_t i = 0; i < largest; ++i) data[i] = Pattern(i);
    std::printf(
        "backend %s, median of %d; each direction: gRPC messages, host memory + memcpy, "
        "ratio\n",
        backend.c_str(), reps);
    for (int64_t bytes = int64_t{4} << 10; bytes <= largest; bytes *= 2) {
      if (!SweepRow(bytes, reps, **grpc_client, **client, *memory, data)) {
        return Die("a transfer failed");
      }
    }
    return 0;
  }

  const int64_t bytes = mib << 20;
  const int64_t count = bytes / 4;
  auto array = (*client)->Empty({count}, gpukit::DType::kFloat32);
  if (!array.ok()) return Die(std::string(array.status().message()));
  auto grpc_array = (*grpc_client)->Empty({count}, gpukit::DType::kFloat32);
  if (!grpc_array.ok()) return Die(std::string(grpc_array.status().message()));
  auto memory = (*client)->RegisterHostMemory(bytes);
  if (!memory.ok()) return Die(std::string(memory.status().message()));
  std::vector<char> data(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) data[i] = Pattern(i);
  std::vector<char> out(static_cast<size_t>(bytes));

  const double grpc_up =
      MedianSeconds(reps, [&] { return grpc_array->Write(data.data(), bytes).ok(); });
  const double grpc_down =
      MedianSeconds(reps, [&] { return grpc_array->Read(out.data(), bytes).ok(); });
  const double staged_up =
      MedianSeconds(reps, [&] { return array->Write(data.data(), bytes).ok(); });
  const double staged_down =
      MedianSeconds(reps, [&] { return array->Read(out.data(), bytes).ok(); });
  // Both paths must have moved the right bytes: nothing above measured a broken copy.
  for (int64_t i = 0; i < bytes; i += 4093) {
    if (out[i] != Pattern(i)) return Die("data mismatch after the staged download");
  }
  const double shm_up = MedianSeconds(reps, [&] {
    std::memcpy(memory->data(), data.data(), bytes);
    return array->Write(*memory).ok();
  });
  const double shm_down = MedianSeconds(reps, [&] {
    if (!array->Read(*memory).ok()) return false;
    std::memcpy(out.data(), memory->data(), bytes);
    return true;
  });
  const double shm_up_only = MedianSeconds(reps, [&] { return array->Write(*memory).ok(); });
  const double shm_down_only = MedianSeconds(reps, [&] { return array->Read(*memory).ok(); });
  for (int64_t i = 0; i < bytes; i += 4093) {
    if (memory->data()[i] != Pattern(i)) return Die("data mismatch");
  }
  std::fill(out.begin(), out.end(), 0);
  if (!grpc_array->Read(out.data(), bytes).ok()) return Die("gRPC download failed");
  for (int64_t i = 0; i < bytes; i += 4093) {
    if (out[i] != Pattern(i)) return Die("data mismatch after the gRPC download");
  }

  std::printf("backend %s, %lld MiB, median of %d\n", backend.c_str(), static_cast<long long>(mib),
              reps);
  auto row = [&](const char* name, double t, double reference) {
    std::printf("%-52s %9.2f ms %7.2f GB/s  %6.1fx\n", name, t * 1e3, bytes / t / 1e9,
                reference / t);
  };
  row("upload, bytes in gRPC messages (reference)", grpc_up, grpc_up);
  row("upload, Array::Write via the staging region", staged_up, grpc_up);
  row("upload, memcpy into host memory + copy", shm_up, grpc_up);
  row("upload from host memory (data already there)", shm_up_only, grpc_up);
  row("download, bytes in gRPC messages (reference)", grpc_down, grpc_down);
  row("download, Array::Read via the staging region", staged_down, grpc_down);
  row("download, copy + memcpy out of host memory", shm_down, grpc_down);
  row("download into host memory (data used there)", shm_down_only, grpc_down);
  return 0;
}
