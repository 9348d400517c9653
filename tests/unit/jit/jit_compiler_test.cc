// The JIT compiler facade (runtime/jit/jit_compiler.h) with the real NVRTC and cache. NVRTC
// needs no GPU; where it is not installed these tests skip, saying so.
#include "runtime/jit/jit_compiler.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kSource[] = R"(
extern "C" __global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
template <typename T>
__global__ void scale(T* a, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] *= s * FACTOR;
}
)";

const std::string kElfMagic(
    "\x7f"
    "ELF",
    4);

CompileRequest AddRequest() {
  return {.source = kSource, .entries = {"add"}, .options = {"-DFACTOR=2"}};
}

class JitCompilerTest : public ::testing::Test {
 protected:
  // A compiler with `options`, or null with skip_reason_ set when NVRTC is missing.
  std::unique_ptr<JitCompiler> MakeCompiler(const JitCompilerOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create(options);
    if (absl::IsFailedPrecondition(jit.status()) &&
        absl::StrContains(jit.status().message(), "NVRTC JIT compiler not available")) {
      skip_reason_ = std::string(jit.status().message());
      return nullptr;
    }
    EXPECT_THAT(jit, IsOk());
    return jit.ok() ? *std::move(jit) : nullptr;
  }

  void SetUp() override {
    jit_ = MakeCompiler();
    if (jit_ == nullptr && !skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_NE(jit_, nullptr);
  }

  std::string skip_reason_;
  std::unique_ptr<JitCompiler> jit_;
};

TEST_F(JitCompilerTest, CompilesASmallKernelToAnElfCubinForSm80AndSm90) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult result, jit_->Compile(AddRequest(), arch));
    EXPECT_EQ(result.origin, KernelOrigin::kCompiled);
    EXPECT_THAT(result.kernel->cubin, StartsWith(kElfMagic)) << arch;
    EXPECT_THAT(result.kernel->entries, ElementsAre("add"));
    EXPECT_THAT(result.kernel->lowered_names, ElementsAre("add"));
    EXPECT_THAT(result.kernel->key, ::testing::SizeIs(64));
  }
  EXPECT_EQ(jit_->cache_stats().compiles, 2);
}

TEST_F(JitCompilerTest, TemplateEntryGetsItsLoweredName) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult result,
                              jit_->Compile({.source = kSource,
                                             .entries = {"scale<float>", "scale<int>", "add"},
                                             .options = {"-DFACTOR=3"}},
                                            "sm_90"));
  EXPECT_THAT(result.kernel->lowered_names,
              ElementsAre("_Z5scaleIfEvPT_S0_i", "_Z5scaleIiEvPT_S0_i", "add"));
}

TEST_F(JitCompilerTest, SyntaxErrorIsInvalidArgumentCarryingNvrtcsLog) {
  const CompileRequest request{
      .source = "extern \"C\" __global__ void k(float* a) {\n  a[0] = 1.0f\n}\n", .entries = {"k"}};
  EXPECT_THAT(jit_->Compile(request, "sm_90"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("error"), HasSubstr("kernel.cu(3)"),
                             HasSubstr("expected a \";\""))));
  EXPECT_EQ(jit_->cache_stats().memory_entries, 0);
}

TEST_F(JitCompilerTest, SecondCompileIsAMemoryHitReturningTheSameObject) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult first, jit_->Compile(AddRequest(), "sm_90"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult second, jit_->Compile(AddRequest(), "sm_90"));
  EXPECT_EQ(first.origin, KernelOrigin::kCompiled);
  EXPECT_EQ(second.origin, KernelOrigin::kMemory);
  EXPECT_EQ(first.kernel.get(), second.kernel.get());
  EXPECT_LT(second.elapsed, first.elapsed);
  std::cout << "[ timing ] first compile " << absl::FormatDuration(first.elapsed) << " (NVRTC "
            << absl::FormatDuration(first.kernel->compile_time) << "), memory hit "
            << absl::FormatDuration(second.elapsed) << "\n";
}

TEST_F(JitCompilerTest, EquivalentOptionSpellingsShareOneKernel) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      JitResult first,
      jit_->Compile({.source = kSource, .entries = {"add"}, .options = {"-DFACTOR=2", "-lineinfo"}},
                    "sm_90"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult second,
                              jit_->Compile({.source = kSource,
                                             .entries = {"add"},
                                             .options = {"--generate-line-info", "-D", "FACTOR=2"}},
                                            "sm_90"));
  EXPECT_EQ(second.origin, KernelOrigin::kMemory);
  EXPECT_EQ(first.kernel.get(), second.kernel.get());
}

