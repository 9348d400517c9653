#include "runtime/cuda/cublaslt.h"

#include <cublasLt.h>  // types and constants only; calls go through CublasLtApi

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/dynamic_library.h"
#include "runtime/jit/library_search.h"
#include "spdlog/spdlog.h"

namespace gpukit {

static_assert(std::is_same_v<cudaStream_t, CUstream_st*>, "streams are passed as CUstream_st*");

// Every cuBLASLt entry point gpukit uses; all are required.
#define GPUKIT_CUBLASLT_FUNCTIONS(X)      \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)     \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulAlgoCheck)              \
  X(cublasLtMatmulAlgoConfigGetAttribute) \
  X(cublasLtMatmul)

struct CublasLtApi {
  CublasLtLibrary library;
#define GPUKIT_CUBLASLT_FIELD_(name) decltype(&::name) name = nullptr;
  GPUKIT_CUBLASLT_FUNCTIONS(GPUKIT_CUBLASLT_FIELD_)
#undef GPUKIT_CUBLASLT_FIELD_
};

namespace {

ABSL_CONST_INIT absl::Mutex load_mu(absl::kConstInit);
// Set once a load succeeds; never freed, and the library never closed: cuBLASLt keeps
// process-wide state, and descriptors may be released during static destruction.
const CublasLtApi* loaded_api ABSL_GUARDED_BY(load_mu) = nullptr;
// The library behind it, held here (reachable, so not a leak to LeakSanitizer).
const DynamicLibrary* loaded_library ABSL_GUARDED_BY(load_mu) = nullptr;

absl::StatusOr<const CublasLtApi*> LoadApi(const std::vector<std::string>& search_dirs) {
  absl::MutexLock lock(&load_mu);
  if (loaded_api != nullptr) return loaded_api;
  absl::StatusOr<DynamicLibrary> opened = OpenFirstLibrary(CublasLtLibraryNames(), search_dirs);
  if (!opened.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLASLt not available (", opened.status().message(), ")"));
  }
  auto api = std::make_unique<CublasLtApi>();
  api->library.path = opened->path();
#define GPUKIT_CUBLASLT_RESOLVE_(name)                                                         \
  {                                                                                            \
    absl::StatusOr<void*> symbol = opened->Symbol(#name);                                      \
    if (!symbol.ok()) {                                                                        \
      return absl::FailedPreconditionError(absl::StrCat("cuBLASLt not available (",            \
                                                        opened->path(), " has no " #name ": ", \
                                                        symbol.status().message(), ")"));      \
    }                                                                                          \
    api->name = reinterpret_cast<decltype(api->name)>(*symbol);                                \
  }
  GPUKIT_CUBLASLT_FUNCTIONS(GPUKIT_CUBLASLT_RESOLVE_)
#undef GPUKIT_CUBLASLT_RESOLVE_
  api->library.version = static_cast<int64_t>(api->cublasLtGetVersion());
  loaded_library = new DynamicLibrary(*std::move(opened));
  loaded_api = api.release();
  spdlog::debug("cuBLASLt {} loaded from {}", loaded_api->library.version,
                loaded_api->library.path);
  return loaded_api;
}

// OK for CUBLAS_STATUS_SUCCESS, else "call: CUBLAS_STATUS_X (text)". NOT_SUPPORTED and
// ARCH_MISMATCH become UNIMPLEMENTED: the case is cuBLASLt's limit, and the caller falls back.
absl::Status CheckCublas(const CublasLtApi& api, cublasStatus_t status, absl::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case CUBLAS_STATUS_INVALID_VALUE:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      code = absl::StatusCode::kUnimplemented;
      break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    default:
      break;
  }
  const char* name = api.cublasLtGetStatusName(status);
  const char* text = api.cublasLtGetStatusString(status);
  return absl::Status(code, absl::StrCat(call, ": ", name != nullptr ? name : "?", " (",
                                         text != nullptr ? text : "", ")"));
}

cudaDataType_t CudaDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;  // ValidateMatmulShape admits float32 as the only other dtype
  }
}

// The alignment a matrix's algorithm may assume: of its base address and, when batched, of
// every matrix after it.
uint32_t MatrixAlignment(uint64_t address, int64_t batch_stride, DType dtype) {
  uint32_t alignment = AddressAlignment(address);
  if (batch_stride > 0) {
    alignment = std::min(alignment, AddressAlignment(static_cast<uint64_t>(batch_stride) *
                                                     static_cast<uint64_t>(DTypeSize(dtype))));
  }
  return alignment;
}

