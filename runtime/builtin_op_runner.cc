#include "runtime/builtin_op_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/embedded_kernels.h"
#include "kernels/cuda/op_params.h"
#include "runtime/base/matmul_shapes.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/op_lowering.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

constexpr uint32_t kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
constexpr int64_t kMaxBlocks = 8192;
// Element-wise kernels give each thread at most this many elements (more blocks beyond
// kMaxBlocks), so that every block is short: the GPU starts a higher-priority stream's work
// where blocks end, and a block over 64 elements per thread (a few microseconds) never holds
// an SM long. With kMaxBlocks alone, a 4 GiB element-wise op would keep each block about
// 300 us on an H100.
constexpr int64_t kMaxElementsPerThread = 64;
constexpr int64_t kMaxGridX = 2147483647;
constexpr int64_t kMaxGridYZ = 65535;
// A row of a reduction is split across blocks when it is long and there are few rows.
constexpr int64_t kReduceSliceLength = 32 * kThreads;
constexpr int64_t kMaxReduceSlices = 4096;
constexpr uint32_t kMatmulTile = 16;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

LaunchConfig Linear(int64_t count) {
  LaunchConfig config;
  const int64_t blocks = std::max(std::clamp<int64_t>(CeilDiv(count, kThreads), 1, kMaxBlocks),
                                  CeilDiv(count, kThreads * kMaxElementsPerThread));
  config.grid[0] = static_cast<uint32_t>(std::min(blocks, kMaxGridX));
  config.block[0] = kThreads;
  return config;
}

KernelArg Buffer(BufferId buffer) {
  KernelArg arg;
  arg.kind = KernelArg::Kind::kBuffer;
  arg.buffer = buffer;
  return arg;
}

KernelArg Int64(int64_t value);

// A buffer's address, or a null pointer for the 0 id (a scalar operand has no buffer).
KernelArg BufferOrNull(BufferId buffer) { return buffer.value == 0 ? Int64(0) : Buffer(buffer); }

KernelArg Int64(int64_t value) {
  KernelArg arg;
  arg.kind = KernelArg::Kind::kScalar;
  std::memcpy(arg.bytes, &value, sizeof(value));
  arg.size_bytes = sizeof(value);
  return arg;
}

template <typename Params>
KernelArg Block(const Params& params) {
  KernelArg arg;
  arg.kind = KernelArg::Kind::kBlock;
  arg.block = &params;
  arg.size_bytes = sizeof(Params);
  return arg;
}

void CopyDims(absl::Span<const int64_t> from, gk_int64* to) {
  std::copy(from.begin(), from.end(), to);
}

// The scalar as the compute dtype's bytes, converted as the CPU backend converts it: a float
// scalar is a float32 0-d array and an integer an int64 one, cast to the compute dtype.
uint64_t ScalarBits(const ScalarValue& scalar, DType compute) {
  float f = static_cast<float>(scalar.float_value);
  int64_t i = scalar.int_value;
  const kernels::ConstHostArray in = scalar.is_float
                                         ? kernels::ConstHostArray{&f, DType::kFloat32, {}}
                                         : kernels::ConstHostArray{&i, DType::kInt64, {}};
  uint64_t bits = 0;
  kernels::CastCpu(in, kernels::HostArray{&bits, compute, {}});
  return bits;
}

// Device memory for the length of one op; waits for the op's work before it frees any.
class Temporaries {
 public:
  Temporaries(Device& device, StreamId stream) : device_(device), stream_(stream) {}
  Temporaries(const Temporaries&) = delete;
  Temporaries& operator=(const Temporaries&) = delete;
  ~Temporaries() {
    if (buffers_.empty()) return;
    SynchronizeStream(device_, stream_).IgnoreError();  // the op reports its own errors
    for (BufferId buffer : buffers_) device_.Free(buffer).IgnoreError();
  }

  absl::StatusOr<BufferId> Allocate(int64_t bytes) {
    GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device_.Allocate(bytes));
    buffers_.push_back(buffer);
    return buffer;
  }
  // Waits for the work that uses the temporaries; the op's result.
  absl::Status Finish() {
    if (buffers_.empty()) return absl::OkStatus();
    absl::Status status = SynchronizeStream(device_, stream_);
    for (BufferId buffer : buffers_) device_.Free(buffer).IgnoreError();
    buffers_.clear();
    return status;
  }

 private:
  Device& device_;
  const StreamId stream_;
  std::vector<BufferId> buffers_;
};

}  // namespace

// One op's lowering (runtime/cuda/op_lowering.h): the runner, the stream and the op's
// temporaries. Outside the anonymous namespace because the header names it.
class OpLowering {
 public:
  OpLowering(BuiltinOpRunner& runner, Device& device, const OpLaunch& launch, StreamId stream)
      : runner_(runner),
        device_(device),
        launch_(launch),
        stream_(stream),
        temps_(device, stream) {}

