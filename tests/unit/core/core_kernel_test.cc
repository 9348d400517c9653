// Custom kernels through the Core (CompileKernel, LaunchKernel, FreeKernel) with the real
// NVRTC JIT compiler, which needs no GPU: compiling on the CPU backend, the cache, compile
// errors, ownership and limits, and every refusal a launch meets before it is queued.
//
// The launch path itself (arrays pinned and passed as buffers, scalars by value, the module
// loaded once per kernel and each function looked up once, modules unloaded when a kernel
// is freed or its session ends, the task of kind kernel) runs against a "GPU double": a
// ForwardingDevice over the CPU device that reports the CUDA backend and answers the
// device-code calls itself, recording them.
//
// Skipped, saying why, where NVRTC cannot be loaded.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/core.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr int64_t kDeviceBytes = int64_t{1} << 20;
constexpr int64_t kQuarter = kDeviceBytes / 4;
constexpr absl::StatusCode kInvalidArgument = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
constexpr absl::StatusCode kFailedPrecondition = absl::StatusCode::kFailedPrecondition;
constexpr absl::StatusCode kResourceExhausted = absl::StatusCode::kResourceExhausted;

constexpr char kSource[] = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void fill(float* y, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = value;
}
)";

CompileRequest SaxpyAndFill() { return {.source = kSource, .entries = {"saxpy", "fill"}}; }

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

LaunchConfig Blocks(uint32_t grid, uint32_t block) {
  LaunchConfig config;
  config.grid[0] = grid;
  config.block[0] = block;
  return config;
}

// A Guaranteed session's resources: `bytes` of memory, a quarter of the compute.
ResourceSpec Guaranteed(int64_t bytes) {
  ResourceSpec spec;
  spec.memory_limit_bytes = bytes;
  spec.compute_limit = 0.25;
  return spec;
}

class CoreKernelTest : public ::testing::Test {
 protected:
  // One partition, "shared", over the whole device, which spills (for the restore test).
  CoreKernelTest() {
    options_.limits.max_array_bytes = kDeviceBytes;
    options_.streams_per_partition = 1;
    PartitionSpec shared;
    shared.name = "shared";
    shared.memory_quota_bytes = kDeviceBytes;
    shared.compute_share = 1.0;
    shared.spill = true;
    options_.partitions = {shared};
  }