const void* Pointer(uint64_t address) { return reinterpret_cast<const void*>(address); }

// A layout for `m` (of `dtype`), with its strided batch when it has one.
absl::Status MakeLayout(const CublasLtApi& api, const LtMatrix& m, DType dtype,
                        cublasLtMatrixLayout_t* layout) {
  GPUKIT_RETURN_IF_ERROR(CheckCublas(
      api, api.cublasLtMatrixLayoutCreate(layout, CudaDataType(dtype), m.rows, m.cols, m.ld),
      "cublasLtMatrixLayoutCreate"));
  if (m.batch_count == 1) return absl::OkStatus();
  GPUKIT_RETURN_IF_ERROR(
      CheckCublas(api,
                  api.cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &m.batch_count, sizeof(m.batch_count)),
                  "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"));
  return CheckCublas(
      api,
      api.cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &m.batch_stride, sizeof(m.batch_stride)),
      "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
}

// Whether `algo` computes each output element in one pass over k: no split-K, so no partial
// sums reduced in an order that could depend on the problem's size.
bool SplitsNoK(const CublasLtApi& api, const cublasLtMatmulAlgo_t& algo) {
  uint32_t splits = 0;
  uint32_t scheme = 0;
  size_t written = 0;
  if (api.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                               sizeof(splits), &written) != CUBLAS_STATUS_SUCCESS ||
      api.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                               &scheme, sizeof(scheme),
                                               &written) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  return splits <= 1 && scheme == CUBLASLT_REDUCTION_SCHEME_NONE;
}

// The grid `algo` runs on: cuBLASLt's m is gpukit's columns and its n gpukit's rows
// (ToColumnMajor; cublasLt.h: "Tile size (in C/D matrix Rows x Cols)"). The tile is 0 x 0 for
// an id this build does not know; `multiprocessor_count` may be 0 (not known).
MatmulGrid GridOf(const CublasLtApi& api, const cublasLtMatmulAlgo_t& algo,
                  int multiprocessor_count) {
  uint32_t tile = 0;
  size_t written = 0;
  if (api.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                               sizeof(tile), &written) != CUBLAS_STATUS_SUCCESS) {
    return {};
  }
  const std::optional<CublasLtTile> size = CublasLtTileSize(tile);
  if (!size.has_value()) return {};
  return {size->n, size->m, multiprocessor_count};
}

}  // namespace

std::optional<CublasLtTile> CublasLtTileSize(uint32_t id) {
  // {id, m, n}, generated from cublasLt.h by runtime/CMakeLists.txt.
  static constexpr struct {
    uint32_t id;
    int32_t m;
    int32_t n;
  } kTiles[] = {
#include "cublaslt_tiles.inc"
  };
  for (const auto& tile : kTiles) {
    if (tile.id == id && tile.m > 0 && tile.n > 0) return CublasLtTile{tile.m, tile.n};
  }
  return std::nullopt;
}

std::vector<std::string> CublasLtLibraryNames() {
  return {"libcublasLt.so.13", "libcublasLt.so.12"};
}

absl::StatusOr<CublasLtLibrary> LoadCublasLt(const std::vector<std::string>& search_dirs) {
  GPUKIT_ASSIGN_OR_RETURN(const CublasLtApi* api, LoadApi(search_dirs));
  return api->library;
}