  // The op's lowering from the op table, then the wait for its temporaries.
  absl::Status Run() {
    if (launch_.op->cuda == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("op \"", launch_.op->name, "\" has no device kernels"));
    }
    GPUKIT_RETURN_IF_ERROR(launch_.op->cuda(*this));
    return temps_.Finish();
  }

  // The rest is for the functions of op_lowering.h, defined below the class. It is public
  // because no code outside this file sees the class's definition.
  absl::Status Launch(absl::string_view module, const std::string& kernel,
                      const LaunchConfig& config, absl::Span<const KernelArg> args) {
    GPUKIT_ASSIGN_OR_RETURN(FunctionId function, runner_.Kernel(module, kernel));
    return device_.Launch(function, config, args, stream_);
  }

  // Converts `count` elements of `from` into `to` (a cast kernel).
  absl::Status Cast(BufferId in, DType from, BufferId out, DType to, int64_t count) {
    if (count == 0) return absl::OkStatus();
    GkCastParams params{count};
    const KernelArg args[] = {Buffer(out), Buffer(in), Block(params)};
    return Launch("cast",
                  absl::StrCat("gk_cast_", KernelDTypeSuffix(from), "_", KernelDTypeSuffix(to)),
                  Linear(count), args);
  }

  // Input `i` in the compute dtype: its own buffer, or a temporary holding its cast.
  absl::StatusOr<BufferId> Input(size_t i) {
    const OpOperand& operand = launch_.inputs[i];
    const DType compute = launch_.plan.compute_dtype;
    if (operand.desc.dtype == compute) return operand.buffer;
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(operand.desc.shape));
    GPUKIT_ASSIGN_OR_RETURN(BufferId cast,
                            temps_.Allocate(std::max<int64_t>(count * DTypeSize(compute), 1)));
    GPUKIT_RETURN_IF_ERROR(Cast(operand.buffer, operand.desc.dtype, cast, compute, count));
    return cast;
  }

  absl::StatusOr<GkOperand> BinaryOperand(size_t i, int64_t out_count, BufferId* buffer) {
    const OpOperand& operand = launch_.inputs[i];
    GkOperand op{};
    if (operand.is_scalar) {
      op.mode = GK_OPERAND_SCALAR;
      op.scalar_bits = ScalarBits(operand.scalar, launch_.plan.compute_dtype);
      return op;
    }
    GPUKIT_ASSIGN_OR_RETURN(*buffer, Input(i));
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(operand.desc.shape));
    // Broadcasting only prepends or stretches extents of 1, so an operand with as many
    // elements as the output has the output's layout.
    if (count == out_count) {
      op.mode = GK_OPERAND_CONTIGUOUS;
    } else if (count == 1) {
      op.mode = GK_OPERAND_REPEAT;
    } else {
      op.mode = GK_OPERAND_STRIDED;
      CopyDims(BroadcastStrides(operand.desc.shape, launch_.plan.output.shape), op.strides);
    }
    return op;
  }

  absl::Status Binary(const std::string& op) {
    const Shape& shape = launch_.plan.output.shape;
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
    if (count == 0) return absl::OkStatus();
    GkBinaryParams params{};
    params.count = count;
    params.rank = static_cast<gk_int32>(shape.size());
    CopyDims(shape, params.dims);
    BufferId a, b;  // stay 0 for a scalar operand, which passes a null pointer
    GPUKIT_ASSIGN_OR_RETURN(params.a, BinaryOperand(0, count, &a));
    GPUKIT_ASSIGN_OR_RETURN(params.b, BinaryOperand(1, count, &b));
    const KernelArg args[] = {Buffer(launch_.output), BufferOrNull(a), BufferOrNull(b),
                              Block(params)};
    return Launch("binary",
                  absl::StrCat("gk_", op, "_", KernelDTypeSuffix(launch_.plan.compute_dtype)),
                  Linear(count), args);
  }

  absl::Status Astype() {
    const OpOperand& in = launch_.inputs[0];
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(in.desc.shape));
    if (in.desc.dtype == launch_.plan.output.dtype) {  // a copy keeps every bit
      return CopyAll(in.buffer, count * DTypeSize(in.desc.dtype));
    }
    return Cast(in.buffer, in.desc.dtype, launch_.output, launch_.plan.output.dtype, count);
  }

  absl::Status Reshape() {
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes,
                            ByteSize(launch_.plan.output.shape, launch_.plan.output.dtype));
    return CopyAll(launch_.inputs[0].buffer, bytes);
  }

  absl::Status CopyAll(BufferId in, int64_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    return device_.CopyDeviceToDevice(launch_.output, 0, in, 0, bytes, stream_);
  }

  absl::Status Transpose() {
    const OpOperand& in = launch_.inputs[0];
    const Shape& shape = launch_.plan.output.shape;
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
    if (count == 0) return absl::OkStatus();
    const std::vector<int64_t> contiguous = ContiguousStrides(in.desc.shape);
    const std::vector<int>& perm = launch_.plan.params.perm;
    GkPermuteParams params{};
    params.count = count;
    params.rank = static_cast<gk_int32>(shape.size());
    CopyDims(shape, params.dims);
    for (size_t j = 0; j < perm.size(); ++j) params.in_strides[j] = contiguous[perm[j]];
    const KernelArg args[] = {Buffer(launch_.output), Buffer(in.buffer), Block(params)};
    return Launch("layout", absl::StrCat("gk_permute_", DTypeSize(in.desc.dtype)), Linear(count),
                  args);
  }

  absl::Status Reduce(const std::string& op) {
    const OpOperand& in = launch_.inputs[0];
    GPUKIT_ASSIGN_OR_RETURN(BufferId input, Input(0));
    GPUKIT_ASSIGN_OR_RETURN(const int64_t count, ElementCount(in.desc.shape));
    GPUKIT_ASSIGN_OR_RETURN(const int64_t out_count, ElementCount(launch_.plan.output.shape));
    if (out_count == 0) return absl::OkStatus();
    // The input as in[outer][extent][inner]. The reduced axes, merged where they are adjacent
    // (kernels::ReduceRuns), are one extent when they form one run; several runs are permuted
    // into a temporary with the reduced ones last and reduced as rows of their product.
    GkReduceParams p{};
    if (count == 0) {
      p = {out_count, 0, 1, 0.0};  // rows of nothing: each stores the empty result
    } else {
      const std::vector<kernels::ReduceRun> runs =
          kernels::ReduceRuns(in.desc.shape, launch_.plan.params.reduce_axes);
      const auto reduced_runs = std::count_if(
          runs.begin(), runs.end(), [](const kernels::ReduceRun& run) { return run.reduced; });
      if (reduced_runs == 0) {
        p = {1, 1, out_count, 0.0};  // axis = [] or axes of 1: each element is its own result
      } else if (reduced_runs == 1) {
        p = {1, 0, 1, 0.0};  // kept runs before the reduced one are outer, after it inner
        for (const kernels::ReduceRun& run : runs) {  // (every extent here is >= 2)
          if (run.reduced) {
            p.extent = run.extent;
          } else {
            (p.extent == 0 ? p.outer : p.inner) *= run.extent;
          }
        }
      } else {
        GPUKIT_ASSIGN_OR_RETURN(input, ReducedAxesLast(input, runs, count));
        p = {out_count, count / out_count, 1, 0.0};
      }
    }
    p.divisor = op == "mean" ? static_cast<double>(p.extent) : 1.0;
    const std::string suffix =
        absl::StrCat(op, "_", KernelDTypeSuffix(launch_.plan.compute_dtype));
    if (p.inner > 1) {
      const KernelArg args[] = {Buffer(launch_.output), Buffer(input), Block(p)};
      return Launch("reduce", absl::StrCat("gk_reduce_cols_", suffix), Linear(p.outer * p.inner),
                    args);
    }
    // Rows: split each across blocks when there are too few rows to fill the device.
    int64_t slices = 1;
    if (p.outer < kMaxReduceSlices) {
      slices = std::clamp<int64_t>(CeilDiv(p.extent, kReduceSliceLength), 1,
                                   kMaxReduceSlices / p.outer);
    }
    LaunchConfig rows;
    rows.grid[0] = static_cast<uint32_t>(slices);
    rows.grid[1] = static_cast<uint32_t>(std::min(p.outer, kMaxGridYZ));
    rows.block[0] = kThreads;
    BufferId partial = launch_.output;  // unused with one slice
    if (slices > 1) {
      static_assert(kMaxReduceSlices * 8 <= BuiltinOpRunner::kScratchBytes);
      GPUKIT_ASSIGN_OR_RETURN(partial, runner_.Scratch(stream_));
    }
    const KernelArg row_args[] = {Buffer(launch_.output), Buffer(input), Buffer(partial),
                                  Block(p)};
    GPUKIT_RETURN_IF_ERROR(
        Launch("reduce", absl::StrCat("gk_reduce_rows_", suffix), rows, row_args));
    if (slices == 1) return absl::OkStatus();
    LaunchConfig finish;
    finish.grid[0] = static_cast<uint32_t>(std::min(p.outer, kMaxBlocks));
    finish.block[0] = kThreads;
    const KernelArg finish_args[] = {Buffer(launch_.output), Buffer(partial), Int64(slices),
                                     Block(p)};
    return Launch("reduce", absl::StrCat("gk_reduce_partials_", suffix), finish, finish_args);
  }

  // A copy of `input` (`count` elements of the compute dtype, laid out as `runs`) with the
  // kept runs first and the reduced ones last, each group in its order: the reduction's
  // rows, in the output's order. A temporary of the input's size (gk_permute).
  absl::StatusOr<BufferId> ReducedAxesLast(BufferId input,
                                           const std::vector<kernels::ReduceRun>& runs,
                                           int64_t count) {
    Shape dims;
    for (const kernels::ReduceRun& run : runs) dims.push_back(run.extent);
    const std::vector<int64_t> strides = ContiguousStrides(dims);
    GkPermuteParams params{};
    params.count = count;
    params.rank = static_cast<gk_int32>(runs.size());  // <= kMaxRank: runs merge dimensions
    int j = 0;
    for (const bool reduced : {false, true}) {
      for (size_t i = 0; i < runs.size(); ++i) {
        if (runs[i].reduced != reduced) continue;
        params.dims[j] = runs[i].extent;
        params.in_strides[j] = strides[i];
        ++j;
      }
    }
    const int64_t element_bytes = DTypeSize(launch_.plan.compute_dtype);
    GPUKIT_ASSIGN_OR_RETURN(BufferId permuted, temps_.Allocate(count * element_bytes));
    const KernelArg args[] = {Buffer(permuted), Buffer(input), Block(params)};
    GPUKIT_RETURN_IF_ERROR(
        Launch("layout", absl::StrCat("gk_permute_", element_bytes), Linear(count), args));
    return permuted;
  }

  absl::Status Matmul() {
    // NumPy's 1-d operands, viewed in place (runtime/base/matmul_shapes.h).
    GPUKIT_ASSIGN_OR_RETURN(
        const MatmulMatrices mm,
        AsMatmulMatrices(launch_.inputs[0].desc.shape, launch_.inputs[1].desc.shape));
    const Shape& a = mm.a;
    const Shape& b = mm.b;
    const Shape& out = launch_.plan.output.shape;
    GkMatmulParams p{};
    p.m = a[a.size() - 2];
    p.k = a.back();
    p.n = b.back();
    const auto out_batch = absl::MakeConstSpan(out).first(out.size() - mm.out_matrix_rank);
    GPUKIT_ASSIGN_OR_RETURN(p.batch, ElementCount(out_batch));
    if (p.m == 0 || p.n == 0 || p.batch == 0) return absl::OkStatus();
    if (CeilDiv(p.m, kMatmulTile) > kMaxGridYZ) {
      return absl::InvalidArgumentError(
          absl::StrCat("matmul with ", p.m, " rows exceeds the device kernel's ",
                       kMaxGridYZ * kMatmulTile, "-row limit"));
    }
    p.batch_rank = static_cast<gk_int32>(out_batch.size());
    CopyDims(out_batch, p.batch_dims);
    CopyDims(BroadcastStrides(absl::MakeConstSpan(a).first(a.size() - 2), out_batch),
             p.a_batch_strides);
    CopyDims(BroadcastStrides(absl::MakeConstSpan(b).first(b.size() - 2), out_batch),
             p.b_batch_strides);
    GPUKIT_ASSIGN_OR_RETURN(BufferId a_buffer, Input(0));
    GPUKIT_ASSIGN_OR_RETURN(BufferId b_buffer, Input(1));
    LaunchConfig config;
    config.grid[0] = static_cast<uint32_t>(CeilDiv(p.n, kMatmulTile));
    config.grid[1] = static_cast<uint32_t>(CeilDiv(p.m, kMatmulTile));
    config.grid[2] = static_cast<uint32_t>(std::min(p.batch, kMaxGridYZ));
    config.block[0] = kMatmulTile;
    config.block[1] = kMatmulTile;
    const KernelArg args[] = {Buffer(launch_.output), Buffer(a_buffer), Buffer(b_buffer),
                              Block(p)};
    return Launch("matmul",
                  absl::StrCat("gk_matmul_", KernelDTypeSuffix(launch_.plan.compute_dtype)),
                  config, args);
  }

  std::string ComputeSuffix() const {
    return std::string(KernelDTypeSuffix(launch_.plan.compute_dtype));
  }

  absl::Status Unary(const std::string& op) {
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(launch_.plan.output.shape));
    if (count == 0) return absl::OkStatus();
    GPUKIT_ASSIGN_OR_RETURN(BufferId in, Input(0));
    GkUnaryParams params{count};
    const KernelArg args[] = {Buffer(launch_.output), Buffer(in), Block(params)};
    return Launch("unary", absl::StrCat("gk_", op, "_", ComputeSuffix()), Linear(count), args);
  }

  absl::Status Clamp() {
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(launch_.plan.output.shape));
    if (count == 0) return absl::OkStatus();
    GPUKIT_ASSIGN_OR_RETURN(BufferId in, Input(0));
    const OpParams& op = launch_.plan.params;
    GkClampParams params{};
    params.count = count;
    // A bound in both forms; the kernel picks the one of its dtype (as the CPU's does).
    auto set = [](const std::optional<ScalarValue>& bound, gk_int32* has, double* f,
                  gk_int64* i) {
      if (!bound.has_value()) return;
      *has = 1;
      *f = bound->is_float ? bound->float_value : static_cast<double>(bound->int_value);
      *i = bound->int_value;
    };
    set(op.clamp_min, &params.has_min, &params.min_float, &params.min_int);
    set(op.clamp_max, &params.has_max, &params.max_float, &params.max_int);
    const KernelArg args[] = {Buffer(launch_.output), Buffer(in), Block(params)};
    return Launch("unary", absl::StrCat("gk_clamp_", ComputeSuffix()), Linear(count), args);
  }

  absl::Status Where() {
    const Shape& shape = launch_.plan.output.shape;
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
    if (count == 0) return absl::OkStatus();
    GkWhereParams params{};
    params.count = count;
    params.rank = static_cast<gk_int32>(shape.size());
    CopyDims(shape, params.dims);
    // The condition is read in its own dtype: nonzero bits, less a floating sign bit.
    const TensorDesc& cond = launch_.inputs[0].desc;
    params.cond_bytes = static_cast<gk_int32>(DTypeSize(cond.dtype));
    params.cond_mask = cond.dtype == DType::kFloat32                                  ? 0x7fffffffu
                       : cond.dtype == DType::kFloat16 || cond.dtype == DType::kBFloat16 ? 0x7fffu
                                                                                         : ~uint64_t{0};
    GPUKIT_ASSIGN_OR_RETURN(int64_t cond_count, ElementCount(cond.shape));
    params.cond.mode = cond_count == count ? GK_OPERAND_CONTIGUOUS
                       : cond_count == 1   ? GK_OPERAND_REPEAT
                                           : GK_OPERAND_STRIDED;
    if (params.cond.mode == GK_OPERAND_STRIDED) {
      CopyDims(BroadcastStrides(cond.shape, shape), params.cond.strides);
    }
    BufferId a, b;  // stay 0 for a scalar operand, which passes a null pointer
    GPUKIT_ASSIGN_OR_RETURN(params.a, BinaryOperand(1, count, &a));
    GPUKIT_ASSIGN_OR_RETURN(params.b, BinaryOperand(2, count, &b));
    const KernelArg args[] = {Buffer(launch_.output), Buffer(launch_.inputs[0].buffer),
                              BufferOrNull(a), BufferOrNull(b), Block(params)};
    return Launch("unary", absl::StrCat("gk_where_", ComputeSuffix()), Linear(count), args);
  }

  // One block per row or lane, grid-stride past kMaxBlocks.
  static LaunchConfig PerRow(int64_t rows) {
    LaunchConfig config;
    config.grid[0] = static_cast<uint32_t>(std::clamp<int64_t>(rows, 1, kMaxBlocks));
    config.block[0] = kThreads;
    return config;
  }

  // The input as [outer][extent][inner] around `axis` (everything: outer = inner = 1).
  absl::StatusOr<GkLaneParams> Lanes(std::optional<int> axis) {
    const Shape& shape = launch_.inputs[0].desc.shape;
    GkLaneParams p{1, 1, 1};
    if (!axis.has_value()) {
      GPUKIT_ASSIGN_OR_RETURN(p.extent, ElementCount(shape));
      return p;
    }
    const auto dims = absl::MakeConstSpan(shape);
    GPUKIT_ASSIGN_OR_RETURN(p.outer, ElementCount(dims.subspan(0, *axis)));
    p.extent = shape[*axis];
    GPUKIT_ASSIGN_OR_RETURN(p.inner, ElementCount(dims.subspan(*axis + 1)));
    return p;
  }

  absl::Status Argmax() {
    GPUKIT_ASSIGN_OR_RETURN(GkLaneParams p, Lanes(launch_.plan.params.axis));
    if (p.outer * p.inner == 0) return absl::OkStatus();  // the planner rejects empty extents
    GPUKIT_ASSIGN_OR_RETURN(BufferId in, Input(0));
    const KernelArg args[] = {Buffer(launch_.output), Buffer(in), Block(p)};
    if (p.inner == 1) {
      return Launch("nn", absl::StrCat("gk_argmax_rows_", ComputeSuffix()), PerRow(p.outer),
                    args);
    }
    return Launch("nn", absl::StrCat("gk_argmax_cols_", ComputeSuffix()),
                  Linear(p.outer * p.inner), args);
  }

  absl::Status Softmax() {
    GPUKIT_ASSIGN_OR_RETURN(GkLaneParams p, Lanes(launch_.plan.params.axis.value_or(
                                                static_cast<int>(launch_.plan.output.shape.size()) - 1)));
    if (p.outer * p.inner * p.extent == 0) return absl::OkStatus();
    GPUKIT_ASSIGN_OR_RETURN(BufferId in, Input(0));
    const KernelArg args[] = {Buffer(launch_.output), Buffer(in), Block(p)};
    return Launch("nn", absl::StrCat("gk_softmax_", ComputeSuffix()), PerRow(p.outer * p.inner),
                  args);
  }

  absl::Status Norm(const std::string& op) {
    const Shape& shape = launch_.plan.output.shape;
    GkNormParams p{};
    p.dim = shape.back();
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
    if (count == 0) return absl::OkStatus();
    p.rows = count / p.dim;
    p.eps = launch_.plan.params.eps;
    const size_t n = launch_.inputs.size();
    p.has_weight = n > 1;
    p.has_bias = n > 2;
    GPUKIT_ASSIGN_OR_RETURN(BufferId x, Input(0));
    BufferId weight, bias;
    if (n > 1) {
      GPUKIT_ASSIGN_OR_RETURN(weight, Input(1));
    }
    if (n > 2) {
      GPUKIT_ASSIGN_OR_RETURN(bias, Input(2));
    }
    const std::string kernel = absl::StrCat("gk_", op, "_", ComputeSuffix());
    if (op == "rmsnorm") {
      const KernelArg args[] = {Buffer(launch_.output), Buffer(x), BufferOrNull(weight), Block(p)};
      return Launch("nn", kernel, PerRow(p.rows), args);
    }
    const KernelArg args[] = {Buffer(launch_.output), Buffer(x), BufferOrNull(weight),
                              BufferOrNull(bias), Block(p)};
    return Launch("nn", kernel, PerRow(p.rows), args);
  }

  absl::Status Rope() {
    const Shape& shape = launch_.plan.output.shape;
    GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
    if (count == 0) return absl::OkStatus();
    GkRopeParams p{};
    p.dim = shape.back();
    p.seq = shape[shape.size() - 2];
    p.rows = count / p.dim;
    p.offset = launch_.plan.params.rope_offset;
    p.base = launch_.plan.params.rope_base;
    GPUKIT_ASSIGN_OR_RETURN(BufferId x, Input(0));
    const KernelArg args[] = {Buffer(launch_.output), Buffer(x), Block(p)};
    return Launch("nn", absl::StrCat("gk_rope_", ComputeSuffix()), Linear(count / 2), args);
  }

  absl::Status Attention() {
    const Shape& q = launch_.inputs[0].desc.shape;
    const Shape& k = launch_.inputs[1].desc.shape;
    const Shape& v = launch_.inputs[2].desc.shape;
    GkAttentionParams p{};
    p.heads = q[0];
    p.sq = q[1];
    p.d = q[2];
    p.sk = k[1];
    p.dv = v[2];
    p.causal = launch_.plan.params.causal;
    p.scale = launch_.plan.params.scale;
    if (p.heads * p.sq * p.dv == 0) return absl::OkStatus();
    if (p.d > GK_ATTENTION_MAX_DIM || p.dv > GK_ATTENTION_MAX_DIM) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention with q/k dim ", p.d, " and v dim ", p.dv,
                       " exceeds the device kernel's limit of ", GK_ATTENTION_MAX_DIM));
    }
    GPUKIT_ASSIGN_OR_RETURN(BufferId qb, Input(0));
    GPUKIT_ASSIGN_OR_RETURN(BufferId kb, Input(1));
    GPUKIT_ASSIGN_OR_RETURN(BufferId vb, Input(2));
    const KernelArg args[] = {Buffer(launch_.output), Buffer(qb), Buffer(kb), Buffer(vb),
                              Block(p)};
    return Launch("nn", absl::StrCat("gk_attention_", ComputeSuffix()), PerRow(p.heads * p.sq),
                  args);
  }

  absl::Status Embedding() {
    const TensorDesc& table = launch_.inputs[0].desc;
    const TensorDesc& indices = launch_.inputs[1].desc;
    GkEmbeddingParams p{};
    GPUKIT_ASSIGN_OR_RETURN(p.count, ElementCount(indices.shape));
    p.vocab = table.shape[0];
    p.dim = table.shape[1];
    if (p.count * p.dim == 0) return absl::OkStatus();
    // Neither input is converted: the table's dtype is the output's, the indices stay ints.
    const KernelArg args[] = {Buffer(launch_.output), Buffer(launch_.inputs[0].buffer),
                              Buffer(launch_.inputs[1].buffer), Block(p)};
    return Launch("layout",
                  absl::StrCat("gk_embedding_", KernelDTypeSuffix(indices.dtype), "_",
                               DTypeSize(table.dtype)),
                  Linear(p.count * p.dim), args);
  }

  absl::Status Concat() {
    const Shape& out = launch_.plan.output.shape;
    const int axis = launch_.plan.params.axis.value_or(0);
    const auto dims = absl::MakeConstSpan(out);
    GkConcatParams p{};
    GPUKIT_ASSIGN_OR_RETURN(p.outer, ElementCount(dims.subspan(0, axis)));
    GPUKIT_ASSIGN_OR_RETURN(const int64_t inner, ElementCount(dims.subspan(axis + 1)));
    p.out_chunk = out[axis] * inner;
    const std::string kernel = absl::StrCat("gk_concat_", DTypeSize(launch_.plan.compute_dtype));
    for (size_t i = 0; i < launch_.inputs.size(); ++i) {
      p.in_chunk = launch_.inputs[i].desc.shape[axis] * inner;
      if (p.outer * p.in_chunk > 0) {
        GPUKIT_ASSIGN_OR_RETURN(BufferId in, Input(i));
        const KernelArg args[] = {Buffer(launch_.output), Buffer(in), Block(p)};
        GPUKIT_RETURN_IF_ERROR(Launch("layout", kernel, Linear(p.outer * p.in_chunk), args));
      }
      p.offset += p.in_chunk;
    }
    return absl::OkStatus();
  }

  BuiltinOpRunner& runner_;
  Device& device_;
  const OpLaunch& launch_;
  const StreamId stream_;
  Temporaries temps_;
};

