// The CUDA device (runtime/cuda/cuda_device.h) on a real GPU: the Device conformance suite,
// then what is particular to CUDA (stream priorities, modules and launches of hand-written
// PTX, launch validation, event timing of a kernel, allocation failure, a faulting kernel).
// Where there is no NVIDIA driver or no usable GPU every test reports itself skipped.
#include "runtime/cuda/cuda_device.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_memory.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/runtime/device_conformance.h"

namespace gpukit {
namespace {

using ::gpukit::testing::DeviceConformanceParam;
using ::gpukit::testing::DeviceConformanceParamName;
using ::gpukit::testing::DeviceConformanceTest;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// One JIT compiler for the process, so the built-in modules compile once (null without
// NVRTC: the op tests then skip, visibly).
std::shared_ptr<JitCompiler> SharedJit() {
  static const std::shared_ptr<JitCompiler>* jit = [] {
    absl::StatusOr<std::unique_ptr<JitCompiler>> created = JitCompiler::Create({});
    if (!created.ok()) std::cerr << "no JIT compiler: " << created.status() << "\n";
    return new std::shared_ptr<JitCompiler>(created.ok() ? std::move(*created) : nullptr);
  }();
  return *jit;
}

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice() {
  CudaDeviceOptions options;
  options.index = 0;
  options.jit = SharedJit();
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
  if (!device.ok()) return device.status();
  return std::unique_ptr<Device>(*std::move(device));
}

INSTANTIATE_TEST_SUITE_P(Cuda, DeviceConformanceTest,
                         ::testing::Values(DeviceConformanceParam{"Cuda0", &MakeCudaDevice}),
                         DeviceConformanceParamName);

// Kernels written by hand in PTX, so the test needs no compiler:
//   add_scalar(float* data, float value, uint32 n): data[i] += value for i < n
//   add_block(float* data, struct { float value; uint32 n; }): the same, its scalars in a struct
//   write_null(): stores to address 0, which faults
constexpr char kPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64

.visible .entry add_scalar(
    .param .u64 add_scalar_data,
    .param .f32 add_scalar_value,
    .param .u32 add_scalar_n
)
{
    .reg .pred  %p<2>;
    .reg .f32   %f<4>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<5>;

    ld.param.u64        %rd1, [add_scalar_data];
    ld.param.f32        %f1, [add_scalar_value];
    ld.param.u32        %r2, [add_scalar_n];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r1, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r1, %r2;
    @%p1 bra            DONE;
    cvta.to.global.u64  %rd2, %rd1;
    mul.wide.u32        %rd3, %r1, 4;
    add.s64             %rd4, %rd2, %rd3;
    ld.global.f32       %f2, [%rd4];
    add.f32             %f3, %f2, %f1;
    st.global.f32       [%rd4], %f3;
DONE:
    ret;
}

.visible .entry add_block(
    .param .u64 add_block_data,
    .param .align 4 .b8 add_block_params[8]
)
{
    .reg .pred  %p<2>;
    .reg .f32   %f<4>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<5>;

    ld.param.u64        %rd1, [add_block_data];
    ld.param.f32        %f1, [add_block_params];
    ld.param.u32        %r2, [add_block_params+4];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r1, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r1, %r2;
    @%p1 bra            DONE;
    cvta.to.global.u64  %rd2, %rd1;
    mul.wide.u32        %rd3, %r1, 4;
    add.s64             %rd4, %rd2, %rd3;
    ld.global.f32       %f2, [%rd4];
    add.f32             %f3, %f2, %f1;
    st.global.f32       [%rd4], %f3;
DONE:
    ret;
}

.visible .entry write_null()
{
    .reg .b32   %r<2>;
    .reg .b64   %rd<2>;

    mov.u32             %r1, 42;
    mov.u64             %rd1, 0;
    st.global.u32       [%rd1], %r1;
    ret;
}
)";

KernelArg BufferArg(BufferId buffer) {
  KernelArg arg;
  arg.kind = KernelArg::Kind::kBuffer;
  arg.buffer = buffer;
  return arg;
}

template <typename T>
KernelArg ScalarArg(T value) {
  static_assert(sizeof(T) <= 8);
  KernelArg arg;
  arg.kind = KernelArg::Kind::kScalar;
  std::memcpy(arg.bytes, &value, sizeof(T));
  arg.size_bytes = sizeof(T);
  return arg;
}

LaunchConfig Linear(uint32_t n, uint32_t block = 128) {
  LaunchConfig config;
  config.grid[0] = (n + block - 1) / block;
  config.block[0] = block;
  return config;
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CudaDeviceOptions options;
    options.index = 0;
    options.use_precompiled_kernels = false;  // neither JIT nor fatbins: see below
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
    if (absl::IsFailedPrecondition(device.status())) {
      GTEST_SKIP() << "no usable CUDA device here: " << device.status();
    }
    ASSERT_THAT(device, IsOk());
    device_ = *std::move(device);
    GPUKIT_ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream(StreamPriority::kNormal));
  }

  void TearDown() override {
    if (device_ == nullptr) return;
    for (BufferId buffer : owned_) device_->Free(buffer).IgnoreError();
    GPUKIT_EXPECT_OK(device_->DestroyStream(stream_));
    EXPECT_EQ(device_->GetMemoryInfo().used_bytes, 0) << "the test left device memory allocated";
  }

  absl::Status Sync() { return SynchronizeStream(*device_, stream_); }

  absl::StatusOr<BufferId> UploadFloats(const std::vector<float>& values) {
    const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(float));
    GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device_->Allocate(bytes));
    owned_.push_back(buffer);
    GPUKIT_RETURN_IF_ERROR(device_->CopyHostToDevice(buffer, 0, values.data(), bytes, stream_));
    GPUKIT_RETURN_IF_ERROR(Sync());
    return buffer;
  }

  absl::StatusOr<std::vector<float>> DownloadFloats(BufferId buffer, size_t count) {
    std::vector<float> values(count);
    GPUKIT_RETURN_IF_ERROR(device_->CopyDeviceToHost(
        values.data(), buffer, 0, static_cast<int64_t>(count * sizeof(float)), stream_));
    GPUKIT_RETURN_IF_ERROR(Sync());
    return values;
  }

  absl::StatusOr<FunctionId> AddScalar() {
    GPUKIT_ASSIGN_OR_RETURN(ModuleId module, device_->LoadModule(kPtx));
    return device_->GetFunction(module, "add_scalar");
  }

  std::unique_ptr<CudaDevice> device_;
  StreamId stream_;
  std::vector<BufferId> owned_;
};

