// Layout kernels: the device twin of TransposeCpu (kernels/cpu/layout.cc). A permutation
// moves elements without looking at them, so there is one kernel per element size.
//
// Kernels: gk_permute_<bytes>(E* out, const E* in, GkPermuteParams p) for 1, 2, 4 and 8
// bytes: out (contiguous, shape p.dims) at index j takes in[sum(j[d] * p.in_strides[d])].

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