  // The core first: its shutdown unloads modules through hooks that record into the
  // fixture's members.
  ~CoreKernelTest() override { core_.reset(); }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) GTEST_SKIP() << "no NVRTC JIT compiler on this host: " << jit.status();
    jit_ = *std::move(jit);
  }

  // Made on first use, so tests may change options_ first. With `gpu_double`, the CPU
  // device reports the CUDA backend and the hooks below answer its device-code calls.
  Core& core(bool gpu_double = false) {
    if (core_ == nullptr) {
      CpuDeviceOptions device_options;
      device_options.memory_bytes = kDeviceBytes;
      std::unique_ptr<Device> device = *CpuDevice::Create(device_options);
      if (gpu_double) device = MakeGpuDouble(std::move(device));
      std::vector<std::unique_ptr<Device>> devices;
      devices.push_back(std::move(device));
      absl::StatusOr<std::unique_ptr<Core>> core =
          Core::Create(clock_, std::move(devices), options_, jit_);
      EXPECT_THAT(core, IsOk());
      core_ = *std::move(core);
    }
    return *core_;
  }

  std::unique_ptr<Device> MakeGpuDouble(std::unique_ptr<Device> cpu) {
    auto gpu = std::make_unique<ForwardingDevice>(std::move(cpu));
    gpu->set_backend(BackendKind::kCuda);
    gpu->load_module = [this](absl::string_view image) -> absl::StatusOr<ModuleId> {
      if (!fail_next_load_.ok()) return std::exchange(fail_next_load_, absl::OkStatus());
      loaded_images_.emplace_back(image);
      return ModuleId{next_module_++};
    };
    gpu->unload_module = [this](ModuleId module) {
      unloaded_.push_back(module.value);
      return absl::OkStatus();
    };
    gpu->get_function = [this](ModuleId module,
                               absl::string_view name) -> absl::StatusOr<FunctionId> {
      looked_up_.emplace_back(name);
      return FunctionId{module.value * 1000 + looked_up_.size()};
    };
    gpu->launch = [this](FunctionId function, const LaunchConfig& config,
                         absl::Span<const KernelArg> args, StreamId stream) {
      launches_.push_back({function, config, std::vector<KernelArg>(args.begin(), args.end())});
      return on_launch_ ? on_launch_(args, stream) : absl::OkStatus();
    };
    gpu_ = gpu.get();
    return gpu;
  }

  absl::StatusOr<std::string> Open(const ResourceSpec& resources = {}) {
    OpenSessionParams params;
    params.tenant = "tenant";
    params.partition = "shared";
    params.resources = resources;
    GPUKIT_ASSIGN_OR_RETURN(SessionGrant grant, core().OpenSession(params));
    return grant.session_id;
  }

  absl::StatusOr<std::string> Upload(const std::string& session, const std::vector<float>& values) {
    GPUKIT_ASSIGN_OR_RETURN(
        ArrayView view,
        core().CreateArray(session, {DType::kFloat32, {static_cast<int64_t>(values.size())}}));
    GPUKIT_RETURN_IF_ERROR(
        core().WriteArray(session, view.handle, 0,
                          absl::MakeConstSpan(reinterpret_cast<const char*>(values.data()),
                                              values.size() * sizeof(float))));
    return view.handle;
  }

  absl::StatusOr<std::vector<float>> Download(const std::string& session,
                                              const std::string& handle) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core().DescribeArray(session, handle));
    std::vector<float> values(static_cast<size_t>(view.bytes) / sizeof(float));
    GPUKIT_RETURN_IF_ERROR(core().ReadArray(
        session, handle, 0,
        absl::MakeSpan(reinterpret_cast<char*>(values.data()), values.size() * sizeof(float))));
    return values;
  }

  size_t TaskCount() { return core().scheduler().ListTasks({}).size(); }
  int64_t DeviceMemoryUsed() { return core().ListDevices()[0].memory_used_bytes; }
  SessionSummary Summary(const std::string& session) {
    for (const SessionSummary& s : core().ListSessions()) {
      if (s.session_id == session) return s;
    }
    ADD_FAILURE() << "no session " << session;
    return {};
  }

  struct RecordedLaunch {
    FunctionId function;
    LaunchConfig config;
    std::vector<KernelArg> args;
  };

  FakeClock clock_;
  CoreOptions options_;
  std::shared_ptr<JitCompiler> jit_;
  std::unique_ptr<Core> core_;
  // The GPU double and what it saw.
  ForwardingDevice* gpu_ = nullptr;
  uint64_t next_module_ = 1;
  absl::Status fail_next_load_;
  std::vector<std::string> loaded_images_;
  std::vector<uint64_t> unloaded_;
  std::vector<std::string> looked_up_;
  std::vector<RecordedLaunch> launches_;
  // Runs inside the double's Launch, on the launching thread.
  std::function<absl::Status(absl::Span<const KernelArg>, StreamId)> on_launch_;
};

// ---- Compiling ----

TEST_F(CoreKernelTest, CompileOnTheCpuBackendReturnsAHandleItsEntriesAndTheCpuArch) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView kernel, core().CompileKernel(s, SaxpyAndFill()));
  EXPECT_THAT(kernel.handle, StartsWith("k-"));
  EXPECT_THAT(kernel.handle, SizeIs(2 + 32));
  EXPECT_THAT(kernel.entries, ElementsAre("saxpy", "fill"));
  // extern "C" kernels keep their names in the module.
  EXPECT_THAT(kernel.lowered_names, ElementsAre("saxpy", "fill"));
  EXPECT_EQ(kernel.arch, "sm_90");
  EXPECT_EQ(kernel.origin, KernelOrigin::kCompiled);
  EXPECT_GT(kernel.compile_time, absl::ZeroDuration());
  EXPECT_EQ(TaskCount(), 0u) << "compiling is no task: it uses no device";
}