// The descriptors of one MatmulKey and the algorithm the heuristic chose for it, or why
// there is none. Destroyed (host objects only) when the cache lets go and no call uses it.
struct CublasLtMatmul::Plan {
  explicit Plan(const CublasLtApi& api) : api(api) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    auto destroy = [&](cublasLtMatrixLayout_t layout) {
      if (layout != nullptr) api.cublasLtMatrixLayoutDestroy(layout);
    };
    for (cublasLtMatrixLayout_t layout : {a, b, d}) destroy(layout);
    absl::MutexLock lock(&mu);
    for (auto& [key, slice] : slices) {
      for (cublasLtMatrixLayout_t layout : {slice.a, slice.b, slice.d}) destroy(layout);
    }
    if (desc != nullptr) api.cublasLtMatmulDescDestroy(desc);
  }

  // The layouts of one slice shape, made on the first call that cuts the plan's shape so,
  // and whether the plan's algorithm runs them (cublasLtMatmulAlgoCheck).
  struct SliceLayouts {
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t d = nullptr;
    bool usable = false;
  };

  // Whether `algo` runs `slice` (its layouts made and checked with cublasLtMatmulAlgoCheck
  // on first use, then remembered).
  bool SliceUsable(void* handle, const MatmulShape& slice, uint64_t workspace_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto [it, inserted] = slices.try_emplace(std::pair{slice.m, slice.batch});
    SliceLayouts& layouts = it->second;
    if (!inserted) return layouts.usable;
    const LtGemmLayout lt = ToColumnMajor(slice);
    absl::Status made = MakeLayout(api, lt.a, slice.dtype, &layouts.a);
    if (made.ok()) made = MakeLayout(api, lt.b, slice.dtype, &layouts.b);
    if (made.ok()) made = MakeLayout(api, lt.d, slice.dtype, &layouts.d);
    cublasLtMatmulHeuristicResult_t checked{};
    const cublasStatus_t status =
        made.ok() ? api.cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(handle), desc,
                                                layouts.a, layouts.b, layouts.d, layouts.d,
                                                &algo, &checked)
                  : CUBLAS_STATUS_INVALID_VALUE;
    layouts.usable = status == CUBLAS_STATUS_SUCCESS && checked.workspaceSize <= workspace_bytes;
    if (!layouts.usable) {
      spdlog::debug("cuBLASLt: the algorithm chosen for the whole does not run slice {} ({}); "
                    "the matmul runs whole",
                    DescribeMatmul(slice),
                    made.ok() ? api.cublasLtGetStatusName(status) : made.ToString());
    }
    return layouts.usable;
  }

  // The slices this plan runs `shape` as with `max_slice_flops` (count 1: whole, also where
  // cuBLASLt cannot run a slice with the plan's algorithm).
  MatmulSlicing SlicingFor(void* handle, const MatmulShape& shape, const MatmulBuffers& buffers,
                           double max_slice_flops, int multiprocessors)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!may_slice || !(max_slice_flops > 0)) return {};
    auto [it, inserted] = slicings.try_emplace(std::pair{max_slice_flops, multiprocessors});
    if (inserted) it->second = PlanMatmulSlices(shape, max_slice_flops, GridOn(multiprocessors));
    const MatmulSlicing slicing = it->second;
    // Every slice but perhaps the last has the first's shape.
    if (slicing.count > 1 &&
        SliceUsable(handle, SliceOfMatmul(shape, slicing, 0).shape, buffers.workspace_bytes) &&
        SliceUsable(handle, SliceOfMatmul(shape, slicing, slicing.count - 1).shape,
                    buffers.workspace_bytes)) {
      return slicing;
    }
    return {};
  }

  // The grid on a stream of `multiprocessors` SMs (0: the GPU's, as `grid` has them).
  MatmulGrid GridOn(int multiprocessors) const {
    MatmulGrid on = grid;
    if (multiprocessors > 0) on.multiprocessors = multiprocessors;
    return on;
  }

  const CublasLtApi& api;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // cuBLASLt's A: gpukit's b
  cublasLtMatrixLayout_t b = nullptr;  // cuBLASLt's B: gpukit's a
  cublasLtMatrixLayout_t d = nullptr;  // C and D: gpukit's out
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;
  std::string unsupported_reason;  // when !supported
  // The shape may be sliced (MatmulMaySlice) and `algo` splits no k: slices give its bits.
  bool may_slice = false;
  // Where `algo` runs the whole shape: slices are cut along it (PlanMatmulSlices).
  MatmulGrid grid;
  // One call at a time sets the descriptor's bias pointer and enqueues with it.
  absl::Mutex mu;
  // By the slice's (m, batch).
  absl::flat_hash_map<std::pair<int64_t, int64_t>, SliceLayouts> slices ABSL_GUARDED_BY(mu);
  // The slices of the shape by target FLOPs per slice and the stream's SMs (0: all).
  absl::flat_hash_map<std::pair<double, int>, MatmulSlicing> slicings ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<CublasLtMatmul>> CublasLtMatmul::Create(
    const std::vector<std::string>& search_dirs, int multiprocessor_count) {
  GPUKIT_ASSIGN_OR_RETURN(const CublasLtApi* api, LoadApi(search_dirs));
  cublasLtHandle_t handle = nullptr;
  GPUKIT_RETURN_IF_ERROR(CheckCublas(*api, api->cublasLtCreate(&handle), "cublasLtCreate"));
  return std::unique_ptr<CublasLtMatmul>(
      new CublasLtMatmul(*api, api->library, handle, multiprocessor_count));
}

