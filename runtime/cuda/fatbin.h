// Reading a CUDA fatbin's table of contents: which SASS (ELF) and PTX images it holds, for
// which architectures. The CUDA backend uses it to tell, before loading anything, whether a
// precompiled built-in module (kernels/cuda/embedded_kernels.h) can run on its GPU and how
// (its own SASS, or PTX the driver JIT-compiles); tests use it to check what the build
// embedded.
//
// The container is what nvcc -fatbin writes (and cuModuleLoadData takes): a 16-byte header
// (magic 0xBA55ED50, version 1, header size, size of the images that follow), then one
// header per image, each followed by its payload, possibly compressed. Only the headers are
// read; no payload is decompressed. NVIDIA does not document the layout: the fields read here
// (kind, sizes, architecture, compression flags) are where CUDA 12 and 13's nvcc put them, as
// open-source fatbin readers (e.g. ZLUDA's) read them, and tests/unit/runtime/fatbin_test.cc
// checks them against the fatbins the build embeds.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::vector<FatbinImage> images, ParseFatbin(fatbin));
//   if (FatbinRunsOn(images, 9, 0) == FatbinFit::kSass) { ... }
//
// Cost: one pass over the headers (a few per architecture). Thread safety: pure functions.
#ifndef GPUKIT_RUNTIME_CUDA_FATBIN_H_
#define GPUKIT_RUNTIME_CUDA_FATBIN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpukit {

struct FatbinImage {
  enum class Kind { kPtx, kElf };
  Kind kind = Kind::kElf;
  int arch = 0;  // SM number: 90 for sm_90 SASS or compute_90 PTX
  bool compressed = false;
  int64_t payload_bytes = 0;  // as stored (compressed when `compressed`)
};

// The images of `fatbin`, in order. INVALID_ARGUMENT naming the offset when it is not a
// fatbin (wrong magic or version), when a header or payload runs past the end, or when an
// image's kind is neither PTX nor ELF.
absl::StatusOr<std::vector<FatbinImage>> ParseFatbin(absl::string_view fatbin);

// How a GPU of compute capability major.minor runs a module of `images`, following CUDA's
// compatibility rules: SASS built for major.m with m <= minor runs as it is; otherwise PTX
// for an architecture at or below the GPU's is JIT-compiled by the driver; otherwise nothing.
enum class FatbinFit { kSass, kPtx, kNone };
FatbinFit FatbinRunsOn(absl::Span<const FatbinImage> images, int sm_major, int sm_minor);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_FATBIN_H_