TEST_F(CoreKernelTest, CompilesForTheConfiguredCpuArch) {
  options_.cpu_kernel_arch = "sm_80";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  EXPECT_THAT(core().CompileKernel(s, SaxpyAndFill()),
              IsOkAndHolds(::testing::Field(&KernelView::arch, "sm_80")));
}

TEST_F(CoreKernelTest, TemplateEntryGetsItsMangledName) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  CompileRequest request;
  request.source = "template <typename T> __global__ void scale(T* x, T s) { x[0] *= s; }";
  request.entries = {"scale<float>"};
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView kernel, core().CompileKernel(s, request));
  EXPECT_THAT(kernel.entries, ElementsAre("scale<float>"));
  ASSERT_THAT(kernel.lowered_names, SizeIs(1));
  EXPECT_THAT(kernel.lowered_names[0], StartsWith("_Z"));
}

TEST_F(CoreKernelTest, SecondCompileOfTheSameSourceIsAMemoryCacheHitWithItsOwnHandle) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView first, core().CompileKernel(s, SaxpyAndFill()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView second, core().CompileKernel(s, SaxpyAndFill()));
  EXPECT_EQ(second.origin, KernelOrigin::kMemory);
  EXPECT_EQ(second.compile_time, absl::ZeroDuration());
  EXPECT_NE(second.handle, first.handle);
  EXPECT_EQ(second.lowered_names, first.lowered_names);
  EXPECT_EQ(jit_->cache_stats().memory_hits, 1);
  EXPECT_EQ(jit_->cache_stats().compiles, 1);
}

TEST_F(CoreKernelTest, CompileErrorIsInvalidArgumentWithNvrtcsLog) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  CompileRequest request;
  request.source = R"(extern "C" __global__ void broken(float* y) { y[0] = undeclared_thing; })";
  request.entries = {"broken"};
  EXPECT_THAT(core().CompileKernel(s, request),
              StatusIs(kInvalidArgument, AllOf(HasSubstr("kernel compilation failed for sm_90"),
                                               HasSubstr("undeclared_thing"))));
  EXPECT_EQ(jit_->cache_stats().compiles, 0);
}

TEST_F(CoreKernelTest, ForbiddenOptionIsInvalidArgumentAndCompilesNothing) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  CompileRequest request = SaxpyAndFill();
  request.options = {"-I/tmp"};
  EXPECT_THAT(core().CompileKernel(s, request), StatusIs(kInvalidArgument, HasSubstr("-I/tmp")));
  EXPECT_EQ(jit_->cache_stats().compiles, 0);
}

TEST_F(CoreKernelTest, CompileForAnUnknownSessionIsNotFound) {
  EXPECT_THAT(core().CompileKernel("s-nope", SaxpyAndFill()),
              StatusIs(kNotFound, HasSubstr("session")));
}

TEST(CoreKernelWithoutJitTest, CompileIsFailedPreconditionNamingNvrtc) {
  FakeClock clock;
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(*CpuDevice::Create({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Core> core,
                              Core::Create(clock, std::move(devices), CoreOptions{}));
  EXPECT_FALSE(core->has_jit());
  OpenSessionParams params;
  params.tenant = "tenant";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, core->OpenSession(params));
  EXPECT_THAT(core->CompileKernel(s.session_id, SaxpyAndFill()),
              StatusIs(kFailedPrecondition, HasSubstr("NVRTC JIT compiler not available: ")));
  // Launching and freeing a kernel the session cannot have are NOT_FOUND as usual.
  EXPECT_THAT(core->LaunchKernel(s.session_id, "k-nope", "", Blocks(1, 1), {}),
              StatusIs(kNotFound));
  EXPECT_THAT(core->FreeKernel(s.session_id, "k-nope"), StatusIs(kNotFound));
}

// ---- Ownership and limits ----

TEST_F(CoreKernelTest, AnotherSessionsKernelIsNotFoundLikeAnUnknownOne) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string owner, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string other, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView kernel, core().CompileKernel(owner, SaxpyAndFill()));
  const std::string message =
      absl::StrCat("kernel handle \"", kernel.handle, "\" not found in this session");
  EXPECT_THAT(core().LaunchKernel(other, kernel.handle, "fill", Blocks(1, 1), {}),
              StatusIs(kNotFound, message));
  EXPECT_THAT(core().FreeKernel(other, kernel.handle), StatusIs(kNotFound, message));
  EXPECT_THAT(core().LaunchKernel(other, "k-unknown", "fill", Blocks(1, 1), {}),
              StatusIs(kNotFound, "kernel handle \"k-unknown\" not found in this session"));
  // The owner still has it.
  GPUKIT_EXPECT_OK(core().FreeKernel(owner, kernel.handle));
}

