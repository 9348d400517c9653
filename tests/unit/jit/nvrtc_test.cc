// The dlopen'd NVRTC wrapper (runtime/jit/nvrtc.h). NVRTC needs no GPU; where it is not
// installed these tests skip, saying so.
#include "runtime/jit/nvrtc.h"

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/jit/library_search.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kKernels[] = R"(
extern "C" __global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
template <typename T>
__global__ void scale(T* a, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] *= s;
}
)";

class NvrtcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Nvrtc>> loaded = Nvrtc::Load(CudaLibrarySearchDirs({}));
    if (!loaded.ok()) GTEST_SKIP() << "NVRTC cannot be loaded here: " << loaded.status();
    nvrtc_ = *std::move(loaded);
  }

  std::unique_ptr<Nvrtc> nvrtc_;
};

TEST(NvrtcLoadTest, MissingLibraryIsFailedPreconditionSayingWhereItLooked) {
  EXPECT_THAT(Nvrtc::Load({"/nonexistent/cuda/lib64"}, {"libnvrtc-gpukit-missing.so.99"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(StartsWith("NVRTC JIT compiler not available ("),
                             HasSubstr("/nonexistent/cuda/lib64/libnvrtc-gpukit-missing.so.99"))));
}

TEST_F(NvrtcTest, ReportsVersionAndArchitectures) {
  EXPECT_GE(nvrtc_->major_version(), 12);
  EXPECT_EQ(nvrtc_->version_string(),
            absl::StrCat(nvrtc_->major_version(), ".", nvrtc_->minor_version()));
  EXPECT_THAT(nvrtc_->supported_archs(), Contains(80));
  EXPECT_THAT(nvrtc_->supported_archs(), Contains(90));
  EXPECT_FALSE(nvrtc_->library_path().empty());
}

TEST_F(NvrtcTest, CompilesToAnElfCubinForSm80AndSm90) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        NvrtcOutput output,
        nvrtc_->Compile(kKernels, {"add", "scale<float>"}, {}, arch, absl::Seconds(60)));
    EXPECT_THAT(output.cubin, StartsWith(std::string("\x7f"
                                                     "ELF",
                                                     4)))
        << arch;
    EXPECT_TRUE(output.ptx.empty());
    EXPECT_THAT(output.lowered_names, ElementsAre("add", "_Z5scaleIfEvPT_S0_i"));
    EXPECT_GT(output.compile_time, absl::ZeroDuration());
  }
}

TEST_F(NvrtcTest, VirtualArchitectureGivesPtx) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      NvrtcOutput output, nvrtc_->Compile(kKernels, {"add"}, {}, "compute_90", absl::Seconds(60)));
  EXPECT_TRUE(output.cubin.empty());
  EXPECT_THAT(output.ptx, HasSubstr(".entry add("));
}

TEST_F(NvrtcTest, SyntaxErrorIsInvalidArgumentWithTheWholeLog) {
  const std::string source = "extern \"C\" __global__ void bad(float* a) {\n  a[0] = oops;\n}\n";
  EXPECT_THAT(nvrtc_->Compile(source, {"bad"}, {}, "sm_90", absl::Seconds(60)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("kernel compilation failed for sm_90"),
                             HasSubstr("kernel.cu(2): error"), HasSubstr("\"oops\""))));
}

TEST_F(NvrtcTest, UnknownEntryNameIsInvalidArgument) {
  EXPECT_THAT(nvrtc_->Compile(kKernels, {"nope"}, {}, "sm_90", absl::Seconds(60)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"nope\" is undefined")));
}

TEST_F(NvrtcTest, OptionsReachTheCompiler) {
  const std::string source =
      "#ifndef N\n#error N is not defined\n#endif\n"
      "extern \"C\" __global__ void k(int* a) { a[0] = N; }\n";
  EXPECT_THAT(nvrtc_->Compile(source, {"k"}, {"-DN=4"}, "sm_90", absl::Seconds(60)),
              ::gpukit::testing::IsOk());
  EXPECT_THAT(nvrtc_->Compile(source, {"k"}, {}, "sm_90", absl::Seconds(60)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("N is not defined")));
}

TEST_F(NvrtcTest, CompileOverItsBudgetIsDeadlineExceeded) {
  EXPECT_THAT(nvrtc_->Compile(kKernels, {"add"}, {}, "sm_90", absl::Nanoseconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("longer than its budget")));
}

TEST_F(NvrtcTest, ConcurrentCompilesOfDifferentProgramsSucceed) {
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<absl::Status> results(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      const std::string source = absl::StrCat(kKernels, "\n// variant ", i, "\n");
      results[i] = nvrtc_->Compile(source, {"add"}, {}, "sm_90", absl::Seconds(60)).status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : results) EXPECT_TRUE(status.ok()) << status;
}

// NVRTC opens libnvrtc-builtins by bare name; Load opens it from libnvrtc's own directory
// first. (Where the loader path also has the toolkit, as on a developer machine, this passes
// either way; run the binary with `ld.so --inhibit-cache` to see the difference.)
TEST_F(NvrtcTest, LoadsFromADirectoryOutsideTheLoaderPath) {
  const std::filesystem::path real_dir =
      std::filesystem::path(nvrtc_->library_path()).parent_path();
  if (real_dir.empty()) GTEST_SKIP() << "NVRTC was found through the loader path";
  ScopedTempDir dir;
  for (const std::string& name :
       {std::string("libnvrtc.so.") + std::to_string(nvrtc_->major_version()),
        absl::StrCat("libnvrtc-builtins.so.", nvrtc_->version_string())}) {
    std::filesystem::create_symlink(real_dir / name, std::filesystem::path(dir.path()) / name);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvrtc> nvrtc, Nvrtc::Load({dir.path()}));
  EXPECT_THAT(nvrtc->library_path(), StartsWith(dir.path()));
  EXPECT_THAT(nvrtc->Compile(kKernels, {"add"}, {}, "sm_90", absl::Seconds(60)),
              ::gpukit::testing::IsOk());
}

}  // namespace
}  // namespace gpukit