namespace cuda_ops {

// The lowerings of a family pass the op's name on: it names the family's kernels.
absl::Status Binary(OpLowering& l) { return l.Binary(l.launch_.op->name); }
absl::Status Astype(OpLowering& l) { return l.Astype(); }
absl::Status Reshape(OpLowering& l) { return l.Reshape(); }
absl::Status Transpose(OpLowering& l) { return l.Transpose(); }
absl::Status Reduce(OpLowering& l) { return l.Reduce(l.launch_.op->name); }
absl::Status Matmul(OpLowering& l) { return l.Matmul(); }
absl::Status Unary(OpLowering& l) { return l.Unary(l.launch_.op->name); }
absl::Status Clamp(OpLowering& l) { return l.Clamp(); }
absl::Status Where(OpLowering& l) { return l.Where(); }
absl::Status Argmax(OpLowering& l) { return l.Argmax(); }
absl::Status Softmax(OpLowering& l) { return l.Softmax(); }
absl::Status Norm(OpLowering& l) { return l.Norm(l.launch_.op->name); }
absl::Status Rope(OpLowering& l) { return l.Rope(); }
absl::Status Attention(OpLowering& l) { return l.Attention(); }
absl::Status Embedding(OpLowering& l) { return l.Embedding(); }
absl::Status Concat(OpLowering& l) { return l.Concat(); }

}  // namespace cuda_ops