TEST_F(CoreKernelTest, SessionKernelLimitIsResourceExhaustedUntilOneIsFreed) {
  options_.max_kernels_per_session = 2;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView first, core().CompileKernel(s, SaxpyAndFill()));
  GPUKIT_ASSERT_OK(core().CompileKernel(s, SaxpyAndFill()).status());
  EXPECT_THAT(core().CompileKernel(s, SaxpyAndFill()),
              StatusIs(kResourceExhausted, HasSubstr("session holds 2 kernels, its limit")));
  // The limit is per session.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string other, Open());
  GPUKIT_EXPECT_OK(core().CompileKernel(other, SaxpyAndFill()).status());
  GPUKIT_ASSERT_OK(core().FreeKernel(s, first.handle));
  GPUKIT_EXPECT_OK(core().CompileKernel(s, SaxpyAndFill()).status());
}

TEST_F(CoreKernelTest, FreedKernelIsNotFoundForLaunchAndForAnotherFree) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView kernel, core().CompileKernel(s, SaxpyAndFill()));
  GPUKIT_ASSERT_OK(core().FreeKernel(s, kernel.handle));
  EXPECT_THAT(core().LaunchKernel(s, kernel.handle, "fill", Blocks(1, 1), {}),
              StatusIs(kNotFound, HasSubstr("not found in this session")));
  EXPECT_THAT(core().FreeKernel(s, kernel.handle), StatusIs(kNotFound));
}

TEST_F(CoreKernelTest, KernelCallsRenewTheLease) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const absl::Duration lease = options_.sessions.default_lease;
  clock_.Advance(lease * 2 / 3);
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView kernel, core().CompileKernel(s, SaxpyAndFill()));
  clock_.Advance(lease * 2 / 3);
  EXPECT_THAT(core().LaunchKernel(s, kernel.handle, "fill", Blocks(1, 1), {}),
              StatusIs(kFailedPrecondition));  // refused on the CPU backend, but renewed
  clock_.Advance(lease * 2 / 3);
  GPUKIT_EXPECT_OK(core().FreeKernel(s, kernel.handle));
}

// ---- Launch refusals before the queue ----

TEST_F(CoreKernelTest, LaunchOnTheCpuBackendIsFailedPreconditionAndQueuesNoTask) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView kernel, core().CompileKernel(s, SaxpyAndFill()));
  const size_t tasks = TaskCount();
  EXPECT_THAT(core().LaunchKernel(s, kernel.handle, "fill", Blocks(1, 4),
                                  {ArrayArg(y), ScalarArg(7.0f), ScalarArg(int32_t{4})}),
              StatusIs(kFailedPrecondition,
                       AllOf(HasSubstr("kernel launch requires a GPU; the kernel compiled"),
                             HasSubstr("sm_90"), HasSubstr("cpu backend"))));
  EXPECT_EQ(TaskCount(), tasks);
  EXPECT_THAT(Download(s, y), IsOkAndHolds(ElementsAre(1, 2, 3, 4)));
}

TEST_F(CoreKernelTest, EmptyEntryNamesTheOnlyEntryAndUnknownEntriesAreNotFound) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView both, core().CompileKernel(s, SaxpyAndFill()));
  EXPECT_THAT(core().LaunchKernel(s, both.handle, "", Blocks(1, 1), {}),
              StatusIs(kInvalidArgument, HasSubstr("has 2 entries: saxpy, fill")));
  EXPECT_THAT(core().LaunchKernel(s, both.handle, "scale", Blocks(1, 1), {}),
              StatusIs(kNotFound, HasSubstr("has no entry \"scale\"; its entries: saxpy, fill")));
  CompileRequest one = SaxpyAndFill();
  one.entries = {"fill"};
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView fill, core().CompileKernel(s, one));
  // "" resolves to "fill", so the launch gets as far as the backend.
  EXPECT_THAT(core().LaunchKernel(s, fill.handle, "", Blocks(1, 1), {}),
              StatusIs(kFailedPrecondition));
}