CublasLtMatmul::CublasLtMatmul(const CublasLtApi& api, CublasLtLibrary library, void* handle,
                               int multiprocessor_count)
    : api_(api),
      library_(std::move(library)),
      handle_(handle),
      multiprocessor_count_(multiprocessor_count) {}

CublasLtMatmul::~CublasLtMatmul() {
  {
    absl::MutexLock lock(&mu_);
    plans_.clear();
  }
  const cublasStatus_t status = api_.cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  if (status != CUBLAS_STATUS_SUCCESS) {
    spdlog::debug("cublasLtDestroy failed: {}", api_.cublasLtGetStatusName(status));
  }
}

size_t CublasLtMatmul::plan_count() const {
  absl::MutexLock lock(&mu_);
  return plans_.size();
}

absl::StatusOr<std::shared_ptr<CublasLtMatmul::Plan>> CublasLtMatmul::MakePlan(
    const MatmulKey& key, uint64_t bias) const {
  const MatmulShape& shape = key.shape;
  auto plan = std::make_shared<Plan>(api_);
  auto check = [&](cublasStatus_t status, absl::string_view call) {
    return CheckCublas(api_, status, call);
  };

  // Accumulate in float32 for every dtype; alpha and beta are floats.
  const cublasComputeType_t compute =
      shape.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  GPUKIT_RETURN_IF_ERROR(check(api_.cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F),
                               "cublasLtMatmulDescCreate"));
  const LtGemmLayout lt = ToColumnMajor(shape);
  auto set_desc = [&](cublasLtMatmulDescAttributes_t attribute, const void* value, size_t bytes,
                      const char* what) {
    return check(api_.cublasLtMatmulDescSetAttribute(plan->desc, attribute, value, bytes),
                 absl::StrCat("cublasLtMatmulDescSetAttribute(", what, ")"));
  };
  const int32_t transa = lt.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t transb = lt.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  GPUKIT_RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa), "TRANSA"));
  GPUKIT_RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb), "TRANSB"));
  if (shape.epilogue != MatmulEpilogue::kNone) {
    // The bias has D's type (the default of CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) and runs
    // along D's rows: gpukit's output columns. The heuristic reads the pointer's alignment.
    const uint32_t epilogue = shape.epilogue == MatmulEpilogue::kBias ? CUBLASLT_EPILOGUE_BIAS
                                                                      : CUBLASLT_EPILOGUE_GELU_BIAS;
    GPUKIT_RETURN_IF_ERROR(
        set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue), "EPILOGUE"));
    const void* bias_pointer = Pointer(bias);
    GPUKIT_RETURN_IF_ERROR(set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                                    sizeof(bias_pointer), "BIAS_POINTER"));
  }

  GPUKIT_RETURN_IF_ERROR(MakeLayout(api_, lt.a, shape.dtype, &plan->a));
  GPUKIT_RETURN_IF_ERROR(MakeLayout(api_, lt.b, shape.dtype, &plan->b));
  GPUKIT_RETURN_IF_ERROR(MakeLayout(api_, lt.d, shape.dtype, &plan->d));

  // The heuristic's preferences: the workspace the call will have and the alignments its
  // pointers have (cuBLASLt assumes 256 bytes otherwise).
  cublasLtMatmulPreference_t preference = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      check(api_.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate"));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      preference_owner(preference, api_.cublasLtMatmulPreferenceDestroy);
  auto set_preference = [&](cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                            size_t bytes, const char* what) {
    return check(api_.cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, bytes),
                 absl::StrCat("cublasLtMatmulPreferenceSetAttribute(", what, ")"));
  };
  const uint64_t workspace_bytes = key.workspace_bytes;
  GPUKIT_RETURN_IF_ERROR(set_preference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                        sizeof(workspace_bytes), "MAX_WORKSPACE_BYTES"));
  // cuBLASLt's A is gpukit's b and its B gpukit's a; C is D.
  for (const auto& [attribute, value, what] :
       {std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.b_alignment_bytes, "A"},
        std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.a_alignment_bytes, "B"},
        std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.d_alignment_bytes, "C"},
        std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.d_alignment_bytes, "D"}}) {
    const uint32_t bytes = value;
    GPUKIT_RETURN_IF_ERROR(set_preference(attribute, &bytes, sizeof(bytes),
                                          absl::StrCat("MIN_ALIGNMENT_", what, "_BYTES").c_str()));
  }

  // A shape that may be sliced takes the best candidate that splits no k (slices of it then
  // give the whole's bits), from a few; any other shape the best one.
  const bool may_slice = MatmulMaySlice(shape);
  cublasLtMatmulHeuristicResult_t results[kSliceableCandidates] = {};
  int found = 0;
  const cublasStatus_t status = api_.cublasLtMatmulAlgoGetHeuristic(
      static_cast<cublasLtHandle_t>(handle_), plan->desc, plan->a, plan->b, plan->d, plan->d,
      preference, may_slice ? kSliceableCandidates : 1, results, &found);
  cublasLtMatmulHeuristicResult_t& result = results[0];
  // An impossible configuration is cuBLASLt's limit for this case, not a caller's error: the
  // key gets a negative plan, and the caller runs its own kernel.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
      status == CUBLAS_STATUS_ARCH_MISMATCH || (status == CUBLAS_STATUS_SUCCESS && found == 0) ||
      (status == CUBLAS_STATUS_SUCCESS && result.state != CUBLAS_STATUS_SUCCESS)) {
    const cublasStatus_t why = status != CUBLAS_STATUS_SUCCESS ? status : result.state;
    plan->unsupported_reason = absl::StrCat(
        "cuBLASLt ", library_.version, " has no algorithm for matmul ", DescribeMatmul(shape),
        " (alignments a ", key.a_alignment_bytes, " b ", key.b_alignment_bytes, " out ",
        key.d_alignment_bytes, ", workspace ", key.workspace_bytes, " bytes): ",
        found == 0 && status == CUBLAS_STATUS_SUCCESS ? "no candidates"
                                                      : api_.cublasLtGetStatusName(why));
    spdlog::info("{}; gpukit's own kernel runs it", plan->unsupported_reason);
    return plan;
  }
  GPUKIT_RETURN_IF_ERROR(check(status, "cublasLtMatmulAlgoGetHeuristic"));
  plan->algo = result.algo;
  plan->supported = true;
  if (may_slice) {
    for (int i = 0; i < found; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS && SplitsNoK(api_, results[i].algo)) {
        plan->algo = results[i].algo;
        plan->may_slice = true;
        plan->grid = GridOf(api_, results[i].algo, multiprocessor_count_);
        spdlog::debug("cuBLASLt: {} runs {} x {} tiles on {} SMs, {} waves", DescribeMatmul(shape),
                      plan->grid.tile_rows, plan->grid.tile_cols, plan->grid.multiprocessors,
                      MatmulWaves(shape, plan->grid));
        break;
      }
    }
    if (!plan->may_slice) {
      spdlog::debug("cuBLASLt: every candidate for {} splits k; it runs whole",
                    DescribeMatmul(shape));
    }
  }
  return plan;
}