namespace {

// One kernel of each built-in module, for compilers that want an entry name.
absl::string_view ModuleEntry(absl::string_view module) {
  static constexpr std::pair<absl::string_view, absl::string_view> kEntries[] = {
      {"binary", "gk_add_f32"},         {"cast", "gk_cast_f32_f16"},
      {"reduce", "gk_reduce_rows_sum_f32"}, {"layout", "gk_permute_4"},
      {"matmul", "gk_matmul_f32"},      {"unary", "gk_exp_f32"},
      {"nn", "gk_softmax_f32"}};
  for (const auto& [name, entry] : kEntries) {
    if (name == module) return entry;
  }
  return {};
}

}  // namespace

absl::string_view KernelDTypeSuffix(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kFloat16:
      return "f16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kInt32:
      return "i32";
    case DType::kInt64:
      return "i64";
    case DType::kUInt8:
      return "u8";
  }
  return "unknown";
}

BuiltinOpRunner::BuiltinOpRunner(Device& device, ModuleCompiler compile)
    : BuiltinOpRunner(device, BuiltinOpRunnerOptions{.compile = std::move(compile),
                                                     .modules = kernels::EmbeddedKernelSources(),
                                                     .use_precompiled = false}) {}

BuiltinOpRunner::BuiltinOpRunner(Device& device, BuiltinOpRunnerOptions options)
    : device_(device),
      compile_(std::move(options.compile)),
      use_precompiled_(options.use_precompiled) {
  for (const kernels::EmbeddedKernelSource& source : options.modules) {
    auto slot = std::make_unique<Slot>();
    slot->source = &source;
    slot->entry = ModuleEntry(source.name);
    slots_.push_back(std::move(slot));
  }
}

