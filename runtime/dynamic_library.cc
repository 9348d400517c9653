#include "runtime/dynamic_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::StatusOr<DynamicLibrary> DynamicLibrary::Open(absl::string_view name,
                                                    const std::vector<std::string>& search_dirs) {
  std::vector<std::string> candidates;
  for (const std::string& dir : search_dirs) candidates.push_back(absl::StrCat(dir, "/", name));
  candidates.emplace_back(name);  // the system loader path
  std::vector<std::string> failures;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      spdlog::debug("loaded {} from {}", std::string(name), path);
      return DynamicLibrary(handle, path);
    }
    const char* error = dlerror();
    spdlog::debug("could not load {}: {}", path, error != nullptr ? error : "unknown error");
    failures.push_back(error != nullptr ? error : path);
  }
  return absl::NotFoundError(
      absl::StrCat("cannot load ", name, ": ", absl::StrJoin(failures, "; ")));
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

absl::StatusOr<void*> DynamicLibrary::Symbol(const char* name) const {
  dlerror();
  void* symbol = dlsym(handle_, name);
  if (symbol == nullptr) {
    return absl::NotFoundError(absl::StrCat("symbol ", name, " not found in ", path_));
  }
  return symbol;
}

}  // namespace gpukit
