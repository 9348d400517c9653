// Where CUDA libraries are looked for (runtime/jit/library_search.h).
#include "runtime/jit/library_search.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedEnv;
using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::ptrdiff_t IndexOf(const std::vector<std::string>& dirs, const std::string& dir) {
  auto it = std::find(dirs.begin(), dirs.end(), dir);
  return it == dirs.end() ? -1 : it - dirs.begin();
}

std::string MakeDir(const ScopedTempDir& root, const std::string& relative) {
  std::string path = root.path() + "/" + relative;
  std::filesystem::create_directories(path);
  return path;
}

TEST(CudaLibrarySearchDirsTest, ExplicitDirectoryComesFirstEvenWhenMissing) {
  const std::vector<std::string> dirs =
      CudaLibrarySearchDirs({.explicit_dir = "/nonexistent/cuda/lib"});
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs[0], "/nonexistent/cuda/lib");
}

TEST(CudaLibrarySearchDirsTest, WithoutExplicitDirectoryListsOnlyExistingOnes) {
  for (const std::string& dir : CudaLibrarySearchDirs({})) {
    EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  }
}

TEST(CudaLibrarySearchDirsTest, ToolkitIsListedWhenInstalled) {
  if (!std::filesystem::is_directory("/usr/local/cuda/lib64")) {
    GTEST_SKIP() << "no CUDA toolkit at /usr/local/cuda";
  }
  EXPECT_THAT(CudaLibrarySearchDirs({}), Contains("/usr/local/cuda/lib64"));
}

TEST(CudaLibrarySearchDirsTest, CudaHomeComesBeforeTheDefaultToolkit) {
  ScopedTempDir root;
  const std::string lib64 = MakeDir(root, "cuda-12.4/lib64");
  ScopedEnv cuda_home("CUDA_HOME", root.path() + "/cuda-12.4");
  const std::vector<std::string> dirs = CudaLibrarySearchDirs({.explicit_dir = "/explicit"});
  EXPECT_EQ(IndexOf(dirs, "/explicit"), 0);
  ASSERT_GE(IndexOf(dirs, lib64), 1);
  const std::ptrdiff_t toolkit = IndexOf(dirs, "/usr/local/cuda/lib64");
  if (toolkit >= 0) {
    EXPECT_LT(IndexOf(dirs, lib64), toolkit);
  }
}

TEST(CudaLibrarySearchDirsTest, ListsEachDirectoryOnce) {
  ScopedEnv cuda_home("CUDA_HOME", "/usr/local/cuda/");
  const std::vector<std::string> dirs =
      CudaLibrarySearchDirs({.explicit_dir = "/usr/local/cuda/lib64"});
  for (const std::string& dir : dirs) {
    EXPECT_EQ(std::count(dirs.begin(), dirs.end(), dir), 1) << dir;
  }
}

TEST(CudaLibrarySearchDirsTest, FindsPythonWheelLibrariesAfterTheToolkit) {
  ScopedTempDir home;
  const std::string cu13 = MakeDir(home, ".local/lib/python3.12/site-packages/nvidia/cu13/lib");
  const std::string nvrtc =
      MakeDir(home, ".local/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib");
  MakeDir(home, ".local/lib/python3.12/site-packages/nvidia/nolib");
  ScopedTempDir venv;
  const std::string cublas = MakeDir(venv, "lib/python3.11/site-packages/nvidia/cublas/lib");
  ScopedEnv home_env("HOME", home.path());
  ScopedEnv venv_env("VIRTUAL_ENV", venv.path());

  const std::vector<std::string> dirs = CudaLibrarySearchDirs({});
  EXPECT_THAT(dirs, Contains(cu13));
  EXPECT_THAT(dirs, Contains(nvrtc));
  EXPECT_THAT(dirs, Contains(cublas));
  EXPECT_THAT(dirs,
              Not(Contains(home.path() + "/.local/lib/python3.12/site-packages/nvidia/nolib")));
  const std::ptrdiff_t toolkit = IndexOf(dirs, "/usr/local/cuda/lib64");
  if (toolkit >= 0) {
    EXPECT_GT(IndexOf(dirs, cu13), toolkit);
  }
}

TEST(OpenFirstLibraryTest, FallsBackToTheNextName) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      DynamicLibrary library,
      OpenFirstLibrary({"libgpukit-does-not-exist.so.1", "libm.so.6"}, {"/nonexistent"}));
  EXPECT_EQ(library.path(), "libm.so.6");
}

TEST(OpenFirstLibraryTest, NotFoundListsEveryAttempt) {
  EXPECT_THAT(OpenFirstLibrary({"libgpukit-a.so", "libgpukit-b.so"}, {"/nonexistent/dir"}),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("/nonexistent/dir/libgpukit-a.so"),
                                        HasSubstr("/nonexistent/dir/libgpukit-b.so"),
                                        HasSubstr("cannot load libgpukit-b.so"))));
}

}  // namespace
}  // namespace gpukit
