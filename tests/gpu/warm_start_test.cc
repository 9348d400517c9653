// Warm start: the built-in kernels precompiled at build time (kernels/cuda/embedded_kernels.h)
// serve the first op of a fresh gpukitd without NVRTC, and compute bit for bit what the
// NVRTC-compiled kernels compute.
//
// The first test starts gpukitd --backend=cuda with an empty kernel cache directory, runs one
// a + b through the C++ client and prints the time from the daemon's start to its result:
//   warm start: gpukitd ready after N ms, first a + b done M ms after start
// (M is the number the warm-start goal, under 1 s on an H100, is about); the daemon's log must
// show that the built-in kernels came from the precompiled fatbin. The second test runs the
// same launches through two runners on one GPU, one loading the fatbins and one compiling with
// NVRTC, and compares the outputs byte for byte.
//
// Skipped, visibly, where there is no GPU gpukitd accepts, or (the second) no NVRTC, or where
// the build did not precompile the kernels (GPUKIT_PRECOMPILE_KERNELS=OFF or no nvcc).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/embedded_kernels.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/builtin_op_runner.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device_factory.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/op_registry.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

// Why this host cannot run the test, or nothing when it can.
std::optional<std::string> WhyNoPrecompiledGpu() {
  if (kernels::PrecompiledKernelTargets().sass_archs.empty()) {
    return std::string("this build has no precompiled kernels (GPUKIT_PRECOMPILE_KERNELS)");
  }
  const DriverProbe probe = ProbeCudaDriver();
  if (!probe.driver_loaded) return "no CUDA driver on this machine: " + probe.error;
  if (probe.device_count == 0) return std::string("the CUDA driver shows no GPU");
  for (int index = 0; index < probe.device_count; ++index) {
    CudaDeviceOptions options;
    options.index = index;
    options.use_cublaslt = false;
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
    if (!device.ok()) {
      return absl::StrCat("GPU ", index, " is not one gpukitd --backend=cuda accepts: ",
                          device.status().ToString());
    }
  }
  return std::nullopt;
}

class WarmStartDaemonTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (const std::optional<std::string> why = WhyNoPrecompiledGpu()) GTEST_SKIP() << *why;
    start_ = std::chrono::steady_clock::now();
    DaemonTest::SetUp();
    ready_ = std::chrono::steady_clock::now();
  }

  // An empty kernel cache of its own: nothing compiled earlier can serve the first op.
  std::string DaemonConfigJson() const override {
    return absl::StrCat(R"({"jit": {"cacheDir": ")", temp_dir(), R"(/kernel-cache"}})");
  }

  void ConfigureDaemon(DaemonOptions& options) const override {
    options.backend = "cuda";
    options.ready_timeout = absl::Seconds(60);
  }

  static double MillisecondsBetween(std::chrono::steady_clock::time_point a,
                                    std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  std::chrono::steady_clock::time_point start_, ready_;
};

TEST_F(WarmStartDaemonTest, FirstAddOfAFreshDaemonWithAnEmptyCacheUsesThePrecompiledKernels) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("warm-start"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>({1.5f, 2.0f, -3.0f}, {3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->FromVector<float>({0.25f, 40.0f, 3.0f}, {3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Add(a, b));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> values, sum.ToVector<float>());
  const auto done = std::chrono::steady_clock::now();
  EXPECT_THAT(values, ::testing::ElementsAre(1.75f, 42.0f, 0.0f));
  std::cout << "warm start: gpukitd ready after " << MillisecondsBetween(start_, ready_)
            << " ms, first a + b done " << MillisecondsBetween(start_, done) << " ms after start"
            << std::endl;

  const std::string log = daemon().Log();
  EXPECT_THAT(log, ::testing::HasSubstr("built-in kernels: precompiled fatbin for sm_"));
  EXPECT_THAT(log, ::testing::HasSubstr("built-in kernels \"binary\": precompiled"));
  // The NVRTC path logs "built-in kernels "binary" for sm_XX: compiled (...)".
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("built-in kernels \"binary\" for sm_")));
}

