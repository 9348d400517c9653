// record_smid, a JIT kernel for tests that check which SMs a stream's kernels run on: thread
// 0 of each block writes the SM it runs on (%smid) and spins for `spin_cycles`, so that a
// grid of many blocks spreads over every SM its stream may use.
#ifndef GPUKIT_TESTS_GPU_RECORD_SMID_KERNEL_H_
#define GPUKIT_TESTS_GPU_RECORD_SMID_KERNEL_H_

namespace gpukit::testing {

inline constexpr char kRecordSmidSource[] = R"(
extern "C" __global__ void record_smid(unsigned int* smids, long long spin_cycles) {
  if (threadIdx.x == 0) {
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    smids[blockIdx.x] = smid;
    const long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
  }
  __syncthreads();
}
)";

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_GPU_RECORD_SMID_KERNEL_H_