TEST_F(CoreKernelTest, MalformedLaunchesAreRefusedBeforeTheBackendOrTheQueue) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  const size_t tasks = TaskCount();
  const std::vector<KernelArgInput> args = {ArrayArg(y), ScalarArg(1.0f), ScalarArg(4)};
  LaunchConfig zero_grid = Blocks(0, 1);
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", zero_grid, args),
              StatusIs(kInvalidArgument, "grid.x = 0 must be >= 1"));
  LaunchConfig tall = Blocks(1, 1);
  tall.grid[1] = 65536;
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", tall, args),
              StatusIs(kInvalidArgument, "grid.y = 65536 is above the device's limit of 65535"));
  LaunchConfig deep = Blocks(1, 1);
  deep.block[2] = 65;
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", deep, args),
              StatusIs(kInvalidArgument, HasSubstr("block.z = 65 is above")));
  LaunchConfig fat = Blocks(1, 32);
  fat.block[1] = 64;
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", fat, args),
              StatusIs(kInvalidArgument, HasSubstr("block of 32 x 64 x 1 = 2048 threads")));
  KernelArgInput empty_scalar;
  EXPECT_THAT(
      core().LaunchKernel(s, k.handle, "fill", Blocks(1, 4),
                          {ArrayArg(y), empty_scalar, ScalarArg(4)}),
      StatusIs(kInvalidArgument, "args[1] is a scalar of 0 bytes; a scalar has 1 to 8 bytes"));
  KernelArgInput wide_scalar = ScalarArg(int64_t{1});
  wide_scalar.size_bytes = 9;
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 4),
                                  {ArrayArg(y), wide_scalar, ScalarArg(4)}),
              StatusIs(kInvalidArgument, HasSubstr("args[1] is a scalar of 9 bytes")));
  EXPECT_THAT(
      core().LaunchKernel(s, k.handle, "fill", Blocks(1, 4),
                          std::vector<KernelArgInput>(Core::kMaxKernelArgs + 1, ScalarArg(1))),
      StatusIs(kInvalidArgument, HasSubstr("a launch takes at most 1024")));
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 4),
                                  {ArrayArg("a-nope"), ScalarArg(1.0f), ScalarArg(4)}),
              StatusIs(kNotFound, "args[0]: array handle \"a-nope\" not found in this session"));
  EXPECT_EQ(TaskCount(), tasks);
}

TEST_F(CoreKernelTest, AnotherSessionsArrayIsNotFoundAsAnArgument) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string other, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string foreign, Upload(other, {1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 2),
                                  {ArrayArg(foreign), ScalarArg(1.0f), ScalarArg(2)}),
              StatusIs(kNotFound, HasSubstr("args[0]: array handle")));
}

// ---- The launch path, on the GPU double ----

