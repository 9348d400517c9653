// DynamicLibrary: a dlopen'd shared library, closed when the object dies.
//
// gpukit links no CUDA library at build time: libcuda, libnvrtc and libcublasLt are opened
// at run time so one binary runs on hosts with and without NVIDIA software.
//
//   GPUKIT_ASSIGN_OR_RETURN(DynamicLibrary cuda, DynamicLibrary::Open("libcuda.so.1", {}));
//   GPUKIT_ASSIGN_OR_RETURN(void* fn, cuda.Symbol("cuInit"));
//
// Thread safety: Symbol may be called concurrently; the object is move-only.
#ifndef GPUKIT_RUNTIME_DYNAMIC_LIBRARY_H_
#define GPUKIT_RUNTIME_DYNAMIC_LIBRARY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

class DynamicLibrary {
 public:
  // Tries each directory of `search_dirs` in order (dir/name), then `name` through the
  // system loader path. Each attempt is logged at debug level. NOT_FOUND lists every
  // attempt with dlerror()'s reason.
  static absl::StatusOr<DynamicLibrary> Open(absl::string_view name,
                                             const std::vector<std::string>& search_dirs);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  // NOT_FOUND if the library has no such symbol.
  absl::StatusOr<void*> Symbol(const char* name) const;

  // The path it was opened from.
  const std::string& path() const { return path_; }

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_DYNAMIC_LIBRARY_H_
