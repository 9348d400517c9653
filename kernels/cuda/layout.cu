// Layout kernels: the device twins of TransposeCpu, EmbeddingCpu and ConcatCpu
// (kernels/cpu/layout.cc). They move elements without looking at them, so there is one
// kernel per element size (<bytes>: 1, 2, 4 or 8).
//
// Kernels:
//   gk_permute_<bytes>(E* out, const E* in, GkPermuteParams p): out (contiguous, shape
//     p.dims) at index j takes in[sum(j[d] * p.in_strides[d])].
//   gk_embedding_<i32|i64>_<bytes>(E* out, const E* table, const I* indices,
//     GkEmbeddingParams p): row n of out is row indices[n] of the table, or zeros for an
//     index outside [0, vocab) (the table is never read out of bounds).
//   gk_concat_<bytes>(E* out, const E* in, GkConcatParams p): copies one input into its
//     slab of every output row.

template <typename E>
__device__ __forceinline__ void gk_permute(E* __restrict__ out, const E* __restrict__ in,
                                           const GkPermuteParams& p) {
  GK_FOR_EACH(i, p.count) {
    gk_int64 offset = 0;
    gk_int64 rest = i;
    for (int d = p.rank - 1; d >= 0; --d) {
      offset += (rest % p.dims[d]) * p.in_strides[d];
      rest /= p.dims[d];
    }
    out[i] = in[offset];
  }
}

extern "C" __global__ void gk_permute_1(gk_uint8* out, const gk_uint8* in, GkPermuteParams p) {
  gk_permute(out, in, p);
}
extern "C" __global__ void gk_permute_2(unsigned short* out, const unsigned short* in,
                                        GkPermuteParams p) {
  gk_permute(out, in, p);
}
extern "C" __global__ void gk_permute_4(gk_uint32* out, const gk_uint32* in, GkPermuteParams p) {
  gk_permute(out, in, p);
}
extern "C" __global__ void gk_permute_8(gk_uint64* out, const gk_uint64* in, GkPermuteParams p) {
  gk_permute(out, in, p);
}

template <typename E, typename I>
__device__ __forceinline__ void gk_embedding(E* __restrict__ out, const E* __restrict__ table,
                                             const I* __restrict__ indices,
                                             const GkEmbeddingParams& p) {
  GK_FOR_EACH(t, p.count * p.dim) {
    const gk_int64 n = t / p.dim;
    const gk_int64 j = t % p.dim;
    const gk_int64 index = indices[n];
    out[t] = index >= 0 && index < p.vocab ? table[index * p.dim + j] : E(0);
  }
}

template <typename E>
__device__ __forceinline__ void gk_concat(E* __restrict__ out, const E* __restrict__ in,
                                          const GkConcatParams& p) {
  GK_FOR_EACH(t, p.outer * p.in_chunk) {
    const gk_int64 o = t / p.in_chunk;
    const gk_int64 j = t % p.in_chunk;
    out[o * p.out_chunk + p.offset + j] = in[t];
  }
}

#define GK_GATHER_KERNELS(bytes, E)                                                          \
  extern "C" __global__ void gk_embedding_i32_##bytes(E* out, const E* table,                \
                                                      const gk_int32* indices,               \
                                                      GkEmbeddingParams p) {                 \
    gk_embedding<E, gk_int32>(out, table, indices, p);                                       \
  }                                                                                          \
  extern "C" __global__ void gk_embedding_i64_##bytes(E* out, const E* table,                \
                                                      const gk_int64* indices,               \
                                                      GkEmbeddingParams p) {                 \
    gk_embedding<E, gk_int64>(out, table, indices, p);                                       \
  }                                                                                          \
  extern "C" __global__ void gk_concat_##bytes(E* out, const E* in, GkConcatParams p) {      \
    gk_concat<E>(out, in, p);                                                                \
  }
GK_GATHER_KERNELS(1, gk_uint8)
GK_GATHER_KERNELS(2, unsigned short)
GK_GATHER_KERNELS(4, gk_uint32)
GK_GATHER_KERNELS(8, gk_uint64)