TEST_F(JitCompilerTest, DifferentOptionsArchOrEntriesGiveDifferentKernels) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult base, jit_->Compile(AddRequest(), "sm_90"));
  CompileRequest other_options = AddRequest();
  other_options.options.push_back("--use_fast_math");
  CompileRequest other_entries = AddRequest();
  other_entries.entries.push_back("scale<float>");
  std::vector<absl::StatusOr<JitResult>> others = {
      jit_->Compile(other_options, "sm_90"),
      jit_->Compile(AddRequest(), "sm_80"),
      jit_->Compile(other_entries, "sm_90"),
  };
  for (const absl::StatusOr<JitResult>& other : others) {
    ASSERT_THAT(other, IsOk());
    EXPECT_EQ(other->origin, KernelOrigin::kCompiled);
    EXPECT_NE(other->kernel->key, base.kernel->key);
  }
}

TEST_F(JitCompilerTest, AFreshCompilerOnTheSameDiskDirectoryGetsADiskHit) {
  ScopedTempDir dir;
  std::shared_ptr<const CompiledKernel> compiled;
  {
    std::unique_ptr<JitCompiler> jit = MakeCompiler({.cache_dir = dir.path()});
    ASSERT_NE(jit, nullptr);
    GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult result, jit->Compile(AddRequest(), "sm_90"));
    EXPECT_EQ(result.origin, KernelOrigin::kCompiled);
    compiled = result.kernel;
  }
  std::unique_ptr<JitCompiler> jit = MakeCompiler({.cache_dir = dir.path()});
  ASSERT_NE(jit, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult result, jit->Compile(AddRequest(), "sm_90"));
  EXPECT_EQ(result.origin, KernelOrigin::kDisk);
  EXPECT_EQ(result.kernel->key, compiled->key);
  EXPECT_EQ(result.kernel->cubin, compiled->cubin);
  EXPECT_EQ(result.kernel->lowered_names, compiled->lowered_names);
  EXPECT_EQ(jit->cache_stats().compiles, 0);
  std::cout << "[ timing ] disk hit " << absl::FormatDuration(result.elapsed) << " for "
            << result.kernel->cubin.size() << " bytes of cubin\n";
}

struct Damage {
  std::string name;
  bool truncate;  // else flip one byte in the middle
};

class JitCorruptDiskEntryTest : public JitCompilerTest,
                                public ::testing::WithParamInterface<Damage> {};

TEST_P(JitCorruptDiskEntryTest, IsDetectedAndRecompiled) {
  ScopedTempDir dir;
  std::string path;
  std::string good;
  {
    std::unique_ptr<JitCompiler> jit = MakeCompiler({.cache_dir = dir.path()});
    ASSERT_NE(jit, nullptr);
    GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult result, jit->Compile(AddRequest(), "sm_90"));
    path = jit->cache().DiskPath(result.kernel->key);
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_FALSE(good.empty());
  if (GetParam().truncate) {
    std::filesystem::resize_file(path, good.size() - 7);
  } else {
    std::string bad = good;
    bad[bad.size() / 2] ^= 0x40;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  }

  std::unique_ptr<JitCompiler> jit = MakeCompiler({.cache_dir = dir.path()});
  ASSERT_NE(jit, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult result, jit->Compile(AddRequest(), "sm_90"));
  EXPECT_EQ(result.origin, KernelOrigin::kCompiled);
  EXPECT_THAT(result.kernel->cubin, StartsWith(kElfMagic));
  EXPECT_EQ(jit->cache_stats().corrupt_disk_entries, 1);

  // The rebuilt entry serves the next daemon start.
  std::unique_ptr<JitCompiler> next = MakeCompiler({.cache_dir = dir.path()});
  ASSERT_NE(next, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult again, next->Compile(AddRequest(), "sm_90"));
  EXPECT_EQ(again.origin, KernelOrigin::kDisk);
}

INSTANTIATE_TEST_SUITE_P(Damages, JitCorruptDiskEntryTest,
                         ::testing::Values(Damage{"FlippedByte", false}, Damage{"Truncated", true}),
                         [](const ::testing::TestParamInfo<Damage>& info) {
                           return info.param.name;
                         });

