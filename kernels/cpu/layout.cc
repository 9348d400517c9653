// TransposeCpu.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/strided_loop.h"

namespace gpukit::kernels {
namespace {

using internal::ForEachRun;
using internal::StridedRun;

// A transpose moves elements without looking at them, so it is instantiated per element size,
// not per dtype. memcpy of a constant size compiles to one load and store, and unlike a cast
// to an integer pointer it does not alias a float buffer through another type.
template <size_t kBytes>
void PermutedCopy(const void* in, absl::Span<const int64_t> out_shape,
                  const std::vector<int64_t>& in_strides, void* out) {
  const std::byte* in_bytes = static_cast<const std::byte*>(in);
  std::byte* out_bytes = static_cast<std::byte*>(out);
  ForEachRun(out_shape, {&in_strides, 1}, [&](const StridedRun& run) {
    std::byte* dst = out_bytes + run.out_offset * kBytes;
    const std::byte* src = in_bytes + run.in_offsets[0] * kBytes;
    const int64_t stride = run.in_strides[0];
    if (stride == 1) {  // dimensions the permutation keeps in order, merged into one run
      std::memcpy(dst, src, static_cast<size_t>(run.length) * kBytes);
      return;
    }
    for (int64_t j = 0; j < run.length; ++j) {
      std::memcpy(dst + j * kBytes, src + j * stride * kBytes, kBytes);
    }
  });
}

}  // namespace

void TransposeCpu(const ConstHostArray& in, absl::Span<const int> perm, const HostArray& out) {
  // Output dimension j walks input dimension perm[j].
  const std::vector<int64_t> contiguous = ContiguousStrides(in.shape);
  std::vector<int64_t> in_strides(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) in_strides[j] = contiguous[perm[j]];

  switch (DTypeSize(in.dtype)) {
    case 1:
      return PermutedCopy<1>(in.data, out.shape, in_strides, out.data);
    case 2:
      return PermutedCopy<2>(in.data, out.shape, in_strides, out.data);
    case 4:
      return PermutedCopy<4>(in.data, out.shape, in_strides, out.data);
    case 8:
      return PermutedCopy<8>(in.data, out.shape, in_strides, out.data);
  }
}

}  // namespace gpukit::kernels