TEST_F(CudaDeviceTest, ReportsTheGpuItRunsOn) {
  const DeviceProperties& props = device_->properties();
  const CudaDeviceInfo& info = device_->cuda_info();
  EXPECT_EQ(props.backend, BackendKind::kCuda);
  EXPECT_EQ(props.index, 0);
  EXPECT_FALSE(props.name.empty());
  EXPECT_GT(props.memory_total_bytes, int64_t{1} << 30);
  EXPECT_GE(info.sm_major, 8);
  EXPECT_EQ(info.arch, "sm_" + std::to_string(info.sm_major) + std::to_string(info.sm_minor));
  EXPECT_GE(info.driver_version, 12000);
  EXPECT_GT(info.multiprocessor_count, 0);
  EXPECT_EQ(info.max_threads_per_block, 1024);
  EXPECT_EQ(info.max_block_dim[0], 1024);
  EXPECT_GE(info.max_grid_dim[0], 65535);
  EXPECT_EQ(info.max_shared_memory_per_block_bytes, 48 << 10);
  EXPECT_GT(info.max_shared_memory_per_block_optin_bytes, 48 << 10);
  EXPECT_LE(info.greatest_stream_priority, info.least_stream_priority);
  std::printf("%s: %s, %d SMs, driver %d, stream priorities [%d, %d]\n", props.name.c_str(),
              info.arch.c_str(), info.multiprocessor_count, info.driver_version,
              info.greatest_stream_priority, info.least_stream_priority);
}

TEST_F(CudaDeviceTest, StreamPrioritiesSpanTheContextsRange) {
  const CudaDeviceInfo& info = device_->cuda_info();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId high, device_->CreateStream(StreamPriority::kHigh));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId low, device_->CreateStream(StreamPriority::kLow));
  EXPECT_THAT(device_->StreamPriorityValue(high), IsOkAndHolds(info.greatest_stream_priority));
  EXPECT_THAT(device_->StreamPriorityValue(low), IsOkAndHolds(info.least_stream_priority));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int normal, device_->StreamPriorityValue(stream_));
  if (info.least_stream_priority - info.greatest_stream_priority >= 2) {
    EXPECT_LT(normal, info.least_stream_priority);  // lower numbers are higher priorities
    EXPECT_GT(normal, info.greatest_stream_priority);
  }
  EXPECT_THAT(device_->StreamPriorityValue(StreamId{~uint64_t{0}}),
              StatusIs(absl::StatusCode::kNotFound));
  GPUKIT_EXPECT_OK(device_->DestroyStream(high));
  GPUKIT_EXPECT_OK(device_->DestroyStream(low));
}

TEST_F(CudaDeviceTest, RunsAHandWrittenPtxKernel) {
  constexpr uint32_t kCount = 1000;  // not a multiple of the block: the tail is guarded
  std::vector<float> values(kCount);
  for (uint32_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(i) * 0.5f;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats(values));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, AddScalar());
  const KernelArg args[] = {BufferArg(data), ScalarArg(2.5f), ScalarArg(kCount)};
  GPUKIT_ASSERT_OK(device_->Launch(add, Linear(kCount), args, stream_));
  GPUKIT_ASSERT_OK(device_->Launch(add, Linear(kCount), args, stream_));  // stream order
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, DownloadFloats(data, kCount));
  std::vector<float> expected(kCount);
  for (uint32_t i = 0; i < kCount; ++i) expected[i] = values[i] + 5.0f;
  EXPECT_THAT(out, ElementsAreArray(expected));
}

