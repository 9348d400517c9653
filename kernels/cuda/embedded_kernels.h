// The built-in device kernel sources (kernels/cuda/*.cu), embedded in the binary at build
// time so that a GPU host needs nothing but the driver and NVRTC to run them, and, where the
// build had nvcc (GPUKIT_PRECOMPILE_KERNELS), each module precompiled into a fatbin, so that
// it needs nothing but the driver.
//
// Each source is the text NVRTC compiles as one module: op_params.h, prelude.cuh and the
// .cu file, in that order; nvcc compiled the same text, with NVRTC's default options, into
// the module's fatbin: SASS for each architecture of PrecompiledKernelTargets() and PTX for
// the newest, which the driver JIT-compiles for later GPUs. The CUDA backend loads a module
// on its first use from its fatbin when the GPU can run it, else compiles the source through
// the JIT compiler and its cache, and finds kernels in it by name (see each .cu file's
// header).
//
//   for (const EmbeddedKernelSource& s : EmbeddedKernelSources()) {
//     image = s.fatbin.empty() ? Compile(s.name, s.text) : s.fatbin;
//   }
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
  // The module precompiled by nvcc (a fatbin: cuModuleLoadData takes it whole); empty when
  // the build did not precompile.
  absl::string_view fatbin;
};

absl::Span<const EmbeddedKernelSource> EmbeddedKernelSources();

// What the fatbins hold (GPUKIT_KERNEL_ARCHS at build time): SASS for each of `sass_archs`
// (SM numbers, ascending: 80, 86, ...) and PTX for `ptx_arch` (the newest). Empty and 0 when
// the build did not precompile.
struct PrecompiledTargets {
  absl::Span<const int> sass_archs;
  int ptx_arch = 0;
};
PrecompiledTargets PrecompiledKernelTargets();

}  // namespace gpukit::kernels

#endif  // GPUKIT_KERNELS_CUDA_EMBEDDED_KERNELS_H_