BuiltinOpRunner::~BuiltinOpRunner() { StopWarmUp(); }

bool BuiltinOpRunner::Supports(absl::string_view op_name) {
  absl::StatusOr<const OpDef*> op = OpRegistry::Builtin().Find(op_name);
  return op.ok() && (*op)->cuda != nullptr;
}

absl::Status BuiltinOpRunner::Run(const OpLaunch& launch, StreamId stream) {
  return OpLowering(*this, device_, launch, stream).Run();
}

absl::StatusOr<BufferId> BuiltinOpRunner::Scratch(StreamId stream) {
  absl::MutexLock lock(&mu_);
  if (auto it = scratch_.find(stream.value); it != scratch_.end()) return it->second;
  GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device_.Allocate(kScratchBytes));
  scratch_.emplace(stream.value, buffer);
  return buffer;
}

void BuiltinOpRunner::ReleaseStream(StreamId stream) {
  BufferId buffer;
  {
    absl::MutexLock lock(&mu_);
    auto it = scratch_.find(stream.value);
    if (it == scratch_.end()) return;
    buffer = it->second;
    scratch_.erase(it);
  }
  device_.Free(buffer).IgnoreError();
}

absl::StatusOr<FunctionId> BuiltinOpRunner::Kernel(absl::string_view module,
                                                   absl::string_view kernel) {
  const std::string key = absl::StrCat(module, ".", kernel);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = functions_.find(key); it != functions_.end()) return it->second;
  }
  Slot* slot = FindSlot(module);
  if (slot == nullptr || slot->entry.empty()) {
    return absl::InternalError(absl::StrCat("no built-in kernel module \"", module, "\""));
  }
  GPUKIT_ASSIGN_OR_RETURN(ModuleId id, LoadedModule(*slot));
  absl::MutexLock lock(&mu_);
  if (auto it = functions_.find(key); it != functions_.end()) return it->second;
  GPUKIT_ASSIGN_OR_RETURN(FunctionId function, device_.GetFunction(id, kernel));
  functions_.emplace(key, function);
  return function;
}

