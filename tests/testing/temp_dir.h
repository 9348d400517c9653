// ScopedTempDir: a fresh directory under $TMPDIR (or /tmp), removed with its contents when the
// object dies.
//
//   ScopedTempDir dir;
//   const std::string path = dir.path() + "/gpukitd.json";
//
// Thread safety: one owner; the path may be read from any thread.
#ifndef GPUKIT_TESTS_TESTING_TEMP_DIR_H_
#define GPUKIT_TESTS_TESTING_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace gpukit::testing {

class ScopedTempDir {
 public:
  ScopedTempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gpukit-test-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp(" << pattern << ") failed";
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ~ScopedTempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }

  // Writes `contents` to path()/name (creating parent directories) and returns the full path.
  std::string WriteFile(const std::string& name, const std::string& contents) const {
    const std::filesystem::path file = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << contents;
    return file.string();
  }

 private:
  std::string path_;
};

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_TESTING_TEMP_DIR_H_
