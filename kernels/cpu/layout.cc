// TransposeCpu, EmbeddingCpu and ConcatCpu.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dispatch.h"
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

void EmbeddingCpu(const ConstHostArray& table, const ConstHostArray& indices,
                  const HostArray& out) {
  const int64_t vocab = table.shape[0];
  const size_t row_bytes = static_cast<size_t>(table.shape[1] * DTypeSize(table.dtype));
  const int64_t count = internal::NumElements(indices.shape);
  const std::byte* rows = static_cast<const std::byte*>(table.data);
  std::byte* dst = static_cast<std::byte*>(out.data);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices.dtype == DType::kInt32
                              ? static_cast<const int32_t*>(indices.data)[i]
                              : static_cast<const int64_t*>(indices.data)[i];
    if (row_bytes == 0) continue;
    if (index >= 0 && index < vocab) {
      std::memcpy(dst + i * row_bytes, rows + index * row_bytes, row_bytes);
    } else {
      std::memset(dst + i * row_bytes, 0, row_bytes);  // all-zero bits are 0 in every dtype
    }
  }
}

void ConcatCpu(absl::Span<const ConstHostArray> inputs, int axis, const HostArray& out) {
  const auto dims = absl::MakeConstSpan(out.shape);
  const int64_t outer = internal::NumElements(dims.subspan(0, axis));
  const int64_t inner_bytes = internal::NumElements(dims.subspan(axis + 1)) * DTypeSize(out.dtype);
  const int64_t out_chunk = out.shape[axis] * inner_bytes;
  std::byte* dst = static_cast<std::byte*>(out.data);
  int64_t offset = 0;  // of the current input's slab within an output chunk, in bytes
  for (const ConstHostArray& in : inputs) {
    const int64_t chunk = in.shape[axis] * inner_bytes;
    const std::byte* src = static_cast<const std::byte*>(in.data);
    if (chunk > 0) {
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(dst + o * out_chunk + offset, src + o * chunk, static_cast<size_t>(chunk));
      }
    }
    offset += chunk;
  }
}

}  // namespace gpukit::kernels
