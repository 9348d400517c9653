#include "runtime/jit/library_search.h"

#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpukit {
namespace {

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool IsDirectory(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

// Existing directories matching a glob(3) pattern, sorted (glob sorts them).
std::vector<std::string> GlobDirectories(const std::string& pattern) {
  std::vector<std::string> dirs;
  glob_t matches{};
  if (glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &matches) == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      if (IsDirectory(matches.gl_pathv[i])) dirs.emplace_back(matches.gl_pathv[i]);
    }
  }
  globfree(&matches);
  return dirs;
}

// <bin>/../lib for the running executable, when it exists.
std::string BundleLibDir() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  const std::filesystem::path lib = (exe.parent_path().parent_path() / "lib").lexically_normal();
  return IsDirectory(lib.string()) ? lib.string() : "";
}

std::vector<std::string> PythonWheelDirs() {
  // Each prefix holds python3.X/site-packages or dist-packages; Debian's own Python uses
  // /usr/lib/python3/dist-packages.
  std::vector<std::string> lib_roots = {"/usr/lib", "/usr/local/lib"};
  if (const std::string home = GetEnv("HOME"); !home.empty()) {
    lib_roots.push_back(home + "/.local/lib");
  }
  if (const std::string venv = GetEnv("VIRTUAL_ENV"); !venv.empty()) {
    lib_roots.push_back(venv + "/lib");
  }
  std::vector<std::string> dirs;
  for (const std::string& root : lib_roots) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      for (std::string& dir :
           GlobDirectories(absl::StrCat(root, "/python3*/", packages, "/nvidia/*/lib"))) {
        dirs.push_back(std::move(dir));
      }
    }
  }
  return dirs;
}

}  // namespace

std::vector<std::string> CudaLibrarySearchDirs(const LibrarySearchOptions& options) {
  std::vector<std::string> candidates;
  if (!options.explicit_dir.empty()) candidates.push_back(options.explicit_dir);
  if (std::string bundle = BundleLibDir(); !bundle.empty()) candidates.push_back(bundle);
  if (const std::string cuda_home = GetEnv("CUDA_HOME"); !cuda_home.empty()) {
    if (IsDirectory(cuda_home + "/lib64")) candidates.push_back(cuda_home + "/lib64");
  }
  if (IsDirectory("/usr/local/cuda/lib64")) candidates.push_back("/usr/local/cuda/lib64");
  for (std::string& dir : PythonWheelDirs()) candidates.push_back(std::move(dir));

  std::vector<std::string> dirs;
  for (std::string& dir : candidates) {
    if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(std::move(dir));
  }
  return dirs;
}

absl::StatusOr<DynamicLibrary> OpenFirstLibrary(const std::vector<std::string>& names,
                                                const std::vector<std::string>& search_dirs) {
  std::vector<std::string> failures;
  for (const std::string& name : names) {
    absl::StatusOr<DynamicLibrary> library = DynamicLibrary::Open(name, search_dirs);
    if (library.ok()) return library;
    failures.emplace_back(library.status().message());
  }
  return absl::NotFoundError(absl::StrJoin(failures, "; "));
}

}  // namespace gpukit
