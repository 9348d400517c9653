// Custom kernels on a real GPU through the Core: CompileKernel for the CUDA device's own
// architecture, LaunchKernel on the session's arrays, results read back and checked;
// template entries; the driver's check of the argument list; modules unloaded and the
// device still working after FreeKernel and after the session closes.
//
// Skipped, visibly, where there is no GPU or no NVRTC.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/core.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSource[] = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
template <typename T>
__global__ void scale(T* x, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
)";

KernelArgInput ArrayArg(const std::string& handle) {
  KernelArgInput arg;
  arg.is_array = true;
  arg.handle = handle;
  return arg;
}

template <typename T>
KernelArgInput ScalarArg(T value) {
  KernelArgInput arg;
  std::memcpy(arg.bytes, &value, sizeof(T));
  arg.size_bytes = sizeof(T);
  return arg;
}

LaunchConfig Over(int n, uint32_t block = 256) {
  LaunchConfig config;
  config.grid[0] = (static_cast<uint32_t>(n) + block - 1) / block;
  config.block[0] = block;
  return config;
}

class KernelLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> count = CudaDevice::DeviceCount();
    if (!count.ok()) GTEST_SKIP() << "no CUDA driver: " << count.status();
    if (*count == 0) GTEST_SKIP() << "the CUDA driver shows no GPU";
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) GTEST_SKIP() << "no NVRTC JIT compiler: " << jit.status();
    jit_ = *std::move(jit);
    CudaDeviceOptions device_options;
    device_options.index = 0;
    device_options.jit = jit_;
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaDevice> gpu,
                                CudaDevice::Create(device_options));
    arch_ = gpu->cuda_info().arch;
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(gpu));
    CoreOptions options;
    options.streams_per_partition = 1;
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), options, jit_));
    OpenSessionParams params;
    params.tenant = "gpu-kernels";
    GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant grant, core_->OpenSession(params));
    session_ = grant.session_id;
  }

  void TearDown() override { core_.reset(); }

  template <typename T>
  absl::StatusOr<std::string> Upload(const std::vector<T>& values) {
    GPUKIT_ASSIGN_OR_RETURN(
        ArrayView view,
        core_->CreateArray(session_, {DTypeOf<T>(), {static_cast<int64_t>(values.size())}}));
    GPUKIT_RETURN_IF_ERROR(
        core_->WriteArray(session_, view.handle, 0,
                          absl::MakeConstSpan(reinterpret_cast<const char*>(values.data()),
                                              values.size() * sizeof(T))));
    return view.handle;
  }

  template <typename T>
  absl::StatusOr<std::vector<T>> Download(const std::string& handle) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core_->DescribeArray(session_, handle));
    std::vector<T> values(static_cast<size_t>(view.bytes) / sizeof(T));
    GPUKIT_RETURN_IF_ERROR(core_->ReadArray(
        session_, handle, 0,
        absl::MakeSpan(reinterpret_cast<char*>(values.data()), values.size() * sizeof(T))));
    return values;
  }

  absl::StatusOr<KernelView> Compile(std::vector<std::string> entries) {
    CompileRequest request;
    request.source = kSource;
    request.entries = std::move(entries);
    return core_->CompileKernel(session_, request);
  }

  SystemClock clock_;  // real time: pacing charges real device time
  std::shared_ptr<JitCompiler> jit_;
  std::unique_ptr<Core> core_;
  std::string arch_;
  std::string session_;
};

TEST_F(KernelLaunchTest, SaxpyOnTheSessionsArraysComputesOnTheGpu) {
  constexpr int n = 1000;  // not a multiple of the block: the bounds check matters
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = static_cast<float>(2 * i + 1);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string xs, Upload(x));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string ys, Upload(y));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView saxpy, Compile({"saxpy"}));
  EXPECT_EQ(saxpy.arch, arch_) << "compiled for the GPU itself";
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      absl::Duration device_time,
      core_->LaunchKernel(session_, saxpy.handle, "", Over(n),
                          {ScalarArg(3.0f), ArrayArg(xs), ArrayArg(ys), ScalarArg(n)}));
  EXPECT_GT(device_time, absl::ZeroDuration());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, Download<float>(ys));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], static_cast<float>(5 * i + 1)) << "element " << i;
  }
  EXPECT_THAT(Download<float>(xs), IsOkAndHolds(x)) << "x is read only";
  const std::vector<TaskInfo> tasks = core_->scheduler().ListTasks({});
  ASSERT_GE(tasks.size(), 2u);
  EXPECT_EQ(tasks[2].kind, TaskKind::kKernel) << "newest first: two downloads, the launch";
  EXPECT_EQ(tasks[2].name, "saxpy");
  EXPECT_EQ(tasks[2].state, TaskState::kSucceeded);
  EXPECT_EQ(tasks[2].device_time, device_time);
}

