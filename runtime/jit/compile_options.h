// What a client may ask of the JIT compiler: an allow-list of NVRTC options, and bounds on
// the source and the entry names.
//
// Kernel source comes from clients, so NVRTC only sees options that cannot reach outside
// the source (no -I, no --pre-include), cannot change the target (the daemon sets
// --gpu-architecture from the device), and cannot make the compiler write files. Options
// are normalised to one spelling each, deduplicated and sorted, which makes them usable in
// the kernel cache's key; two options that contradict each other (--fmad=true and
// --fmad=false, -DN=1 and -DN=2) are refused rather than resolved by order, so that
// sorting never changes meaning.
//
// Allowed, with the spelling they are normalised to:
//   -DNAME, -DNAME=VALUE, -D NAME[=VALUE] (two arguments), --define-macro=NAME[=VALUE]
//                                                      -> -DNAME[=VALUE]
//   --use_fast_math, -use_fast_math                    -> --use_fast_math
//   -std=c++17|c++20, --std=...                        -> --std=c++17|c++20
//   --fmad=, --ftz=, --prec-div=, --prec-sqrt= with true|false (also with one dash)
//   -lineinfo, --generate-line-info                    -> --generate-line-info
//   --restrict, -restrict                              -> --restrict
//   --extra-device-vectorization (also with one dash)  -> --extra-device-vectorization
//   -default-device, --device-as-default-execution-space
//                                                      -> --device-as-default-execution-space
//
//   GPUKIT_ASSIGN_OR_RETURN(std::vector<std::string> options,
//                           NormalizeCompileOptions({"-DN=4", "--use_fast_math"}, limits));
//   // options == {"--use_fast_math", "-DN=4"}
//
// Thread safety: pure functions.
#ifndef GPUKIT_RUNTIME_JIT_COMPILE_OPTIONS_H_
#define GPUKIT_RUNTIME_JIT_COMPILE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

struct CompileLimits {
  // 1 MiB: far above any hand-written kernel, small enough that a compile request cannot
  // tie up NVRTC on megabytes of generated code.
  int64_t max_source_bytes = int64_t{1} << 20;
  int max_options = 64;
  int max_entries = 64;
  // Named headers a request may carry (their text counts towards max_source_bytes).
  int max_headers = 64;
};

// The allow-listed, normalised, deduplicated and sorted form of `options`. Each refusal is
// INVALID_ARGUMENT naming the option: -I / --include-path ("kernels are compiled from source
// alone"), -arch / --gpu-architecture (set by the daemon), anything not on the list, a bad
// value, two contradicting options, more than limits.max_options options.
absl::StatusOr<std::vector<std::string>> NormalizeCompileOptions(
    const std::vector<std::string>& options, const CompileLimits& limits);

// INVALID_ARGUMENT when the source is empty, longer than limits.max_source_bytes ("kernel
// source is N bytes; the limit is M") or holds a NUL byte.
absl::Status ValidateKernelSource(absl::string_view source, const CompileLimits& limits);

// INVALID_ARGUMENT unless every header has a name of 1 to 256 bytes of printable ASCII that
// is not repeated and text without NUL bytes, there are at most limits.max_headers, and the
// source and the headers' texts together fit limits.max_source_bytes.
absl::Status ValidateKernelHeaders(absl::string_view source,
                                   const std::vector<std::pair<std::string, std::string>>& headers,
                                   const CompileLimits& limits);

// INVALID_ARGUMENT unless there are 1 to limits.max_entries names, distinct, each a C
// identifier or an NVRTC name expression for a kernel: a possibly qualified name with
// template arguments, such as "add", "ops::scale<float>" or "tile<float, 16>".
absl::Status ValidateEntryNames(const std::vector<std::string>& entries,
                                const CompileLimits& limits);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_COMPILE_OPTIONS_H_