// ---- Precompiled and NVRTC-compiled kernels compute the same bits ----

class PrecompiledMatchesNvrtcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::optional<std::string> why = WhyNoPrecompiledGpu()) {
      skip_ = new std::string(*why);
      return;
    }
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) {
      skip_ = new std::string(absl::StrCat("no NVRTC: ", jit.status().message()));
      return;
    }
    jit_ = jit->release();
    CudaDeviceOptions options;
    options.use_cublaslt = false;  // matmul runs on gpukit's own kernel
    cuda_ = CudaDevice::Create(options).value().release();
  }

  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    rng_.seed(TestSeed());
    const std::string arch = cuda_->cuda_info().arch;
    precompiled_ = std::make_unique<BuiltinOpRunner>(
        *cuda_, BuiltinOpRunnerOptions{.compile = nullptr,
                                       .modules = kernels::EmbeddedKernelSources(),
                                       .use_precompiled = true});
    nvrtc_ = std::make_unique<BuiltinOpRunner>(
        *cuda_, BuiltinOpRunnerOptions{
                    .compile = [arch](absl::string_view, absl::string_view source,
                                      absl::string_view entry) -> absl::StatusOr<std::string> {
                      CompileRequest request;
                      request.source = std::string(source);
                      request.entries = {std::string(entry)};
                      GPUKIT_ASSIGN_OR_RETURN(JitResult compiled, jit_->Compile(request, arch));
                      return compiled.kernel->cubin;
                    },
                    .modules = kernels::EmbeddedKernelSources(),
                    .use_precompiled = false});
  }

  // Random values in +-[0.25, 2] (integers: 1..100), as bytes of `dtype`.
  std::vector<uint8_t> RandomBytes(DType dtype, int64_t count) {
    std::vector<float> values(count);
    std::uniform_real_distribution<float> magnitude(0.25f, 2.0f);
    std::uniform_int_distribution<int> small(1, 100);
    for (float& v : values) {
      v = IsFloating(dtype) ? magnitude(rng_) * (small(rng_) % 2 ? -1.0f : 1.0f)
                            : static_cast<float>(small(rng_));
    }
    std::vector<uint8_t> bytes(count * DTypeSize(dtype));
    kernels::CastCpu({values.data(), DType::kFloat32, {count}}, {bytes.data(), dtype, {count}});
    return bytes;
  }

  // Runs `op` over arrays of `shapes` (in `dtype`, the same random bytes for both runners)
  // through `runner`; the output's bytes.
  absl::StatusOr<std::vector<uint8_t>> RunWith(BuiltinOpRunner& runner, const std::string& op,
                                               DType dtype, const std::vector<Shape>& shapes,
                                               const std::vector<std::vector<uint8_t>>& data,
                                               const AttrMap& attrs) {
    const OpRegistry& registry = OpRegistry::Builtin();
    GPUKIT_ASSIGN_OR_RETURN(const OpDef* def, registry.Find(op));
    std::vector<OperandDesc> descs;
    for (const Shape& shape : shapes) {
      OperandDesc desc;
      desc.tensor = {dtype, shape};
      descs.push_back(desc);
    }
    GPUKIT_ASSIGN_OR_RETURN(OpPlan plan, registry.Plan(*def, descs, attrs));
    GPUKIT_ASSIGN_OR_RETURN(StreamId stream, cuda_->CreateStream(StreamPriority::kNormal));
    OpLaunch launch;
    launch.op = def;
    launch.plan = plan;
    std::vector<BufferId> buffers;
    for (size_t i = 0; i < shapes.size(); ++i) {
      OpOperand operand;
      operand.desc = descs[i].tensor;
      GPUKIT_ASSIGN_OR_RETURN(operand.buffer, cuda_->Allocate(data[i].size()));
      buffers.push_back(operand.buffer);
      GPUKIT_RETURN_IF_ERROR(
          cuda_->CopyHostToDevice(operand.buffer, 0, data[i].data(), data[i].size(), stream));
      launch.inputs.push_back(operand);
    }
    GPUKIT_ASSIGN_OR_RETURN(int64_t out_bytes, ByteSize(plan.output.shape, plan.output.dtype));
    GPUKIT_ASSIGN_OR_RETURN(launch.output, cuda_->Allocate(out_bytes));
    buffers.push_back(launch.output);
    GPUKIT_RETURN_IF_ERROR(runner.Run(launch, stream));
    std::vector<uint8_t> out(out_bytes);
    GPUKIT_RETURN_IF_ERROR(
        cuda_->CopyDeviceToHost(out.data(), launch.output, 0, out_bytes, stream));
    GPUKIT_RETURN_IF_ERROR(SynchronizeStream(*cuda_, stream));
    runner.ReleaseStream(stream);
    for (BufferId buffer : buffers) GPUKIT_RETURN_IF_ERROR(cuda_->Free(buffer));
    GPUKIT_RETURN_IF_ERROR(cuda_->DestroyStream(stream));
    return out;
  }

  void ExpectSameBits(const std::string& op, DType dtype, const std::vector<Shape>& shapes,
                      const AttrMap& attrs = {}) {
    SCOPED_TRACE(absl::StrCat(op, " ", DTypeName(dtype)));
    std::vector<std::vector<uint8_t>> data;
    for (const Shape& shape : shapes)
      data.push_back(RandomBytes(dtype, ElementCount(shape).value()));
    absl::StatusOr<std::vector<uint8_t>> precompiled =
        RunWith(*precompiled_, op, dtype, shapes, data, attrs);
    ASSERT_TRUE(precompiled.ok()) << precompiled.status();
    absl::StatusOr<std::vector<uint8_t>> nvrtc = RunWith(*nvrtc_, op, dtype, shapes, data, attrs);
    ASSERT_TRUE(nvrtc.ok()) << nvrtc.status();
    EXPECT_TRUE(*precompiled == *nvrtc) << "the outputs differ";
  }

  static std::string* skip_;
  static JitCompiler* jit_;
  static CudaDevice* cuda_;
  std::unique_ptr<BuiltinOpRunner> precompiled_, nvrtc_;
  std::mt19937 rng_;
};
std::string* PrecompiledMatchesNvrtcTest::skip_ = nullptr;
JitCompiler* PrecompiledMatchesNvrtcTest::jit_ = nullptr;
CudaDevice* PrecompiledMatchesNvrtcTest::cuda_ = nullptr;

TEST_F(PrecompiledMatchesNvrtcTest, AddMulSumMatmulAndMathOpsComputeTheSameBits) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32}) {
    ExpectSameBits("add", dtype, {{1000}, {1000}});
    ExpectSameBits("mul", dtype, {{64, 33}, {33}});
    ExpectSameBits("sum", dtype, {{100000}});  // long: split across blocks, partials combined
    ExpectSameBits("sum", dtype, {{300, 70}}, {{"axis", int64_t{0}}});
    ExpectSameBits("matmul", dtype, {{3, 70, 45}, {45, 33}});
  }
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    ExpectSameBits("exp", dtype, {{5000}});
    ExpectSameBits("gelu", dtype, {{5000}});
    ExpectSameBits("softmax", dtype, {{40, 300}});
    ExpectSameBits("layernorm", dtype, {{40, 300}});
  }
  // Each runner took its own path.
  for (absl::string_view module : {"binary", "reduce", "matmul", "unary", "nn"}) {
    EXPECT_EQ(precompiled_->Origin(module), ModuleOrigin::kPrecompiled) << module;
    EXPECT_EQ(nvrtc_->Origin(module), ModuleOrigin::kCompiled) << module;
  }
}

}  // namespace
}  // namespace gpukit::testing