TEST_F(KernelLaunchTest, TemplateEntriesRunWithTheirOwnScalarTypes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string floats, Upload<float>({1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string ints, Upload<int32_t>({1, 2, 3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView scale, Compile({"scale<float>", "scale<int>"}));
  ASSERT_EQ(scale.lowered_names.size(), 2u);
  EXPECT_NE(scale.lowered_names[0], scale.lowered_names[1]);
  GPUKIT_ASSERT_OK(core_
                       ->LaunchKernel(session_, scale.handle, "scale<float>", Over(4),
                                      {ArrayArg(floats), ScalarArg(0.5f), ScalarArg(4)})
                       .status());
  GPUKIT_ASSERT_OK(core_
                       ->LaunchKernel(session_, scale.handle, "scale<int>", Over(3),
                                      {ArrayArg(ints), ScalarArg(int32_t{-2}), ScalarArg(3)})
                       .status());
  EXPECT_THAT(Download<float>(floats), IsOkAndHolds(ElementsAre(0.5f, 1.0f, 1.5f, 2.0f)));
  EXPECT_THAT(Download<int32_t>(ints), IsOkAndHolds(ElementsAre(-2, -4, -6)));
}

TEST_F(KernelLaunchTest, WrongArgumentCountOrSizeIsInvalidArgument) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string xs, Upload<float>({1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string ys, Upload<float>({3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView saxpy, Compile({"saxpy"}));
  EXPECT_THAT(core_->LaunchKernel(session_, saxpy.handle, "saxpy", Over(2),
                                  {ScalarArg(1.0f), ArrayArg(xs), ArrayArg(ys)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes 4 parameters, got 3")));
  // A double where the kernel takes a float.
  EXPECT_THAT(core_->LaunchKernel(session_, saxpy.handle, "saxpy", Over(2),
                                  {ScalarArg(1.0), ArrayArg(xs), ArrayArg(ys), ScalarArg(2)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Beyond the GPU's threads per block: refused before the queue.
  EXPECT_THAT(core_->LaunchKernel(session_, saxpy.handle, "saxpy", Over(2, 2048),
                                  {ScalarArg(1.0f), ArrayArg(xs), ArrayArg(ys), ScalarArg(2)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block.x = 2048")));
  // The device still works, and y was never touched.
  EXPECT_THAT(Download<float>(ys), IsOkAndHolds(ElementsAre(3.0f, 4.0f)));
  GPUKIT_EXPECT_OK(core_
                       ->LaunchKernel(session_, saxpy.handle, "saxpy", Over(2),
                                      {ScalarArg(1.0f), ArrayArg(xs), ArrayArg(ys), ScalarArg(2)})
                       .status());
  EXPECT_THAT(Download<float>(ys), IsOkAndHolds(ElementsAre(4.0f, 6.0f)));
}

TEST_F(KernelLaunchTest, FreedAndClosedKernelsUnloadAndTheDeviceGoesOn) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string xs, Upload<float>({1}));
  for (int round = 0; round < 3; ++round) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView scale, Compile({"scale<float>"}));
    GPUKIT_ASSERT_OK(core_
                         ->LaunchKernel(session_, scale.handle, "", Over(1),
                                        {ArrayArg(xs), ScalarArg(2.0f), ScalarArg(1)})
                         .status());
    GPUKIT_ASSERT_OK(core_->FreeKernel(session_, scale.handle));
  }
  EXPECT_THAT(Download<float>(xs), IsOkAndHolds(ElementsAre(8.0f)));
  // A session that ends with a launched kernel: its module goes with it.
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView scale, Compile({"scale<float>"}));
  GPUKIT_ASSERT_OK(core_
                       ->LaunchKernel(session_, scale.handle, "", Over(1),
                                      {ArrayArg(xs), ScalarArg(2.0f), ScalarArg(1)})
                       .status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(CloseStats closed, core_->CloseSession(session_));
  EXPECT_EQ(closed.kernels_freed, 1);
  OpenSessionParams params;
  params.tenant = "gpu-kernels";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant next, core_->OpenSession(params));
  session_ = next.session_id;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string ys, Upload<float>({5}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView again, Compile({"scale<float>"}));
  EXPECT_EQ(again.origin, KernelOrigin::kMemory);
  GPUKIT_ASSERT_OK(core_
                       ->LaunchKernel(session_, again.handle, "", Over(1),
                                      {ArrayArg(ys), ScalarArg(3.0f), ScalarArg(1)})
                       .status());
  EXPECT_THAT(Download<float>(ys), IsOkAndHolds(ElementsAre(15.0f)));
}

}  // namespace
}  // namespace gpukit