absl::StatusOr<std::shared_ptr<CublasLtMatmul::Plan>> CublasLtMatmul::FindOrMakePlan(
    const MatmulKey& key, uint64_t bias) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  }
  // Made without the lock (the heuristic takes tens of microseconds); when two threads make
  // the same plan, the first one cached wins.
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, MakePlan(key, bias));
  absl::MutexLock lock(&mu_);
  if (plans_.size() >= kMaxPlans && !plans_.contains(key)) {
    spdlog::debug("cuBLASLt plan cache full ({} plans): starting over", plans_.size());
    plans_.clear();
  }
  return plans_.emplace(key, std::move(plan)).first->second;
}

absl::StatusOr<std::shared_ptr<CublasLtMatmul::Plan>> CublasLtMatmul::SupportedPlan(
    const MatmulShape& shape, const MatmulBuffers& buffers) {
  MatmulKey key;
  key.shape = shape;
  key.a_alignment_bytes = MatrixAlignment(buffers.a, shape.a_batch_stride, shape.dtype);
  key.b_alignment_bytes = MatrixAlignment(buffers.b, shape.b_batch_stride, shape.dtype);
  key.d_alignment_bytes =
      MatrixAlignment(buffers.out, shape.batch > 1 ? shape.m * shape.n : 0, shape.dtype);
  key.bias_alignment_bytes =
      shape.epilogue != MatmulEpilogue::kNone ? AddressAlignment(buffers.bias) : 256;
  key.workspace_bytes = buffers.workspace_bytes;
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, FindOrMakePlan(key, buffers.bias));
  if (!plan->supported) return absl::UnimplementedError(plan->unsupported_reason);
  return plan;
}

