// CublasLtMatmul: float32, float16 and bfloat16 matmuls through NVIDIA's cuBLASLt, which is
// opened with dlopen like every CUDA library gpukit uses.
//
// libcublasLt.so.13, else libcublasLt.so.12, is looked for where runtime/jit/
// library_search.h says (the bundle's lib/, the CUDA toolkit, PyTorch's nvidia-* wheels,
// the loader path); the handful of cublasLt* entry points used are taken with dlsym, and
// cublasLt.h is read for its types only. The library stays loaded for the life of the
// process once found. Without it, Create fails with FAILED_PRECONDITION "cuBLASLt not
// available (...)" and the CUDA device runs matmul on gpukit's own kernel (it logs that).
//
// What it computes (row-major arrays; runtime/cuda/matmul_plan.h says how they are put to
// cuBLASLt's column-major GEMM): out = op(a) @ op(b), batched with a stride per input
// (0 broadcasts one matrix), optionally + bias and GELU (tanh approximation) in cuBLASLt's
// epilogue. Accumulation is float32 for every dtype (CUBLAS_COMPUTE_32F, scale type float);
// float32 inputs are rounded to TF32 by the tensor cores only when the shape says
// allow_tf32 (CUBLAS_COMPUTE_32F_FAST_TF32), never otherwise. (CUBLAS_COMPUTE_32F is full
// float32 unless the process sets cuBLAS's own override, NVIDIA_TF32_OVERRIDE or the
// CUBLAS_EMULATE_* variables; gpukit sets none.)
//
// Plans: the first matmul of a shape (MatmulKey: the shape, pointer alignments, workspace)
// creates the descriptors and layouts and asks cuBLASLt's heuristic for an algorithm, tens
// of microseconds; the plan is cached (at most kMaxPlans, then the cache starts over) and
// later matmuls of the key only enqueue.
//
// Workspace: the caller passes one, up to kWorkspaceBytes, on the stream it enqueues on.
// A workspace may be shared only by matmuls of one stream (stream order keeps them apart);
// the CUDA device keeps one per stream (CudaDevice, like BuiltinOpRunner::Scratch).
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CublasLtMatmul> blas,
//                           CublasLtMatmul::Create(CudaLibrarySearchDirs({})));
//   MatmulShape shape{.dtype = DType::kBFloat16, .m = 1024, .n = 1024, .k = 1024};
//   GPUKIT_RETURN_IF_ERROR(blas->Matmul(stream, shape, {.a = a, .b = b, .out = out,
//       .workspace = ws, .workspace_bytes = CublasLtMatmul::kWorkspaceBytes}));
//
// Thread safety: Matmul may be called from any thread, with the CUDA context it was created
// in current on that thread (cuBLASLt works in the current context). Plans are made and
// found under a mutex; one plan's descriptor is used by one call at a time (its bias
// pointer is set per call), so two matmuls of one key enqueue one after the other, which
// costs microseconds; their GPU work is not serialised.
#ifndef GPUKIT_RUNTIME_CUDA_CUBLASLT_H_
#define GPUKIT_RUNTIME_CUDA_CUBLASLT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/cuda/matmul_plan.h"

struct CUstream_st;  // cuda.h's CUstream (= cudaStream_t), kept opaque here

namespace gpukit {

struct CublasLtApi;  // the resolved entry points (cublaslt.cc)

// The library file names tried, newest first: libcublasLt.so.13, libcublasLt.so.12.
std::vector<std::string> CublasLtLibraryNames();

struct CublasLtLibrary {
  std::string path;  // where it was found
  // cublasLtGetVersion(): major * 10000 + minor * 100 + patch, e.g. 130100 for 13.1.0.
  int64_t version = 0;
};

// Opens libcublasLt (once per process; later calls return the library already open and
// ignore `search_dirs`) and resolves its entry points. FAILED_PRECONDITION "cuBLASLt not
// available (...)" listing every place it looked, or the entry point that is missing.
absl::StatusOr<CublasLtLibrary> LoadCublasLt(const std::vector<std::string>& search_dirs);

// A cuBLASLt tile's size, m x n of its column-major D (CUBLASLT_MATMUL_TILE_<m>x<n>).
struct CublasLtTile {
  int32_t m = 0;
  int32_t n = 0;
};

// The size of tile `id` as the cublasLt.h of this build names it; nullopt for an id that
// header does not have (a newer library's) or CUBLASLT_MATMUL_TILE_UNDEFINED.
std::optional<CublasLtTile> CublasLtTileSize(uint32_t id);

// Device addresses for one matmul. `bias` (n elements of the shape's dtype) is required
// by the bias epilogues and ignored otherwise.
struct MatmulBuffers {
  uint64_t a = 0;
  uint64_t b = 0;
  uint64_t out = 0;
  uint64_t bias = 0;
  uint64_t workspace = 0;  // may be 0 with workspace_bytes 0: fewer algorithms qualify
  uint64_t workspace_bytes = 0;
};

class CublasLtMatmul {
 public:
  // Workspace per stream: what NVIDIA recommends for Hopper (32 MiB; 4 MiB is enough for
  // Ampere).
  static constexpr uint64_t kWorkspaceBytes = uint64_t{32} << 20;
  // Cached plans before the cache starts over (each holds four small host descriptors).
  static constexpr size_t kMaxPlans = 1024;

