// The daemon's Core over a CUDA device: spill to host memory and restore under memory
// pressure, bit for bit, and several sessions running ops at once from several threads.
// The same behaviour on the CPU backend is tested in tests/unit/core; this checks that it
// holds with real device memory, streams and kernels. Skipped, visibly, without a GPU.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon/core/core.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>

namespace gpukit {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

class CoreCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) GTEST_SKIP() << "no NVRTC: " << jit.status();
    CudaDeviceOptions device_options;
    device_options.jit = std::shared_ptr<JitCompiler>(*std::move(jit));
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(device_options);
    if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
    cuda_ = device->get();
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(*std::move(device));
    // A small spilling partition, so memory pressure comes from its quota, not the GPU.
    CoreOptions options;
    PartitionSpec small;
    small.name = "small";
    small.memory_quota_bytes = 64 * kMiB;
    small.compute_share = 0.5;
    small.spill = true;
    options.partitions = {small};
    absl::StatusOr<std::unique_ptr<Core>> core = Core::Create(clock_, std::move(devices), options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
  }

  absl::StatusOr<std::string> Open(const ResourceSpec& resources, std::string partition) {
    OpenSessionParams params;
    params.tenant = "gpu-test";
    params.partition = std::move(partition);
    params.resources = resources;
    GPUKIT_ASSIGN_OR_RETURN(SessionGrant grant, core_->OpenSession(params));
    return grant.session_id;
  }

  static std::vector<float> Random(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-2, 2);
    std::vector<float> v(n);
    for (float& x : v) x = value(rng);
    return v;
  }

  absl::StatusOr<std::string> Upload(const std::string& session, const std::vector<float>& v) {
    const int64_t n = static_cast<int64_t>(v.size());
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core_->CreateArray(session, {DType::kFloat32, {n}}));
    GPUKIT_RETURN_IF_ERROR(core_->WriteArray(
        session, view.handle, 0,
        absl::Span<const char>(reinterpret_cast<const char*>(v.data()), n * sizeof(float))));
    return view.handle;
  }

  absl::StatusOr<std::vector<float>> Download(const std::string& session, const std::string& handle,
                                              int64_t n) {
    std::vector<float> out(n);
    GPUKIT_RETURN_IF_ERROR(core_->ReadArray(
        session, handle, 0, absl::Span<char>(reinterpret_cast<char*>(out.data()), n * 4)));
    return out;
  }

  SystemClock clock_;
  std::unique_ptr<Core> core_;
  CudaDevice* cuda_ = nullptr;  // the core's device
};

TEST_F(CoreCudaTest, SpilledArrayComesBackBitForBitFromHostMemory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string best_effort, Open({}, "small"));
  const int64_t n = 48 * kMiB / 4;
  const std::vector<float> data = Random(n, 7);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload(best_effort, data));

  ResourceSpec guaranteed;
  guaranteed.memory_limit_bytes = 32 * kMiB;
  guaranteed.compute_limit = 0.25;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string g, Open(guaranteed, "small"));
  // 48 + 32 MiB exceed the 64 MiB quota: the BestEffort array goes to host memory.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView big, core_->CreateArray(g, {DType::kUInt8, {32 * kMiB}}));
  int64_t spilled = 0;
  for (const SessionSummary& s : core_->ListSessions()) {
    if (s.session_id == best_effort) spilled = s.spilled_bytes;
  }
  EXPECT_EQ(spilled, 48 * kMiB);
  GPUKIT_ASSERT_OK(core_->FreeArray(g, big.handle).status());
  // Next use restores it to the GPU, and an op on it sees the original values.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> back, Download(best_effort, a, n));
  EXPECT_TRUE(back == data) << "the array changed on its way through host memory";
  // An op on the restored array (its output must fit beside it in the 64 MiB quota).
  OpInput in;
  in.handle = a;
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView max, core_->RunOp(best_effort, "max", {in}, {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(best_effort, max.handle, 1));
  EXPECT_EQ(got[0], *std::max_element(data.begin(), data.end()));
}

