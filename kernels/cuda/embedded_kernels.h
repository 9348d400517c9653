// The built-in device kernel sources (kernels/cuda/*.cu), embedded in the binary at build
// time so that a GPU host needs nothing but the driver and NVRTC to run them.
//
// Each source is the text NVRTC compiles as one module: op_params.h, prelude.cuh and the
// .cu file, in that order. The CUDA backend compiles a module on its first use through the
// JIT compiler and its cache, and finds kernels in it by name (see each .cu file's header).
//
//   for (const EmbeddedKernelSource& s : EmbeddedKernelSources()) Compile(s.name, s.text);
//
// Thread safety: immutable data.
#ifndef GPUKIT_KERNELS_CUDA_EMBEDDED_KERNELS_H_
#define GPUKIT_KERNELS_CUDA_EMBEDDED_KERNELS_H_

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpukit::kernels {

struct EmbeddedKernelSource {
  absl::string_view name;  // the .cu file's name without extension: "binary", "reduce", ...
  absl::string_view text;
};

absl::Span<const EmbeddedKernelSource> EmbeddedKernelSources();

}  // namespace gpukit::kernels

#endif  // GPUKIT_KERNELS_CUDA_EMBEDDED_KERNELS_H_