absl::StatusOr<CublasLtMatmul::SlicedRun> CublasLtMatmul::Slicing(const MatmulShape& shape,
                                                                  const MatmulBuffers& buffers,
                                                                  double max_slice_flops,
                                                                  int multiprocessors) {
  GPUKIT_RETURN_IF_ERROR(ValidateMatmulShape(shape));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, SupportedPlan(shape, buffers));
  absl::MutexLock lock(&plan->mu);
  return SlicedRun{plan->SlicingFor(handle_, shape, buffers, max_slice_flops, multiprocessors),
                   plan->GridOn(multiprocessors)};
}

absl::Status CublasLtMatmul::Matmul(CUstream_st* stream, const MatmulShape& shape,
                                    const MatmulBuffers& buffers, double max_slice_flops,
                                    int multiprocessors) {
  GPUKIT_RETURN_IF_ERROR(ValidateMatmulShape(shape));
  if (buffers.a == 0 || buffers.b == 0 || buffers.out == 0) {
    return absl::InvalidArgumentError("matmul needs device addresses for a, b and out");
  }
  const bool has_bias = shape.epilogue != MatmulEpilogue::kNone;
  if (has_bias && buffers.bias == 0) {
    return absl::InvalidArgumentError("a matmul with a bias epilogue needs a bias address");
  }
  if (buffers.workspace_bytes > kWorkspaceBytes ||
      (buffers.workspace_bytes > 0 && buffers.workspace == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul workspace of ", buffers.workspace_bytes,
                                                   " bytes at ", buffers.workspace, ": at most ",
                                                   kWorkspaceBytes, " bytes, and not null"));
  }
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, SupportedPlan(shape, buffers));

  const float alpha = 1.0f;
  const float beta = 0.0f;
  absl::MutexLock lock(&plan->mu);
  if (has_bias) {
    const void* bias_pointer = Pointer(buffers.bias);
    GPUKIT_RETURN_IF_ERROR(CheckCublas(
        api_,
        api_.cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                            &bias_pointer, sizeof(bias_pointer)),
        "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  // D = A B with cuBLASLt's A = gpukit's b and B = gpukit's a (matmul_plan.h); C is D and
  // is not read (beta = 0).
  // `lt_a`, `lt_b` and `lt_d` are cuBLASLt's layouts; `a`, `b` and `out` gpukit's addresses.
  auto enqueue = [&](cublasLtMatrixLayout_t lt_a, cublasLtMatrixLayout_t lt_b,
                     cublasLtMatrixLayout_t lt_d, uint64_t a, uint64_t b, uint64_t out) {
    return CheckCublas(
        api_,
        api_.cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), plan->desc, &alpha,
                            Pointer(b), lt_a, Pointer(a), lt_b, &beta, Pointer(out), lt_d,
                            reinterpret_cast<void*>(out), lt_d, &plan->algo,
                            reinterpret_cast<void*>(buffers.workspace), buffers.workspace_bytes,
                            stream),
        "cublasLtMatmul");
  };
  const MatmulSlicing slicing =
      plan->SlicingFor(handle_, shape, buffers, max_slice_flops, multiprocessors);
  if (slicing.count > 1) {
    const uint64_t element = DTypeSize(shape.dtype);
    for (int64_t i = 0; i < slicing.count; ++i) {
      const MatmulSlice slice = SliceOfMatmul(shape, slicing, i);
      const Plan::SliceLayouts& layouts = plan->slices.at({slice.shape.m, slice.shape.batch});
      GPUKIT_RETURN_IF_ERROR(enqueue(layouts.a, layouts.b, layouts.d,
                                     buffers.a + static_cast<uint64_t>(slice.a_offset) * element,
                                     buffers.b + static_cast<uint64_t>(slice.b_offset) * element,
                                     buffers.out + static_cast<uint64_t>(slice.out_offset) * element));
    }
    sliced_matmuls_.fetch_add(1, std::memory_order_relaxed);
    slices_.fetch_add(slicing.count, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  return enqueue(plan->a, plan->b, plan->d, buffers.a, buffers.b, buffers.out);
}

}  // namespace gpukit