TEST_F(CoreKernelTest, LaunchPassesArraysAsTheirBuffersAndScalarsByValueAsAKernelTask) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x, Upload(s, {1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {10, 20, 30, 40}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  EXPECT_EQ(k.arch, "sm_90") << "a device that is no CudaDevice compiles for cpu_kernel_arch";
  // The "kernel" computes y = 2 x + y on the host and writes it into the buffer it was given
  // for y, on the launch's stream: the result shows that buffer is y's.
  const std::vector<float> result = {12, 24, 36, 48};
  on_launch_ = [&](absl::Span<const KernelArg> args, StreamId stream) {
    return gpu_->inner().CopyHostToDevice(args[2].buffer, 0, result.data(), 16, stream);
  };
  LaunchConfig config = Blocks(2, 2);
  config.shared_memory_bytes = 128;
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      absl::Duration device_time,
      core().LaunchKernel(s, k.handle, "saxpy", config,
                          {ScalarArg(2.0f), ArrayArg(x), ArrayArg(y), ScalarArg(int32_t{4})}));
  EXPECT_GE(device_time, absl::ZeroDuration());
  EXPECT_THAT(Download(s, y), IsOkAndHolds(ElementsAre(12, 24, 36, 48)));

  ASSERT_THAT(launches_, SizeIs(1));
  const RecordedLaunch& launch = launches_[0];
  EXPECT_THAT(looked_up_, ElementsAre("saxpy"));
  EXPECT_EQ(launch.config.grid[0], 2u);
  EXPECT_EQ(launch.config.block[0], 2u);
  EXPECT_EQ(launch.config.grid[2], 1u);
  EXPECT_EQ(launch.config.shared_memory_bytes, 128u);
  ASSERT_THAT(launch.args, SizeIs(4));
  EXPECT_EQ(launch.args[0].kind, KernelArg::Kind::kScalar);
  EXPECT_EQ(launch.args[0].size_bytes, 4u);
  float a = 0;
  std::memcpy(&a, launch.args[0].bytes, 4);
  EXPECT_EQ(a, 2.0f);
  EXPECT_EQ(launch.args[1].kind, KernelArg::Kind::kBuffer);
  EXPECT_EQ(launch.args[2].kind, KernelArg::Kind::kBuffer);
  EXPECT_NE(launch.args[1].buffer.value, launch.args[2].buffer.value);
  EXPECT_EQ(launch.args[3].kind, KernelArg::Kind::kScalar);
  EXPECT_EQ(launch.args[3].size_bytes, 4u);
  EXPECT_EQ(launch.args[3].bytes[0], 4);

  const std::vector<TaskInfo> tasks = core().scheduler().ListTasks({});
  ASSERT_FALSE(tasks.empty());
  EXPECT_EQ(tasks[1].kind, TaskKind::kKernel) << "newest first: the download, then the launch";
  EXPECT_EQ(tasks[1].name, "saxpy");
  EXPECT_EQ(tasks[1].state, TaskState::kSucceeded);
  EXPECT_EQ(tasks[1].device_time, device_time);
}

TEST_F(CoreKernelTest, ModuleLoadsOnFirstLaunchOnceAndEachFunctionIsLookedUpOnce) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  EXPECT_THAT(loaded_images_, IsEmpty()) << "compiling loads nothing on the device";
  const std::vector<KernelArgInput> fill = {ArrayArg(y), ScalarArg(5.0f), ScalarArg(2)};
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 2), fill).status());
  }
  GPUKIT_ASSERT_OK(core()
                       .LaunchKernel(s, k.handle, "saxpy", Blocks(1, 2),
                                     {ScalarArg(1.0f), ArrayArg(y), ArrayArg(y), ScalarArg(2)})
                       .status());
  ASSERT_THAT(loaded_images_, SizeIs(1));
  EXPECT_THAT(loaded_images_[0], StartsWith("\177ELF")) << "the cubin NVRTC made";
  EXPECT_THAT(looked_up_, ElementsAre("fill", "saxpy"));
  ASSERT_THAT(launches_, SizeIs(4));
  EXPECT_EQ(launches_[0].function.value, launches_[2].function.value);
  EXPECT_NE(launches_[0].function.value, launches_[3].function.value);
  EXPECT_THAT(unloaded_, IsEmpty());
  GPUKIT_ASSERT_OK(core().FreeKernel(s, k.handle));
  EXPECT_THAT(unloaded_, ElementsAre(1u)) << "FreeKernel unloads the module it loaded";
}

TEST_F(CoreKernelTest, ClosingTheSessionUnloadsTheModulesOfItsLaunchedKernels) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2}));
  const std::vector<KernelArgInput> fill = {ArrayArg(y), ScalarArg(5.0f), ScalarArg(2)};
  for (int i = 0; i < 2; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
    GPUKIT_ASSERT_OK(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 2), fill).status());
  }
  GPUKIT_ASSERT_OK(core().CompileKernel(s, SaxpyAndFill()).status());  // never launched
  EXPECT_THAT(loaded_images_, SizeIs(2)) << "each kernel loads its own module";
  GPUKIT_ASSERT_OK_AND_ASSIGN(CloseStats stats, core().CloseSession(s));
  EXPECT_EQ(stats.kernels_freed, 3);
  EXPECT_THAT(unloaded_, ::testing::UnorderedElementsAre(1u, 2u));
  EXPECT_EQ(DeviceMemoryUsed(), 0);
}

