// The built-in device kernels (kernels/cuda) compile with NVRTC for every architecture
// gpukit supports, and every kernel name the CUDA backend asks for is in its module. NVRTC
// needs no GPU, so this runs in CI; what the kernels compute is checked on the GPU host
// (tests/gpu/cuda_ops_test.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/embedded_kernels.h"
#include "runtime/base/dtype.h"
#include "runtime/builtin_op_runner.h"
#include "runtime/jit/jit_compiler.h"

namespace gpukit {
namespace {

// Every kernel BuiltinOpRunner (runtime/builtin_op_runner.cc) may launch, by module.
std::vector<std::string> ExpectedKernels(absl::string_view module) {
  std::vector<std::string> names;
  for (DType dtype : kAllDTypes) {
    const absl::string_view dt = KernelDTypeSuffix(dtype);
    if (module == "binary") {
      for (const char* op : {"add", "sub", "mul", "div"}) names.push_back(absl::StrCat("gk_", op, "_", dt));
    } else if (module == "cast") {
      for (DType to : kAllDTypes) names.push_back(absl::StrCat("gk_cast_", dt, "_", KernelDTypeSuffix(to)));
    } else if (module == "reduce") {
      for (const char* kind : {"rows", "partials", "cols"}) {
        for (const char* op : {"sum", "mean", "max", "min"}) {
          names.push_back(absl::StrCat("gk_reduce_", kind, "_", op, "_", dt));
        }
      }
    } else if (module == "matmul") {
      names.push_back(absl::StrCat("gk_matmul_", dt));
    } else if (module == "unary") {
      for (const char* op : {"abs", "neg", "relu", "clamp", "where"}) {
        names.push_back(absl::StrCat("gk_", op, "_", dt));
      }
      if (IsFloating(dtype)) {
        for (const char* op : {"exp", "log", "sqrt", "rsqrt", "gelu", "silu", "sigmoid", "tanh"}) {
          names.push_back(absl::StrCat("gk_", op, "_", dt));
        }
      }
    } else if (module == "nn") {
      names.push_back(absl::StrCat("gk_argmax_rows_", dt));
      names.push_back(absl::StrCat("gk_argmax_cols_", dt));
      if (IsFloating(dtype)) {
        for (const char* op : {"softmax", "layernorm", "rmsnorm", "rope", "attention"}) {
          names.push_back(absl::StrCat("gk_", op, "_", dt));
        }
      }
    }
  }
  if (module == "nn") {  // the module's entry (builtin_op_runner.cc) comes first
    std::rotate(names.begin(), std::find(names.begin(), names.end(), "gk_softmax_f32"),
                names.end());
  }
  if (module == "layout") {
    for (int bytes : {1, 2, 4, 8}) {
      names.push_back(absl::StrCat("gk_permute_", bytes));
      names.push_back(absl::StrCat("gk_concat_", bytes));
      names.push_back(absl::StrCat("gk_embedding_i32_", bytes));
      names.push_back(absl::StrCat("gk_embedding_i64_", bytes));
    }
  }
  return names;
}

class DeviceKernelsCompileTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (jit.ok()) jit_ = jit->release();
    else skip_reason_ = new std::string(jit.status().message());
  }
  static JitCompiler* jit_;
  static std::string* skip_reason_;
};
JitCompiler* DeviceKernelsCompileTest::jit_ = nullptr;
std::string* DeviceKernelsCompileTest::skip_reason_ = nullptr;

TEST_P(DeviceKernelsCompileTest, EveryModuleCompilesAndHoldsEveryKernelTheRunnerLaunches) {
  if (jit_ == nullptr) GTEST_SKIP() << "no NVRTC here: " << *skip_reason_;
  const std::string arch = GetParam();
  int modules = 0;
  for (const kernels::EmbeddedKernelSource& source : kernels::EmbeddedKernelSources()) {
    SCOPED_TRACE(absl::StrCat(source.name, " for ", arch));
    const std::vector<std::string> kernels = ExpectedKernels(source.name);
    ASSERT_FALSE(kernels.empty()) << "a module the test does not know";
    CompileRequest request;
    request.source = std::string(source.text);
    request.entries = {kernels.front()};
    absl::StatusOr<JitResult> compiled = jit_->Compile(request, arch);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const std::string& cubin = compiled->kernel->cubin;
    ASSERT_GT(cubin.size(), 4u);
    EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
    for (const std::string& kernel : kernels) {
      // extern "C" names appear verbatim in the ELF symbol table.
      EXPECT_NE(cubin.find(kernel + '\0'), std::string::npos) << kernel << " is missing";
    }
    ++modules;
  }
  EXPECT_EQ(modules, 7);
}

INSTANTIATE_TEST_SUITE_P(Archs, DeviceKernelsCompileTest,
                         ::testing::Values("sm_80", "sm_90"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace gpukit