  // Loads the library (LoadCublasLt) and creates a cuBLASLt handle; the CUDA context the
  // matmuls will run in must be current. FAILED_PRECONDITION "cuBLASLt not available
  // (...)" without the library; the handle's error otherwise.
  // `multiprocessor_count`, the GPU's SMs (0: not known), lets slices follow the waves of
  // the algorithm's tiles (matmul_plan.h, MatmulGrid); without it they are cut by FLOPs.
  static absl::StatusOr<std::unique_ptr<CublasLtMatmul>> Create(
      const std::vector<std::string>& search_dirs, int multiprocessor_count = 0);

  // Destroys the cached plans and the handle; work already enqueued is unaffected, but the
  // context must still exist.
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  const CublasLtLibrary& library() const { return library_; }

  // Enqueues out = epilogue(op(a) @ op(b)) on `stream` and returns; nothing waits. With
  // `max_slice_flops` > 0, a shape that may be sliced (MatmulMaySlice) and is larger runs as
  // slices of about that many FLOPs, or of one wave of its tiles where that is more
  // (PlanMatmulSlices), one cuBLASLt call each, all enqueued now: work of higher-priority
  // streams runs between them. The output is bitwise the same either way (matmul_plan.h says
  // why); where cuBLASLt cannot run a slice with the shape's algorithm it runs whole.
  // `multiprocessors` > 0: the SMs `stream` runs on (a green context's), where its waves are
  // counted; 0: the GPU's (Create's `multiprocessor_count`).
  // INVALID_ARGUMENT for a shape ValidateMatmulShape rejects, a null a, b or out, a bias
  // epilogue without a bias, or more workspace than kWorkspaceBytes. UNIMPLEMENTED when
  // cuBLASLt has no algorithm for the case (it answers so for some broadcast batches and
  // alignments, and on GPUs it does not support): the caller runs its fallback, and the
  // answer is cached like a plan. Other cuBLASLt errors carry the call and the status name:
  // "cublasLtMatmul: CUBLAS_STATUS_EXECUTION_FAILED (...)".
  absl::Status Matmul(CUstream_st* stream, const MatmulShape& shape, const MatmulBuffers& buffers,
                      double max_slice_flops = 0, int multiprocessors = 0);

  // How Matmul runs `shape` with these buffers, `max_slice_flops` and `multiprocessors`: its
  // slices (count 1: whole) and the grid of the algorithm they are cut along, with the SMs
  // they were counted on. Makes the plan when there is none; INVALID_ARGUMENT for a shape
  // ValidateMatmulShape rejects, UNIMPLEMENTED where cuBLASLt has no algorithm (as Matmul).
  // For tests and diagnostics.
  struct SlicedRun {
    MatmulSlicing slicing;
    MatmulGrid grid;
  };
  absl::StatusOr<SlicedRun> Slicing(const MatmulShape& shape, const MatmulBuffers& buffers,
                                    double max_slice_flops, int multiprocessors = 0);

  // Plans in the cache (for tests and diagnostics).
  size_t plan_count() const;
  // Matmuls that ran in slices, and the slices they ran as (for tests and diagnostics).
  int64_t sliced_matmul_count() const { return sliced_matmuls_.load(); }
  int64_t slice_count() const { return slices_.load(); }

 private:
  struct Plan;

  CublasLtMatmul(const CublasLtApi& api, CublasLtLibrary library, void* handle,
                 int multiprocessor_count);
  // The plan of `shape` with these buffers' alignments and workspace, made when there is
  // none; UNIMPLEMENTED where cuBLASLt has no algorithm for it (the answer is cached too).
  absl::StatusOr<std::shared_ptr<Plan>> SupportedPlan(const MatmulShape& shape,
                                                      const MatmulBuffers& buffers);
  absl::StatusOr<std::shared_ptr<Plan>> FindOrMakePlan(const MatmulKey& key, uint64_t bias);
  absl::StatusOr<std::shared_ptr<Plan>> MakePlan(const MatmulKey& key, uint64_t bias) const;
  // Heuristic candidates asked for a shape that may be sliced.
  static constexpr int kSliceableCandidates = 8;

  const CublasLtApi& api_;
  const CublasLtLibrary library_;
  void* const handle_;  // cublasLtHandle_t
  const int multiprocessor_count_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<MatmulKey, std::shared_ptr<Plan>> plans_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> sliced_matmuls_{0};
  std::atomic<int64_t> slices_{0};
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_CUBLASLT_H_