TEST_F(CoreKernelTest, LeaseExpiryAndCoreShutdownUnloadEveryModule) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string lapsing, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string open, Open());
  for (const std::string& s : {lapsing, open}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
    GPUKIT_ASSERT_OK(core()
                         .LaunchKernel(s, k.handle, "fill", Blocks(1, 1),
                                       {ArrayArg(y), ScalarArg(0.0f), ScalarArg(1)})
                         .status());
  }
  clock_.Advance(options_.sessions.default_lease / 2);
  GPUKIT_ASSERT_OK(core().KeepAlive(open).status());
  clock_.Advance(options_.sessions.default_lease * 3 / 4);
  EXPECT_EQ(core().ExpireLeases(), 1);
  EXPECT_THAT(unloaded_, ElementsAre(1u));
  core_.reset();
  EXPECT_THAT(unloaded_, ElementsAre(1u, 2u));
}

TEST_F(CoreKernelTest, KernelFreedWhileItsLaunchRunsIsUnloadedOnlyAfterTheLaunch) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  on_launch_ = [&](absl::Span<const KernelArg>, StreamId) {
    EXPECT_THAT(core().FreeKernel(s, k.handle), IsOk());
    EXPECT_THAT(unloaded_, IsEmpty()) << "unloaded under its running launch";
    return absl::OkStatus();
  };
  GPUKIT_ASSERT_OK(core()
                       .LaunchKernel(s, k.handle, "fill", Blocks(1, 2),
                                     {ArrayArg(y), ScalarArg(0.0f), ScalarArg(2)})
                       .status());
  EXPECT_THAT(unloaded_, ElementsAre(1u));
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 1), {}), StatusIs(kNotFound));
}

TEST_F(CoreKernelTest, SessionClosedWhileItsKernelRunsLeavesNothingBehind) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  on_launch_ = [&](absl::Span<const KernelArg>, StreamId) {
    EXPECT_THAT(core().CloseSession(s), IsOk());
    EXPECT_GT(DeviceMemoryUsed(), 0) << "the pinned argument stays until the launch ends";
    return absl::OkStatus();
  };
  // The launch wrote into an array the session's end freed: never OK.
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 2),
                                  {ArrayArg(y), ScalarArg(0.0f), ScalarArg(2)}),
              StatusIs(kNotFound, HasSubstr("while the request ran")));
  EXPECT_THAT(unloaded_, ElementsAre(1u));
  EXPECT_EQ(DeviceMemoryUsed(), 0);
  EXPECT_EQ(core().session_count(), 0);
}

TEST_F(CoreKernelTest, LeaseLapsingWhileItsKernelRunsFailsTheLaunchAndLeavesNothingBehind) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  for (const bool reaped : {false, true}) {
    SCOPED_TRACE(reaped ? "reaped" : "not reaped yet");
    if (reaped) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(s, Open());
      GPUKIT_ASSERT_OK_AND_ASSIGN(y, Upload(s, {1, 2}));
      GPUKIT_ASSERT_OK_AND_ASSIGN(k, core().CompileKernel(s, SaxpyAndFill()));
    }
    on_launch_ = [&](absl::Span<const KernelArg>, StreamId) {
      clock_.Advance(absl::Seconds(31));  // past the default lease of 30 s
      if (reaped) {
        EXPECT_EQ(core().ExpireLeases(), 1);
      }
      return absl::OkStatus();
    };
    EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 2),
                                    {ArrayArg(y), ScalarArg(0.0f), ScalarArg(2)}),
                StatusIs(kNotFound, HasSubstr("while the request ran")));
    on_launch_ = nullptr;
    core().ExpireLeases();
    EXPECT_EQ(DeviceMemoryUsed(), 0);
    EXPECT_EQ(core().session_count(), 0);
  }
}