TEST_F(JitCompilerTest, EvictsLeastRecentlyUsedKernelsOverTheMemoryBudget) {
  // Room for about two small cubins (a few KiB each).
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult probe, jit_->Compile(AddRequest(), "sm_90"));
  const int64_t budget = probe.kernel->footprint_bytes() * 5 / 2;
  std::unique_ptr<JitCompiler> jit = MakeCompiler({.memory_budget_bytes = budget});
  ASSERT_NE(jit, nullptr);
  std::vector<CompileRequest> requests;
  for (int factor = 1; factor <= 3; ++factor) {
    requests.push_back(
        {.source = kSource, .entries = {"add"}, .options = {absl::StrCat("-DFACTOR=", factor)}});
    ASSERT_THAT(jit->Compile(requests.back(), "sm_90"), IsOk());
  }
  EXPECT_EQ(jit->cache_stats().evictions, 1);
  EXPECT_LE(jit->cache_stats().memory_bytes, budget);
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult oldest, jit->Compile(requests[0], "sm_90"));
  EXPECT_EQ(oldest.origin, KernelOrigin::kCompiled);
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult newest, jit->Compile(requests[2], "sm_90"));
  EXPECT_EQ(newest.origin, KernelOrigin::kMemory);
}

TEST_F(JitCompilerTest, ConcurrentCompilesOfOneKernelCompileOnce) {
  constexpr int kThreads = 4;
  std::vector<std::shared_ptr<const CompiledKernel>> kernels(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<JitResult> result = jit_->Compile(AddRequest(), "sm_90");
      if (result.ok()) kernels[i] = result->kernel;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& kernel : kernels) {
    ASSERT_NE(kernel, nullptr);
    EXPECT_EQ(kernel.get(), kernels[0].get());
  }
  EXPECT_EQ(jit_->cache_stats().compiles, 1);
}

class BadArchTest : public JitCompilerTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(BadArchTest, IsInvalidArgument) {
  EXPECT_THAT(jit_->Compile(AddRequest(), GetParam()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Table, BadArchTest,
                         ::testing::Values("sm_52", "compute_90", "sm_x", "sm_", "90", "sm_9000",
                                           ""));

TEST_F(JitCompilerTest, AcceptsArchitectureVariants) {
  EXPECT_THAT(jit_->CheckArch("sm_90a"), IsOk());
  EXPECT_THAT(jit_->CheckArch("sm_80"), IsOk());
}

TEST_F(JitCompilerTest, RefusedRequestsNeverReachNvrtc) {
  CompileRequest include = AddRequest();
  include.options.push_back("-I/usr/include");
  EXPECT_THAT(jit_->Compile(include, "sm_90"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-I is not allowed")));
  CompileRequest no_entries = AddRequest();
  no_entries.entries.clear();
  EXPECT_THAT(jit_->Compile(no_entries, "sm_90"), StatusIs(absl::StatusCode::kInvalidArgument));
  CompileRequest big = AddRequest();
  big.source.append(std::string(1 << 20, ' '));
  EXPECT_THAT(jit_->Compile(big, "sm_90"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the limit is 1048576")));
  EXPECT_EQ(jit_->cache_stats().compiles, 0);
}

TEST_F(JitCompilerTest, CompileOverTheTimeBudgetIsDeadlineExceededAndNotCached) {
  std::unique_ptr<JitCompiler> jit = MakeCompiler({.compile_time_budget = absl::Nanoseconds(1)});
  ASSERT_NE(jit, nullptr);
  EXPECT_THAT(jit->Compile(AddRequest(), "sm_90"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("budget of 1ns")));
  EXPECT_EQ(jit->cache_stats().memory_entries, 0);
}

TEST_F(JitCompilerTest, RefusesANonPositiveTimeBudget) {
  EXPECT_THAT(JitCompiler::Create({.compile_time_budget = absl::ZeroDuration()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compile_time_budget")));
}

TEST_F(JitCompilerTest, ReportsNvrtcVersionAndArchitectures) {
  EXPECT_THAT(jit_->nvrtc_version(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_THAT(jit_->supported_archs(), ::testing::Contains(90));
  EXPECT_FALSE(jit_->nvrtc_library_path().empty());
}

}  // namespace
}  // namespace gpukit