// A client's shared memory, registered with the GPU (cuMemHostRegister) when its descriptor
// arrives: copies both ways go straight to DMA and arrive bit for bit, at offsets too.
TEST_F(CoreCudaTest, HostMemoryRegionsCopyToAndFromTheGpuBitForBit) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, Open({}, "default"));
  const int64_t n = 24 * kMiB / 4;
  const int64_t bytes = n * 4 + 4096;
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostRegionGrant grant, core_->RegisterHostMemory(session, bytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd fd, CreateSharedMemory("gpu-test", bytes));
  void* mapping = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(mapping, MAP_FAILED);
  char* shared = static_cast<char*>(mapping);
  const std::vector<float> data = Random(n, 11);
  std::memcpy(shared + 4096, data.data(), n * 4);
  GPUKIT_ASSERT_OK(core_->DeliverDescriptor(grant.token, std::move(fd)));

  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView array, core_->CreateArray(session, {DType::kFloat32, {n}}));
  GPUKIT_ASSERT_OK(core_->CopyFromHostMemory(session, array.handle, 0, grant.handle, 4096, n * 4));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> back, Download(session, array.handle, n));
  EXPECT_TRUE(back == data) << "upload from the registered region changed the data";
  OpInput in;
  in.handle = array.handle;
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView doubled, core_->RunOp(session, "add", {in, in}, {}));
  std::memset(shared, 0x7F, bytes);
  GPUKIT_ASSERT_OK(core_->CopyToHostMemory(session, doubled.handle, 0, grant.handle, 0, n * 4));
  const float* out = reinterpret_cast<const float*>(shared);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], data[i] + data[i]) << i;
  EXPECT_EQ(static_cast<unsigned char>(shared[n * 4]), 0x7F) << "bytes past the copy untouched";
  GPUKIT_ASSERT_OK(core_->UnregisterHostMemory(session, grant.handle));
  ::munmap(mapping, bytes);
}