BuiltinOpRunner::Slot* BuiltinOpRunner::FindSlot(absl::string_view module) const {
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (slot->source->name == module) return slot.get();
  }
  return nullptr;
}

ModuleOrigin BuiltinOpRunner::Origin(absl::string_view module) const {
  const Slot* slot = FindSlot(module);
  if (slot == nullptr) return ModuleOrigin::kNotLoaded;
  absl::MutexLock lock(&slot->mu);
  return slot->origin;
}

absl::StatusOr<ModuleId> BuiltinOpRunner::LoadedModule(Slot& slot) {
  absl::MutexLock lock(&slot.mu);
  if (slot.id.has_value()) return *slot.id;
  GPUKIT_ASSIGN_OR_RETURN(ModuleId id, Load(slot));
  slot.id = id;
  return id;
}

absl::StatusOr<ModuleId> BuiltinOpRunner::Load(Slot& slot) {
  const kernels::EmbeddedKernelSource& source = *slot.source;
  if (use_precompiled_ && !source.fatbin.empty() && !precompiled_refused_.load()) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ModuleId> id = device_.LoadModule(source.fatbin);
    if (id.ok()) {
      slot.origin = ModuleOrigin::kPrecompiled;
      spdlog::info(
          "built-in kernels \"{}\": precompiled ({:.1f} ms)", std::string(source.name),
          absl::ToDoubleMilliseconds(absl::FromChrono(std::chrono::steady_clock::now() - start)));
      return id;
    }
    // The same driver refuses every fatbin of the build alike: say so once, then compile.
    if (!precompiled_refused_.exchange(true)) {
      spdlog::warn(
          "built-in kernels: the device refused the precompiled fatbin of \"{}\" ({}); "
          "compiling the built-in kernels with NVRTC instead",
          std::string(source.name), id.status().ToString());
    }
  }
  if (compile_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "built-in kernel module \"", source.name,
        "\" has no precompiled image this GPU runs, and there is no NVRTC JIT compiler"));
  }
  absl::StatusOr<std::string> image = compile_(source.name, source.text, slot.entry);
  if (!image.ok()) {
    return absl::Status(image.status().code() == absl::StatusCode::kInvalidArgument
                            ? absl::StatusCode::kInternal
                            : image.status().code(),
                        absl::StrCat("compiling built-in kernel module \"", source.name,
                                     "\": ", image.status().message()));
  }
  GPUKIT_ASSIGN_OR_RETURN(ModuleId id, device_.LoadModule(*image));
  slot.origin = ModuleOrigin::kCompiled;
  return id;
}