TEST_F(CudaDeviceTest, PassesAParameterBlockByValue) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({1, 2, 3, 4, 5}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ModuleId module, device_->LoadModule(kPtx));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, device_->GetFunction(module, "add_block"));
  struct Params {
    float value;
    uint32_t n;
  } params = {10.0f, 4};  // the fifth element stays as it is
  KernelArg block;
  block.kind = KernelArg::Kind::kBlock;
  block.block = &params;
  block.size_bytes = sizeof(params);
  const KernelArg args[] = {BufferArg(data), block};
  GPUKIT_ASSERT_OK(device_->Launch(add, Linear(5), args, stream_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, DownloadFloats(data, 5));
  EXPECT_THAT(out, ElementsAreArray({11.0f, 12.0f, 13.0f, 14.0f, 5.0f}));

  KernelArg empty = block;
  empty.block = nullptr;
  const KernelArg no_data[] = {BufferArg(data), empty};
  EXPECT_THAT(device_->Launch(add, Linear(5), no_data, stream_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  if (device_->cuda_info().driver_version >= 12040) {  // cuFuncGetParamInfo exists
    KernelArg short_block = block;
    short_block.size_bytes = 4;
    const KernelArg too_short[] = {BufferArg(data), short_block};
    EXPECT_THAT(device_->Launch(add, Linear(5), too_short, stream_),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter 1 is 8 bytes")));
  }
}

TEST_F(CudaDeviceTest, GetFunctionGivesOneIdPerKernelAndNotFoundForOthers) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ModuleId module, device_->LoadModule(kPtx));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId first, device_->GetFunction(module, "add_scalar"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId again, device_->GetFunction(module, "add_scalar"));
  EXPECT_EQ(first.value, again.value);
  EXPECT_THAT(device_->GetFunction(module, "nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no kernel named nope")));
  EXPECT_THAT(device_->GetFunction(ModuleId{~uint64_t{0}}, "add_scalar"),
              StatusIs(absl::StatusCode::kNotFound));
  GPUKIT_ASSERT_OK(device_->UnloadModule(module));
  EXPECT_THAT(device_->GetFunction(module, "add_scalar"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_->Launch(first, Linear(1), {}, stream_),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_->UnloadModule(module), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CudaDeviceTest, LoadModuleRejectsWhatIsNotAModule) {
  EXPECT_THAT(device_->LoadModule(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(device_->LoadModule("this is neither PTX nor a cubin"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cuModuleLoadDataEx")));
  // A rejected image leaves the device working.
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, AddScalar());
  EXPECT_NE(add.value, 0u);
}

TEST_F(CudaDeviceTest, LaunchValidatesBeforeEnqueueing) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, AddScalar());
  const KernelArg args[] = {BufferArg(data), ScalarArg(1.0f), ScalarArg(uint32_t{4})};
  const auto invalid = StatusIs(absl::StatusCode::kInvalidArgument);

  LaunchConfig config = Linear(4);
  config.block[0] = 2048;  // above the 1024 threads a block may have
  EXPECT_THAT(device_->Launch(add, config, args, stream_), invalid);
  config = Linear(4);
  config.block[0] = 32;
  config.block[1] = 32;
  config.block[2] = 2;  // each dimension fits, the product (2048) does not
  EXPECT_THAT(device_->Launch(add, config, args, stream_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2048 threads")));
  config = Linear(4);
  config.grid[1] = 0;
  EXPECT_THAT(device_->Launch(add, config, args, stream_), invalid);
  config = Linear(4);
  config.shared_memory_bytes =
      static_cast<uint32_t>(device_->cuda_info().max_shared_memory_per_block_optin_bytes) + 1;
  EXPECT_THAT(device_->Launch(add, config, args, stream_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shared_memory_bytes")));

  const KernelArg unknown_buffer[] = {BufferArg(BufferId{~uint64_t{0}}), ScalarArg(1.0f),
                                      ScalarArg(uint32_t{4})};
  EXPECT_THAT(device_->Launch(add, Linear(4), unknown_buffer, stream_),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("argument 0")));
  KernelArg empty_scalar = ScalarArg(1.0f);
  empty_scalar.size_bytes = 0;
  const KernelArg bad_scalar[] = {BufferArg(data), empty_scalar, ScalarArg(uint32_t{4})};
  EXPECT_THAT(device_->Launch(add, Linear(4), bad_scalar, stream_), invalid);
  EXPECT_THAT(device_->Launch(FunctionId{~uint64_t{0}}, Linear(4), args, stream_),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_->Launch(add, Linear(4), args, StreamId{~uint64_t{0}}),
              StatusIs(absl::StatusCode::kNotFound));

  if (device_->cuda_info().driver_version >= 12040) {  // cuFuncGetParamInfo exists
    EXPECT_THAT(device_->Launch(add, Linear(4), absl::MakeConstSpan(args, 2), stream_),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("kernel add_scalar takes 3 parameters, got 2")));
    const KernelArg double_for_float[] = {BufferArg(data), ScalarArg(1.0), ScalarArg(uint32_t{4})};
    EXPECT_THAT(device_->Launch(add, Linear(4), double_for_float, stream_),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter 1 is 4 bytes")));
  }

  // Nothing rejected reached the stream: the data is untouched and the stream is clean.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, DownloadFloats(data, 4));
  EXPECT_THAT(out, ElementsAreArray({1.0f, 2.0f, 3.0f, 4.0f}));
}

TEST_F(CudaDeviceTest, DynamicSharedMemoryAbove48KiBIsOptedInto) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, AddScalar());
  const KernelArg args[] = {BufferArg(data), ScalarArg(1.0f), ScalarArg(uint32_t{4})};
  LaunchConfig config = Linear(4);
  config.shared_memory_bytes = 64 << 10;
  GPUKIT_ASSERT_OK(device_->Launch(add, config, args, stream_));
  config.shared_memory_bytes = 16 << 10;  // a smaller request after a larger one still runs
  GPUKIT_ASSERT_OK(device_->Launch(add, config, args, stream_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, DownloadFloats(data, 4));
  EXPECT_THAT(out, ElementsAreArray({3.0f, 4.0f, 5.0f, 6.0f}));
}

TEST_F(CudaDeviceTest, EventElapsedNsIsPositiveForARealKernel) {
  constexpr uint32_t kCount = 16 << 20;  // 64 MiB of floats, read and written
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats(std::vector<float>(kCount, 1.0f)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, AddScalar());
  const KernelArg args[] = {BufferArg(data), ScalarArg(1.0f), ScalarArg(kCount)};
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(stream_));
  GPUKIT_ASSERT_OK(device_->Launch(add, Linear(kCount, 256), args, stream_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(stream_));
  GPUKIT_ASSERT_OK(device_->WaitEvent(end));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t elapsed_ns, device_->EventElapsedNs(start, end));
  EXPECT_GT(elapsed_ns, 0);
  EXPECT_LT(elapsed_ns, int64_t{10'000'000'000});
  std::printf("add_scalar over %u floats: %lld ns\n", kCount, static_cast<long long>(elapsed_ns));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(start));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(end));
}

// Work still running: the pair is FAILED_PRECONDITION (never waited for), and once it has
// run, the device time of the pair, as EventElapsedNs measures it.
TEST_F(CudaDeviceTest, ElapsedNsIfCompletedDoesNotWaitForUnfinishedWork) {
  constexpr uint32_t kCount = 16 << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats(std::vector<float>(kCount, 1.0f)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId add, AddScalar());
  const KernelArg args[] = {BufferArg(data), ScalarArg(1.0f), ScalarArg(kCount)};
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(stream_));
  // 2000 passes, each reading and writing 64 MiB: over 50 ms of device time on any GPU gpukit
  // runs on (an H200 moves about 4.8 TB/s), several times what enqueueing them takes.
  for (int i = 0; i < 2000; ++i) {
    GPUKIT_ASSERT_OK(device_->Launch(add, Linear(kCount, 256), args, stream_));
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(stream_));
  EXPECT_THAT(device_->ElapsedNsIfCompleted(start, end),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  GPUKIT_ASSERT_OK(device_->WaitEvent(end));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t elapsed_ns, device_->EventElapsedNs(start, end));
  EXPECT_THAT(device_->ElapsedNsIfCompleted(start, end), IsOkAndHolds(elapsed_ns));
  EXPECT_GT(elapsed_ns, 1'000'000);
  GPUKIT_EXPECT_OK(device_->DestroyEvent(start));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(end));
}

TEST_F(CudaDeviceTest, AbsurdAllocationsAreResourceExhaustedAndTheDeviceKeepsWorking) {
  constexpr int64_t kOnePiB = int64_t{1} << 50;
  EXPECT_THAT(device_->Allocate(kOnePiB), StatusIs(absl::StatusCode::kResourceExhausted));
  // All of the GPU's memory cannot be had either (the context holds some): this one reaches
  // cuMemAlloc and comes back as its out-of-memory error.
  EXPECT_THAT(device_->Allocate(device_->properties().memory_total_bytes),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of memory")));
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({7, 8, 9}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, DownloadFloats(data, 3));
  EXPECT_THAT(out, ElementsAreArray({7.0f, 8.0f, 9.0f}));
}

TEST_F(CudaDeviceTest, BuffersComeFromExportableVmmSegmentsOfThePool) {
  EXPECT_THAT(device_->memory_source(), HasSubstr("POSIX file descriptors"));
  // Small buffers share slabs, large ones get segments of their own; none may overlap, which
  // distinct contents written to each and read back would show.
  std::vector<BufferId> buffers;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 64; ++i) sizes.push_back(i % 8 == 0 ? (3 << 20) + 4 * i : 4096 + 4 * i);
  for (size_t i = 0; i < sizes.size(); ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device_->Allocate(sizes[i]));
    owned_.push_back(buffer);
    std::vector<uint32_t> pattern(static_cast<size_t>(sizes[i]) / 4);
    for (size_t j = 0; j < pattern.size(); ++j) pattern[j] = static_cast<uint32_t>(i << 24 | j);
    GPUKIT_ASSERT_OK(device_->CopyHostToDevice(buffer, 0, pattern.data(), sizes[i], stream_));
    GPUKIT_ASSERT_OK(Sync());
    buffers.push_back(buffer);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::vector<uint32_t> back(static_cast<size_t>(sizes[i]) / 4);
    GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(back.data(), buffers[i], 0, sizes[i], stream_));
    GPUKIT_ASSERT_OK(Sync());
    for (size_t j = 0; j < back.size(); ++j) {
      ASSERT_EQ(back[j], static_cast<uint32_t>(i << 24 | j)) << "buffer " << i << " word " << j;
    }
  }
  const MemoryPoolStats stats = device_->memory_pool_stats();
  // 8 segments of 4 MiB, and one slab for all the small buffers (one 5 KiB size class).
  EXPECT_EQ(stats.maps, 8 + 1);
  EXPECT_GE(stats.in_use_bytes, 8 * (3 << 20));
}

