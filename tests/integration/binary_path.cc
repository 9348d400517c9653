#include "tests/integration/binary_path.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace gpukit::testing {
namespace {

bool IsExecutableFile(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string FindBinary(const std::string& build_path) {
  if (IsExecutableFile(build_path)) return build_path;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return build_path;
  const std::filesystem::path beside =
      self.parent_path() / std::filesystem::path(build_path).filename();
  return IsExecutableFile(beside) ? beside.string() : build_path;
}

}  // namespace gpukit::testing