void BuiltinOpRunner::StartWarmUp(int threads) {
  if (!warm_up_threads_.empty() || warm_up_stopped_.load()) return;
  // The modules of the commonest ops first: an a + b needs "binary" alone.
  for (absl::string_view name : {"binary", "cast", "reduce", "unary", "matmul", "layout", "nn"}) {
    if (Slot* slot = FindSlot(name); slot != nullptr && !slot->entry.empty()) {
      warm_up_order_.push_back(slot);
    }
  }
  const int count = std::clamp<int>(threads, 1, std::max<int>(1, warm_up_order_.size()));
  for (int i = 0; i < count; ++i) warm_up_threads_.emplace_back([this] { WarmUpLoop(); });
}

void BuiltinOpRunner::WarmUpLoop() {
  while (!warm_up_stopped_.load()) {
    const size_t next = warm_up_next_.fetch_add(1);
    if (next >= warm_up_order_.size()) return;
    Slot& slot = *warm_up_order_[next];
    if (absl::Status loaded = LoadedModule(slot).status(); !loaded.ok()) {
      spdlog::warn(
          "built-in kernels \"{}\": warm-up failed, the first op needing them will "
          "try again: {}",
          std::string(slot.source->name), loaded.ToString());
    }
  }
}

void BuiltinOpRunner::StopWarmUp() {
  warm_up_stopped_.store(true);
  for (std::thread& thread : warm_up_threads_) {
    if (thread.joinable()) thread.join();
  }
  warm_up_threads_.clear();
}

}  // namespace gpukit