TEST_F(CudaDeviceTest, FreedMemoryIsReusedWithoutAskingTheDriver) {
  for (int64_t bytes : {int64_t{64}, int64_t{64} << 20}) {
    SCOPED_TRACE(bytes);
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId first, device_->Allocate(bytes));
    GPUKIT_ASSERT_OK(device_->Free(first));
    const MemoryPoolStats before = device_->memory_pool_stats();
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId second, device_->Allocate(bytes));
    const MemoryPoolStats after = device_->memory_pool_stats();
    EXPECT_EQ(after.maps, before.maps);
    EXPECT_EQ(after.reused, before.reused + 1);
    GPUKIT_ASSERT_OK(device_->Free(second));
  }
  // Both segments are wholly free and cached; a trim gives them back.
  EXPECT_EQ(device_->TrimMemoryPool(), (int64_t{2} << 20) + (int64_t{64} << 20));
  EXPECT_EQ(device_->memory_pool_stats().mapped_bytes, 0);
}

// With a cache larger than the GPU, nothing goes back on free: filling the GPU, freeing it
// all and asking for a size no cached segment fits must trim the pool and succeed.
TEST_F(CudaDeviceTest, UnderPressureThePoolGivesBackWhatItCaches) {
  CudaDeviceOptions options;
  options.memory_pool.max_cached_bytes = int64_t{1} << 50;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaDevice> device, CudaDevice::Create(options));
  constexpr int64_t kChunk = int64_t{4} << 30;
  std::vector<BufferId> chunks;
  for (;;) {
    absl::StatusOr<BufferId> chunk = device->Allocate(kChunk);
    if (!chunk.ok()) {
      EXPECT_THAT(chunk.status(),
                  StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of memory")));
      break;
    }
    chunks.push_back(*chunk);
    ASSERT_LT(chunks.size(), 1000u);
  }
  ASSERT_GE(chunks.size(), 2u) << "the test needs a GPU of at least 8 GiB";
  for (BufferId chunk : chunks) GPUKIT_ASSERT_OK(device->Free(chunk));
  const MemoryPoolStats cached = device->memory_pool_stats();
  EXPECT_EQ(cached.in_use_bytes, 0);
  EXPECT_EQ(cached.mapped_bytes, static_cast<int64_t>(chunks.size()) * kChunk);
  // 6 GiB: larger than any cached segment, and the GPU is full of cached ones.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId big, device->Allocate(int64_t{6} << 30));
  const MemoryPoolStats after = device->memory_pool_stats();
  EXPECT_EQ(after.trims, cached.trims + 1);
  EXPECT_LT(after.mapped_bytes, cached.mapped_bytes);
  GPUKIT_EXPECT_OK(device->Free(big));
  std::printf("filled the GPU with %zu x 4 GiB, then 6 GiB after a trim\n", chunks.size());
}