TEST_F(CoreCudaTest, SessionsRunOpsAtOnceFromSeveralThreads) {
  constexpr int kSessions = 4;
  constexpr int kRounds = 20;
  constexpr int64_t n = 1 << 20;
  std::vector<absl::Status> results(kSessions);
  std::vector<std::thread> threads;
  for (int t = 0; t < kSessions; ++t) {
    threads.emplace_back([&, t] {
      results[t] = [&]() -> absl::Status {
        GPUKIT_ASSIGN_OR_RETURN(std::string s, Open({}, "default"));
        const std::vector<float> x = Random(n, 100 + t);
        GPUKIT_ASSIGN_OR_RETURN(std::string a, Upload(s, x));
        OpInput in;
        in.handle = a;
        for (int r = 0; r < kRounds; ++r) {
          GPUKIT_ASSIGN_OR_RETURN(ArrayView y, core_->RunOp(s, "mul", {in, in}, {}));
          GPUKIT_ASSIGN_OR_RETURN(std::vector<float> got, Download(s, y.handle, n));
          for (int64_t i = 0; i < n; i += 4099) {
            if (got[i] != x[i] * x[i]) {
              return absl::InternalError(absl::StrCat("session ", t, " round ", r, " element ", i,
                                                      ": ", got[i], " != ", x[i] * x[i]));
            }
          }
          GPUKIT_RETURN_IF_ERROR(core_->FreeArray(s, y.handle).status());
        }
        return core_->CloseSession(s).status();
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : results) GPUKIT_EXPECT_OK(status);
  EXPECT_EQ(core_->scheduler().device_memory_used(0), 0) << "every session returned its memory";
}

// A tenant's results do not depend on its class or on who else is on the GPU: a chain of
// ops with large matmuls (sliced on a BestEffort session's low-priority stream, whole on a
// Guaranteed session's) gives the same bytes in a Guaranteed session alone, in a BestEffort
// session alone and in a BestEffort session while two other sessions flood the GPU with
// large matmuls.
TEST_F(CoreCudaTest, AChainGivesTheSameBitsWhateverItsClassAndNeighbours) {
  // 3.4e10 FLOPs per float32 matmul, about 0.7 ms on an H100: sliced at 100 us.
  constexpr int64_t m = 4096, k = 2048;
  auto upload2d = [&](const std::string& session, const std::vector<float>& v, int64_t rows,
                      int64_t cols) -> absl::StatusOr<std::string> {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view,
                            core_->CreateArray(session, {DType::kFloat32, {rows, cols}}));
    GPUKIT_RETURN_IF_ERROR(core_->WriteArray(
        session, view.handle, 0,
        absl::Span<const char>(reinterpret_cast<const char*>(v.data()), v.size() * 4)));
    return view.handle;
  };
  const std::vector<float> x = Random(m * k, 11), w = Random(k * k, 12);
  // y = x @ w, z = y * y + y, out = z @ w (float32, not TF32): returns out's bytes.
  auto chain = [&](const std::string& session) -> absl::StatusOr<std::vector<float>> {
    GPUKIT_ASSIGN_OR_RETURN(std::string xh, upload2d(session, x, m, k));
    GPUKIT_ASSIGN_OR_RETURN(std::string wh, upload2d(session, w, k, k));
    OpInput xi, wi;
    xi.handle = xh;
    wi.handle = wh;
    GPUKIT_ASSIGN_OR_RETURN(ArrayView y, core_->RunOp(session, "matmul", {xi, wi}, {}));
    OpInput yi;
    yi.handle = y.handle;
    GPUKIT_ASSIGN_OR_RETURN(ArrayView yy, core_->RunOp(session, "mul", {yi, yi}, {}));
    OpInput yyi;
    yyi.handle = yy.handle;
    GPUKIT_ASSIGN_OR_RETURN(ArrayView z, core_->RunOp(session, "add", {yyi, yi}, {}));
    OpInput zi;
    zi.handle = z.handle;
    GPUKIT_ASSIGN_OR_RETURN(ArrayView out, core_->RunOp(session, "matmul", {zi, wi}, {}));
    return Download(session, out.handle, m * k);
  };
  // A BestEffort session alone on the device runs whole: nothing of a higher priority can
  // come to pass between slices.
  const int64_t sliced_before = cuda_->cublaslt_sliced_matmul_count();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string lone, Open({}, "default"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> lone_result, chain(lone));
  GPUKIT_ASSERT_OK(core_->CloseSession(lone).status());
  EXPECT_EQ(cuda_->cublaslt_sliced_matmul_count(), sliced_before) << "BestEffort alone: whole";
  ResourceSpec guaranteed;
  guaranteed.memory_limit_bytes = 1024 * kMiB;
  guaranteed.compute_limit = 0.25;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string g, Open(guaranteed, "default"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> reference, chain(g));
  EXPECT_EQ(cuda_->cublaslt_sliced_matmul_count(), sliced_before) << "Guaranteed runs whole";
  EXPECT_EQ(std::memcmp(lone_result.data(), reference.data(), reference.size() * 4), 0)
      << "BestEffort alone differs from Guaranteed alone";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string be, Open({}, "default"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> alone, chain(be));
  EXPECT_EQ(cuda_->cublaslt_sliced_matmul_count(), sliced_before + 2)
      << "BestEffort's two matmuls run in slices beside a Guaranteed session";
  EXPECT_EQ(std::memcmp(alone.data(), reference.data(), alone.size() * 4), 0)
      << "BestEffort alone differs from Guaranteed alone";

  std::atomic<bool> stop{false};
  std::vector<absl::Status> flood_results(2);
  std::vector<std::thread> flood;
  for (int t = 0; t < 2; ++t) {
    flood.emplace_back([&, t] {
      flood_results[t] = [&]() -> absl::Status {
        GPUKIT_ASSIGN_OR_RETURN(std::string s, Open({}, "default"));
        const std::vector<float> big = Random(4096 * 4096, 20 + t);
        GPUKIT_ASSIGN_OR_RETURN(std::string a, upload2d(s, big, 4096, 4096));
        OpInput in;
        in.handle = a;
        for (int i = 0; !stop.load() && i < 400; ++i) {
          GPUKIT_ASSIGN_OR_RETURN(ArrayView c,
                                  core_->RunOp(s, "matmul", {in, in}, {{"allow_tf32", true}}));
          GPUKIT_RETURN_IF_ERROR(core_->FreeArray(s, c.handle).status());
        }
        return core_->CloseSession(s).status();
      }();
    });
  }
  for (int round = 0; round < 3; ++round) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> flooded, chain(be));
    EXPECT_EQ(std::memcmp(flooded.data(), reference.data(), flooded.size() * 4), 0)
        << "round " << round << ": BestEffort under a flood differs from Guaranteed alone";
  }
  stop = true;
  for (std::thread& t : flood) t.join();
  for (const absl::Status& status : flood_results) GPUKIT_EXPECT_OK(status);
}

}  // namespace
}  // namespace gpukit
