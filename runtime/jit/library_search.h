// Where gpukit looks for the CUDA libraries it opens at run time (libnvrtc, libcublasLt).
//
// gpukit links no CUDA library; the JIT compiler and cuBLASLt are dlopen'd. The search
// order is fixed and every step is logged at debug level by DynamicLibrary:
//   1. an explicit directory (flag or config), when one is set;
//   2. the bundle's own lib/ (the directory of /proc/self/exe, then ../lib);
//   3. the CUDA toolkit: $CUDA_HOME/lib64 when CUDA_HOME is set, then /usr/local/cuda/lib64;
//   4. the nvidia-* Python wheels that PyTorch installs: <site-packages>/nvidia/*/lib for
//      each site-packages or dist-packages directory of /usr/lib/python3*,
//      /usr/local/lib/python3*, ~/.local/lib/python3* and $VIRTUAL_ENV/lib/python3*;
//   5. the system loader path (LD_LIBRARY_PATH, ld.so.cache), which DynamicLibrary::Open
//      always tries after the directories it is given.
// libcuda is not searched for this way: it always comes from the installed driver.
//
//   LibrarySearchOptions options;
//   options.explicit_dir = flags.cuda_lib_dir;
//   GPUKIT_ASSIGN_OR_RETURN(
//       DynamicLibrary nvrtc,
//       OpenFirstLibrary({"libnvrtc.so.13", "libnvrtc.so.12"}, CudaLibrarySearchDirs(options)));
//
// Thread safety: both functions are thread-safe; CudaLibrarySearchDirs reads the
// environment, so do not call it while another thread changes it.
#ifndef GPUKIT_RUNTIME_JIT_LIBRARY_SEARCH_H_
#define GPUKIT_RUNTIME_JIT_LIBRARY_SEARCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/dynamic_library.h"

namespace gpukit {

struct LibrarySearchOptions {
  // Searched first when not empty, whether or not it exists (so that a mistyped setting
  // shows up in the failure message).
  std::string explicit_dir;
};

// The directories of steps 1 to 4 above, in order, without duplicates. Steps 2 to 4 list
// only directories that exist.
std::vector<std::string> CudaLibrarySearchDirs(const LibrarySearchOptions& options);

// Opens the first of `names` that loads from `search_dirs` (or, failing those, through the
// system loader path): every directory is tried for names[0] before names[1] is tried, so
// a newer major version anywhere wins over an older one. NOT_FOUND lists every attempt.
absl::StatusOr<DynamicLibrary> OpenFirstLibrary(const std::vector<std::string>& names,
                                                const std::vector<std::string>& search_dirs);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_LIBRARY_SEARCH_H_