TEST_F(CudaDeviceTest, HostBuffersArePinnedAndReused) {
  char* first_data = nullptr;
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(HostBuffer first, device_->AllocateHostBuffer(8 << 20));
    EXPECT_TRUE(first.pinned());
    first_data = first.data();
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostBuffer second, device_->AllocateHostBuffer(8 << 20));
  EXPECT_TRUE(second.pinned());
  EXPECT_EQ(second.data(), first_data) << "the pinned segment was cached and handed out again";
}

// Export moves a slab buffer to a segment of its own (same BufferId, same bytes), the
// descriptor imports as that memory, and the freed segment goes back to the driver.
TEST_F(CudaDeviceTest, ExportedBufferIsASegmentOfItsOwnThatImportsAsTheSameMemory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId neighbour, UploadFloats({9, 9, 9, 9}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({1, 2, 3, 4, 5}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ExportedBuffer exported,
                              device_->ExportBuffer(data, ExportForm::kDescriptor));
  EXPECT_TRUE(exported.fd.valid());
  EXPECT_EQ(exported.bytes, 20);
  EXPECT_EQ(exported.allocation_bytes % (2 << 20), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> still, DownloadFloats(data, 5));
  EXPECT_THAT(still, ElementsAreArray({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> other, DownloadFloats(neighbour, 4));
  EXPECT_THAT(other, ElementsAreArray({9.0f, 9.0f, 9.0f, 9.0f}));

  const CudaDriver& cu = **CudaDriver::Get();
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cu.cuMemImportFromShareableHandle(
                &handle, reinterpret_cast<void*>(static_cast<intptr_t>(exported.fd.get())),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  const size_t size = static_cast<size_t>(exported.allocation_bytes);
  CUdeviceptr mapped = 0;
  ASSERT_EQ(cu.cuMemAddressReserve(&mapped, size, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemMap(mapped, size, 0, handle, 0), CUDA_SUCCESS);
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cu.cuMemSetAccess(mapped, size, &access, 1), CUDA_SUCCESS);
  float through_import[5] = {};
  ASSERT_EQ(cu.cuMemcpyDtoH(through_import, mapped + exported.offset_bytes, 20), CUDA_SUCCESS);
  EXPECT_THAT(through_import, ElementsAreArray({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}));

  const int64_t unmaps = device_->memory_pool_stats().unmaps;
  GPUKIT_ASSERT_OK(device_->Free(data));
  owned_.erase(std::find(owned_.begin(), owned_.end(), data));
  EXPECT_EQ(device_->memory_pool_stats().unmaps, unmaps + 1) << "never cached for reuse";
  // The import still holds the memory: reading through it still works.
  ASSERT_EQ(cu.cuMemcpyDtoH(through_import, mapped + exported.offset_bytes, 20), CUDA_SUCCESS);
  EXPECT_EQ(through_import[4], 5.0f);
  EXPECT_EQ(cu.cuMemUnmap(mapped, size), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAddressFree(mapped, size), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_THAT(device_->ExportBuffer(data, ExportForm::kDescriptor).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

// Exports of one slab buffer from several threads at once: every one succeeds and names the
// same memory (the buffer moved once, to one segment of its own), and the bytes survive the
// move. Before ExportBuffer serialized exports, each thread read the buffer's slab address and
// moved it; all but the first failed with ABORTED.
TEST_F(CudaDeviceTest, ConcurrentExportsOfOneBufferAllNameTheSameMemory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId neighbour, UploadFloats({9, 9, 9, 9}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({1, 2, 3, 4, 5, 6, 7, 8}));
  constexpr int kThreads = 8;
  std::vector<absl::StatusOr<ExportedBuffer>> exports;
  for (int i = 0; i < kThreads; ++i) exports.emplace_back(absl::UnknownError("not run"));
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back(
          [&, i] { exports[i] = device_->ExportBuffer(data, ExportForm::kDescriptor); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  std::vector<BufferId> imports;
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_THAT(exports[i], IsOk()) << "export " << i;
    EXPECT_EQ(exports[i]->bytes, 32);
    EXPECT_EQ(exports[i]->allocation_bytes, exports[0]->allocation_bytes);
    ImportedMemory memory;
    memory.fd = std::move(exports[i]->fd);
    memory.allocation_bytes = exports[i]->allocation_bytes;
    memory.offset_bytes = exports[i]->offset_bytes;
    memory.bytes = exports[i]->bytes;
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId imported, device_->ImportBuffer(std::move(memory)));
    owned_.push_back(imported);
    imports.push_back(imported);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> moved, DownloadFloats(data, 8));
  EXPECT_THAT(moved, ElementsAreArray({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> other, DownloadFloats(neighbour, 4));
  EXPECT_THAT(other, ElementsAreArray({9.0f, 9.0f, 9.0f, 9.0f}));
  // A write through the buffer is seen through every import: they all map its memory.
  const float forty_two = 42.0f;
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(data, 0, &forty_two, 4, stream_));
  GPUKIT_ASSERT_OK(Sync());
  for (int i = 0; i < kThreads; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> seen, DownloadFloats(imports[i], 8));
    EXPECT_THAT(seen, ElementsAreArray({42.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}))
        << "import " << i;
  }
}

// ImportBuffer maps memory another process shares; here that process is this one (a VMM
// descriptor of an exported buffer), which the driver allows for descriptors (not for legacy
// IPC handles). The imported buffer is the same memory, refuses a second export, is not
// counted as the device's, and freeing it leaves the memory to its owner.
TEST_F(CudaDeviceTest, ImportedBufferIsTheSharedMemoryAndFreeingItLeavesItToItsOwner) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId owner, UploadFloats({1, 2, 3, 4, 5, 6, 7, 8}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ExportedBuffer exported,
                              device_->ExportBuffer(owner, ExportForm::kDescriptor));
  const int64_t used = device_->GetMemoryInfo().used_bytes;
  ImportedMemory memory;
  memory.fd = std::move(exported.fd);
  memory.allocation_bytes = exported.allocation_bytes;
  memory.offset_bytes = exported.offset_bytes + 8;  // the last six floats
  memory.bytes = 24;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId imported, device_->ImportBuffer(std::move(memory)));
  owned_.push_back(imported);
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, used) << "the owner's memory, not the device's";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> seen, DownloadFloats(imported, 6));
  EXPECT_THAT(seen, ElementsAreArray({3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}));
  const float nine = 9.0f;
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(imported, 0, &nine, 4, stream_));
  GPUKIT_ASSERT_OK(SynchronizeStream(*device_, stream_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> owners, DownloadFloats(owner, 3));
  EXPECT_EQ(owners[2], 9.0f) << "a write through the import is the owner's memory";
  EXPECT_THAT(device_->ExportBuffer(imported, ExportForm::kDescriptor).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  GPUKIT_ASSERT_OK(device_->Free(imported));
  owned_.erase(std::find(owned_.begin(), owned_.end(), imported));
  GPUKIT_ASSERT_OK_AND_ASSIGN(owners, DownloadFloats(owner, 3));
  EXPECT_EQ(owners[2], 9.0f);

  // Ranges outside the allocation, and handles that name nothing.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ExportedBuffer again,
                              device_->ExportBuffer(owner, ExportForm::kDescriptor));
  ImportedMemory outside;
  outside.fd = std::move(again.fd);
  outside.allocation_bytes = again.allocation_bytes;
  outside.offset_bytes = again.allocation_bytes - 4;
  outside.bytes = 8;
  EXPECT_THAT(device_->ImportBuffer(std::move(outside)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  ImportedMemory forged;
  forged.cuda_ipc_handle = std::string(64, '\x5a');
  forged.bytes = 4;
  EXPECT_THAT(device_->ImportBuffer(std::move(forged)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ImportedMemory not_memory;
  GPUKIT_ASSERT_OK_AND_ASSIGN(not_memory.fd, CreateSharedMemory("not-device-memory", 2 << 20));
  not_memory.allocation_bytes = 2 << 20;
  not_memory.bytes = 4;
  EXPECT_THAT(device_->ImportBuffer(std::move(not_memory)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CudaSegmentSourceTest, SegmentsExportAsPosixFileDescriptors) {
  absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
  if (!cu.ok()) GTEST_SKIP() << "no usable CUDA driver here: " << cu.status();
  CUdevice device = 0;
  ASSERT_EQ((*cu)->cuDeviceGet(&device, 0), CUDA_SUCCESS);
  CUcontext context = nullptr;
  ASSERT_EQ((*cu)->cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaSegmentSource> source,
                                CudaSegmentSource::Create(**cu, context, device));
    ASSERT_EQ(source->kind(), CudaSegmentSource::Kind::kVmmPosixFd) << source->Describe();
    GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, source->Map(2 * source->granularity_bytes()));
    int fd = -1;
    EXPECT_EQ((*cu)->cuMemExportToShareableHandle(
                  &fd, static_cast<CUmemGenericAllocationHandle>(segment.handle),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_SUCCESS);
    EXPECT_GE(fd, 0);
    if (fd >= 0) close(fd);
    source->Unmap(segment);
  }
  ASSERT_EQ((*cu)->cuDevicePrimaryCtxRelease(device), CUDA_SUCCESS);
}

// The fixture's device has no JIT compiler and uses no precompiled kernels (the conformance
// suite's has a JIT compiler).
TEST_F(CudaDeviceTest, WithoutAJitCompilerItRunsNoBuiltinOps) {
  EXPECT_FALSE(device_->SupportsOp("add"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, UploadFloats({1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId out, device_->Allocate(8));
  owned_.push_back(out);
  GPUKIT_ASSERT_OK_AND_ASSIGN(const OpDef* add, OpRegistry::Builtin().Find("add"));
  OpLaunch launch;
  launch.op = add;
  OpOperand operand;
  operand.buffer = a;
  operand.desc = {DType::kFloat32, {2}};
  launch.inputs = {operand, operand};
  launch.plan.output = {DType::kFloat32, {2}};
  launch.output = out;
  EXPECT_THAT(device_->RunOp(launch, stream_),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("NVRTC JIT compiler")));
}

// Large copies go through the transfer engine (pinned staging, chunked, several threads):
// sizes that are not multiples of its chunk, at offsets, from two threads on two streams at
// once, must all arrive bit for bit.
TEST_F(CudaDeviceTest, LargeCopiesThroughTheTransferEngineArriveBitForBit) {
  constexpr int64_t kBytes = (int64_t{37} << 20) + 12345;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, device_->Allocate(kBytes + 1000));
  owned_.push_back(a);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, device_->Allocate(kBytes));
  owned_.push_back(b);
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device_->CreateStream(StreamPriority::kLow));
  auto pattern = [](int64_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t x = seed;
    for (uint8_t& byte : v) byte = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
    return v;
  };
  const std::vector<uint8_t> first = pattern(kBytes, 1), second = pattern(kBytes, 2);
  std::vector<uint8_t> first_back(kBytes), second_back(kBytes);
  absl::Status other_thread;
  std::thread t([&] {
    other_thread = device_->CopyHostToDevice(b, 0, second.data(), kBytes, other);
    if (other_thread.ok()) {
      other_thread = device_->CopyDeviceToHost(second_back.data(), b, 0, kBytes, other);
    }
    if (other_thread.ok()) other_thread = SynchronizeStream(*device_, other);
  });
  GPUKIT_EXPECT_OK(device_->CopyHostToDevice(a, 1000, first.data(), kBytes, stream_));
  GPUKIT_EXPECT_OK(device_->CopyDeviceToHost(first_back.data(), a, 1000, kBytes, stream_));
  GPUKIT_EXPECT_OK(Sync());
  t.join();
  GPUKIT_EXPECT_OK(other_thread);
  EXPECT_TRUE(first_back == first) << "the upload or download at an offset lost bytes";
  EXPECT_TRUE(second_back == second) << "the copies of the other thread lost bytes";
  GPUKIT_EXPECT_OK(device_->DestroyStream(other));
}

TEST_F(CudaDeviceTest, OverlappingCopyWithinOneBufferIsInvalidArgument) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId data, UploadFloats({1, 2, 3, 4}));
  EXPECT_THAT(device_->CopyDeviceToDevice(data, 4, data, 0, 8, stream_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlapping")));
  GPUKIT_EXPECT_OK(device_->CopyDeviceToDevice(data, 8, data, 0, 8, stream_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, DownloadFloats(data, 4));
  EXPECT_THAT(out, ElementsAreArray({1.0f, 2.0f, 1.0f, 2.0f}));
}

// Runs in a child process (a fault poisons every context of its process): launches a kernel
// that stores to address 0 and reports what the device said, by exit code and on stderr.
void LaunchAFaultingKernelAndExit() {
  CudaDeviceOptions options;
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
  if (!device.ok()) {
    std::fprintf(stderr, "create: %s\n", device.status().ToString().c_str());
    _exit(2);
  }
  absl::StatusOr<StreamId> stream = (*device)->CreateStream(StreamPriority::kNormal);
  absl::StatusOr<ModuleId> module = (*device)->LoadModule(kPtx);
  if (!stream.ok() || !module.ok()) _exit(3);
  absl::StatusOr<FunctionId> fault = (*device)->GetFunction(*module, "write_null");
  if (!fault.ok()) _exit(4);
  if (!(*device)->Launch(*fault, LaunchConfig{}, {}, *stream).ok()) _exit(5);
  absl::StatusOr<EventId> event = (*device)->RecordEvent(*stream);
  const absl::Status waited = event.ok() ? (*device)->WaitEvent(*event) : event.status();
  std::fprintf(stderr, "fault reported: %s\n", waited.ToString().c_str());
  // Later calls fail too (the error is sticky) but must not crash, nor must the destructor.
  absl::StatusOr<BufferId> after = (*device)->Allocate(1 << 20);
  std::fprintf(stderr, "allocate after the fault: %s\n", after.status().ToString().c_str());
  device->reset();
  _exit(waited.code() == absl::StatusCode::kInternal ? 0 : 1);
}

TEST(CudaDeviceDeathTest, AFaultingKernelComesBackAsAStatusNotAnAbort) {
  {
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create({});
    if (!device.ok()) GTEST_SKIP() << "no usable CUDA device here: " << device.status();
  }
  // A fresh process (fork + exec), so the fault cannot reach this one's context. The fault
  // surfaces at whichever call first sees it: usually cuEventSynchronize, but the kernel may
  // already have faulted when RecordEvent creates or records its event.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(LaunchAFaultingKernelAndExit(), ::testing::ExitedWithCode(0),
              "fault reported: INTERNAL: cu[A-Za-z]+: CUDA_ERROR_");
}

}  // namespace
}  // namespace gpukit