TEST_F(CoreKernelTest, ArgumentFreedDuringTheLaunchStaysPinnedUntilItEnds) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(s, {1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  const std::vector<float> written = {9, 9, 9, 9};
  on_launch_ = [&](absl::Span<const KernelArg> args, StreamId stream) {
    EXPECT_THAT(core().FreeArray(s, y), IsOkAndHolds(16));
    EXPECT_EQ(DeviceMemoryUsed(), 16);
    // The buffer is still valid: writing it is no error.
    return gpu_->inner().CopyHostToDevice(args[0].buffer, 0, written.data(), 16, stream);
  };
  GPUKIT_EXPECT_OK(core()
                       .LaunchKernel(s, k.handle, "fill", Blocks(1, 4),
                                     {ArrayArg(y), ScalarArg(9.0f), ScalarArg(4)})
                       .status());
  EXPECT_EQ(DeviceMemoryUsed(), 0);
}

TEST_F(CoreKernelTest, SpilledArgumentIsRestoredBitForBitForTheLaunch) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string best_effort, Open());
  std::vector<float> values(kQuarter / sizeof(float));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload(best_effort, values));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(best_effort, SaxpyAndFill()));
  // A Guaranteed session takes the whole device, which spills y; then gives it back.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string guaranteed, Open(Guaranteed(kDeviceBytes)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView all,
                              core().CreateArray(guaranteed, {DType::kUInt8, {kDeviceBytes}}));
  ASSERT_EQ(Summary(best_effort).spilled_bytes, kQuarter);
  GPUKIT_ASSERT_OK(core().FreeArray(guaranteed, all.handle).status());
  std::vector<float> seen(values.size());
  on_launch_ = [&](absl::Span<const KernelArg> args, StreamId stream) {
    return gpu_->inner().CopyDeviceToHost(seen.data(), args[0].buffer, 0, kQuarter, stream);
  };
  GPUKIT_ASSERT_OK(core()
                       .LaunchKernel(best_effort, k.handle, "fill", Blocks(1, 1),
                                     {ArrayArg(y), ScalarArg(0.0f), ScalarArg(0)})
                       .status());
  EXPECT_EQ(Summary(best_effort).spilled_bytes, 0);
  EXPECT_TRUE(seen == values) << "the launch saw the restored data";
}

TEST_F(CoreKernelTest, DeviceLaunchErrorFailsTheTaskWithIt) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  on_launch_ = [](absl::Span<const KernelArg>, StreamId) {
    return absl::InvalidArgumentError("kernel fill takes 3 parameters, got 1");
  };
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 1), {ScalarArg(1)}),
              StatusIs(kInvalidArgument, "kernel fill takes 3 parameters, got 1"));
  const std::vector<TaskInfo> tasks = core().scheduler().ListTasks({});
  ASSERT_THAT(tasks, SizeIs(1));
  EXPECT_EQ(tasks[0].kind, TaskKind::kKernel);
  EXPECT_EQ(tasks[0].state, TaskState::kFailed);
  EXPECT_THAT(tasks[0].error, HasSubstr("takes 3 parameters"));
}

TEST_F(CoreKernelTest, FailedModuleLoadFailsTheTaskAndTheNextLaunchLoadsAgain) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  fail_next_load_ = absl::InvalidArgumentError("cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE");
  EXPECT_THAT(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 1), {}),
              StatusIs(kInvalidArgument, HasSubstr("CUDA_ERROR_INVALID_IMAGE")));
  std::vector<TaskInfo> tasks = core().scheduler().ListTasks({});
  ASSERT_THAT(tasks, SizeIs(1));
  EXPECT_EQ(tasks[0].state, TaskState::kFailed);
  GPUKIT_EXPECT_OK(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 1), {}).status());
  EXPECT_THAT(loaded_images_, SizeIs(1));
  EXPECT_THAT(launches_, SizeIs(1));
}

TEST_F(CoreKernelTest, LaunchesAreAccountedToThePartition) {
  core(/*gpu_double=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelView k, core().CompileKernel(s, SaxpyAndFill()));
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK(core().LaunchKernel(s, k.handle, "fill", Blocks(1, 1), {}).status());
  }
  const PartitionStatus p = core().scheduler().ListPartitions()[0];
  EXPECT_EQ(p.succeeded_total, 3);
  EXPECT_EQ(p.running, 0);
  EXPECT_EQ(p.queued, 0);
}

}  // namespace
}  // namespace gpukit
