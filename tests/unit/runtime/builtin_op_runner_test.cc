// The lowering of built-in ops onto device kernels (runtime/builtin_op_runner.h), checked on
// a device that records what it is asked to do: which kernels, with which parameter blocks
// and launch shapes, which temporaries, and that every temporary is freed after the work.
// The kernels' arithmetic is checked against the CPU reference on the GPU host
// (tests/gpu/cuda_ops_test.cc).
#include "runtime/builtin_op_runner.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/half.h"
#include "kernels/cuda/embedded_kernels.h"
#include "kernels/cuda/op_params.h"
#include "runtime/op_registry.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/runtime/op_plan_helpers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::Array;
using ::gpukit::testing::FloatScalar;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

struct RecordedLaunch {
  std::string kernel;
  LaunchConfig config;
  std::vector<KernelArg> args;
  std::vector<std::vector<uint8_t>> blocks;  // copies of kBlock arguments, in order

  template <typename Params>
  Params Block(size_t i = 0) const {
    Params p;
    EXPECT_EQ(blocks.at(i).size(), sizeof(Params));
    std::memcpy(&p, blocks.at(i).data(), sizeof(Params));
    return p;
  }
};

// A device that runs nothing: it records launches, copies and allocations.
class RecordingDevice final : public Device {
 public:
  const DeviceProperties& properties() const override { return properties_; }
  MemoryInfo GetMemoryInfo() const override { return {}; }
  absl::StatusOr<BufferId> Allocate(int64_t bytes) override {
    allocated.push_back(bytes);
    live.insert(next_);
    return BufferId{next_++};
  }
  absl::Status Free(BufferId buffer) override {
    if (live.erase(buffer.value) == 0) return absl::NotFoundError("not live");
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> BufferBytes(BufferId) const override { return 0; }
  absl::StatusOr<StreamId> CreateStream(const StreamOptions&) override { return StreamId{1}; }
  absl::Status DestroyStream(StreamId) override { return absl::OkStatus(); }
  absl::Status CopyHostToDevice(BufferId, int64_t, const void*, int64_t, StreamId) override {
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToHost(void*, BufferId, int64_t, int64_t, StreamId) override {
    return absl::OkStatus();
  }
  absl::Status CopyDeviceToDevice(BufferId dst, int64_t, BufferId src, int64_t, int64_t bytes,
                                  StreamId) override {
    copies.push_back({dst.value, src.value, bytes});
    return absl::OkStatus();
  }
  absl::StatusOr<EventId> RecordEvent(StreamId) override {
    ++events;
    return EventId{1};
  }
  absl::Status WaitEvent(EventId) override {
    // A wait with temporaries live is the runner synchronising before it frees them.
    waits_with_temporaries += live.size() > 0;
    return absl::OkStatus();
  }
  absl::StatusOr<bool> QueryEvent(EventId) override { return true; }
  absl::Status DestroyEvent(EventId) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> EventElapsedNs(EventId, EventId) override { return 0; }
  bool SupportsOp(absl::string_view) const override { return false; }
  absl::Status RunOp(const OpLaunch&, StreamId) override { return absl::UnimplementedError(""); }
  absl::StatusOr<ModuleId> LoadModule(absl::string_view image) override {
    absl::MutexLock lock(&modules_mu);  // the warm-up loads from several threads
    if (!refused_prefix.empty() && absl::StartsWith(image, refused_prefix)) {
      refused.push_back(std::string(image));
      return absl::InvalidArgumentError("CUDA_ERROR_NO_BINARY_FOR_GPU");
    }
    loaded.push_back(std::string(image));
    return ModuleId{loaded.size()};
  }
  absl::Status UnloadModule(ModuleId) override { return absl::OkStatus(); }
  absl::StatusOr<FunctionId> GetFunction(ModuleId module, absl::string_view name) override {
    absl::MutexLock lock(&modules_mu);
    names.push_back(absl::StrCat(loaded.at(module.value - 1), ":", name));
    return FunctionId{names.size()};
  }
  absl::Status Launch(FunctionId function, const LaunchConfig& config,
                      absl::Span<const KernelArg> args, StreamId) override {
    RecordedLaunch launch{names.at(function.value - 1), config, {args.begin(), args.end()}, {}};
    for (const KernelArg& arg : args) {
      if (arg.kind != KernelArg::Kind::kBlock) continue;
      const uint8_t* bytes = static_cast<const uint8_t*>(arg.block);
      launch.blocks.emplace_back(bytes, bytes + arg.size_bytes);
    }
    launches.push_back(std::move(launch));
    return absl::OkStatus();
  }

  struct Copy {
    uint64_t dst, src;
    int64_t bytes;
  };
  std::vector<RecordedLaunch> launches;
  std::vector<Copy> copies;
  absl::Mutex modules_mu;
  std::string refused_prefix;        // LoadModule refuses images that start with it
  std::vector<std::string> refused;  // images refused, in order
  std::vector<std::string> loaded;   // images, in load order
  std::vector<std::string> names;   // "image:kernel" per GetFunction
  std::vector<int64_t> allocated;
  std::set<uint64_t> live;
  int events = 0;
  int waits_with_temporaries = 0;

 private:
  DeviceProperties properties_;
  uint64_t next_ = 1000;
};

class BuiltinOpRunnerTest : public ::testing::Test {
 protected:
  BuiltinOpRunnerTest()
      : runner_(device_, [this](absl::string_view module, absl::string_view source,
                                absl::string_view entry) {
          compiled_.push_back(std::string(module));
          EXPECT_THAT(std::string(entry), ::testing::StartsWith("gk_"));
          EXPECT_THAT(std::string(source), HasSubstr("GK_MAX_RANK")) << "op_params.h first";
          return absl::StatusOr<std::string>(absl::StrCat("image-", module));
        }) {}

  // Plans `op` over `inputs` and runs it with input buffers 1, 2, ... and output 99.
  absl::Status Run(const std::string& op, std::vector<OperandDesc> inputs, AttrMap attrs = {}) {
    const OpRegistry& ops = OpRegistry::Builtin();
    absl::StatusOr<const OpDef*> def = ops.Find(op);
    if (!def.ok()) return def.status();
    absl::StatusOr<OpPlan> plan = ops.Plan(**def, inputs, attrs);
    if (!plan.ok()) return plan.status();
    OpLaunch launch;
    launch.op = *def;
    launch.plan = *plan;
    launch.output = BufferId{99};
    for (size_t i = 0; i < inputs.size(); ++i) {
      OpOperand operand;
      operand.is_scalar = inputs[i].is_scalar;
      operand.scalar = inputs[i].scalar;
      operand.desc = inputs[i].tensor;
      operand.buffer = BufferId{i + 1};
      launch.inputs.push_back(operand);
    }
    return runner_.Run(launch, StreamId{1});
  }

  const RecordedLaunch& OnlyLaunch() {
    EXPECT_EQ(device_.launches.size(), 1u);
    return device_.launches.at(0);
  }

  RecordingDevice device_;
  std::vector<std::string> compiled_;
  BuiltinOpRunner runner_;
};

TEST_F(BuiltinOpRunnerTest, SameShapeAddIsOneContiguousLaunchAndTheModuleCompilesOnce) {
  ASSERT_THAT(Run("add", {Array(DType::kFloat32, {2, 3}), Array(DType::kFloat32, {2, 3})}), IsOk());
  ASSERT_THAT(Run("sub", {Array(DType::kFloat32, {4}), Array(DType::kFloat32, {4})}), IsOk());
  EXPECT_THAT(compiled_, ElementsAre("binary"));
  EXPECT_THAT(device_.loaded, ElementsAre("image-binary"));
  ASSERT_EQ(device_.launches.size(), 2u);
  const RecordedLaunch& add = device_.launches[0];
  EXPECT_EQ(add.kernel, "image-binary:gk_add_f32");
  EXPECT_EQ(add.args[0].buffer.value, 99u);
  EXPECT_EQ(add.args[1].buffer.value, 1u);
  EXPECT_EQ(add.args[2].buffer.value, 2u);
  const auto p = add.Block<GkBinaryParams>();
  EXPECT_EQ(p.count, 6);
  EXPECT_EQ(p.a.mode, GK_OPERAND_CONTIGUOUS);
  EXPECT_EQ(p.b.mode, GK_OPERAND_CONTIGUOUS);
  EXPECT_EQ(add.config.block[0], 256u);
  EXPECT_EQ(add.config.grid[0], 1u);
  EXPECT_EQ(device_.launches[1].kernel, "image-binary:gk_sub_f32");
  EXPECT_TRUE(device_.allocated.empty()) << "no temporaries";
}

TEST_F(BuiltinOpRunnerTest, ScalarTravelsInTheParameterBlockInTheComputeDtype) {
  ASSERT_THAT(Run("mul", {Array(DType::kFloat16, {8}), FloatScalar(2.5)}), IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-binary:gk_mul_f16");
  const auto p = launch.Block<GkBinaryParams>();
  EXPECT_EQ(p.b.mode, GK_OPERAND_SCALAR);
  EXPECT_EQ(p.b.scalar_bits, kernels::Float16::FromFloat(2.5f).bits);
  EXPECT_EQ(launch.args[2].kind, KernelArg::Kind::kScalar) << "a null pointer, not a buffer";
  EXPECT_EQ(launch.args[2].size_bytes, 8u);
}

TEST_F(BuiltinOpRunnerTest, BroadcastOperandsAreStridedOrRepeated) {
  ASSERT_THAT(Run("add", {Array(DType::kInt32, {2, 3}), Array(DType::kInt32, {3})}), IsOk());
  ASSERT_THAT(Run("add", {Array(DType::kInt32, {2, 3}), Array(DType::kInt32, {1, 1})}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  const auto strided = device_.launches[0].Block<GkBinaryParams>();
  EXPECT_EQ(strided.rank, 2);
  EXPECT_EQ(strided.dims[0], 2);
  EXPECT_EQ(strided.dims[1], 3);
  EXPECT_EQ(strided.b.mode, GK_OPERAND_STRIDED);
  EXPECT_EQ(strided.b.strides[0], 0);
  EXPECT_EQ(strided.b.strides[1], 1);
  EXPECT_EQ(device_.launches[1].Block<GkBinaryParams>().b.mode, GK_OPERAND_REPEAT);
}

TEST_F(BuiltinOpRunnerTest, InputOfAnotherDtypeIsCastIntoATemporaryFreedAfterTheWork) {
  ASSERT_THAT(Run("add", {Array(DType::kInt32, {5}), Array(DType::kFloat32, {5})}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  EXPECT_EQ(device_.launches[0].kernel, "image-cast:gk_cast_i32_f32");
  EXPECT_EQ(device_.launches[0].Block<GkCastParams>().count, 5);
  const uint64_t temporary = device_.launches[0].args[0].buffer.value;
  EXPECT_EQ(device_.launches[1].kernel, "image-binary:gk_add_f32");
  EXPECT_EQ(device_.launches[1].args[1].buffer.value, temporary);
  EXPECT_THAT(device_.allocated, ElementsAre(20));
  EXPECT_TRUE(device_.live.empty()) << "the temporary is freed";
  EXPECT_EQ(device_.waits_with_temporaries, 1) << "after waiting for the work";
}

TEST_F(BuiltinOpRunnerTest, AstypeCopiesWithinADtypeAndCastsAcross) {
  ASSERT_THAT(Run("astype", {Array(DType::kBFloat16, {3})}, {{"dtype", DType::kBFloat16}}), IsOk());
  ASSERT_EQ(device_.copies.size(), 1u);
  EXPECT_EQ(device_.copies[0].bytes, 6);
  EXPECT_TRUE(device_.launches.empty());
  ASSERT_THAT(Run("astype", {Array(DType::kBFloat16, {3})}, {{"dtype", DType::kUInt8}}), IsOk());
  EXPECT_EQ(OnlyLaunch().kernel, "image-cast:gk_cast_bf16_u8");
}

TEST_F(BuiltinOpRunnerTest, LongFullReductionSplitsIntoSlicesAndCombinesThePartials) {
  ASSERT_THAT(Run("sum", {Array(DType::kFloat32, {1 << 20})}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  const RecordedLaunch& rows = device_.launches[0];
  EXPECT_EQ(rows.kernel, "image-reduce:gk_reduce_rows_sum_f32");
  const auto p = rows.Block<GkReduceParams>();
  EXPECT_EQ(p.outer, 1);
  EXPECT_EQ(p.extent, 1 << 20);
  EXPECT_EQ(p.inner, 1);
  EXPECT_EQ(rows.config.grid[0], 128u) << "2^20 elements in slices of 8192";
  EXPECT_THAT(device_.allocated, ElementsAre(BuiltinOpRunner::kScratchBytes))
      << "the stream's scratch";
  const RecordedLaunch& partials = device_.launches[1];
  EXPECT_EQ(partials.kernel, "image-reduce:gk_reduce_partials_sum_f32");
  int64_t slices;
  std::memcpy(&slices, partials.args[2].bytes, sizeof(slices));
  EXPECT_EQ(slices, 128);
  EXPECT_EQ(device_.waits_with_temporaries, 0) << "a reduction does not wait";
  // The next reduction on the stream reuses the scratch; releasing the stream frees it.
  const uint64_t scratch = rows.args[2].buffer.value;  // `rows` dies as launches_ grows
  ASSERT_THAT(Run("max", {Array(DType::kFloat32, {1 << 20})}), IsOk());
  EXPECT_EQ(device_.allocated.size(), 1u);
  EXPECT_EQ(device_.launches[2].args[2].buffer.value, scratch);
  runner_.ReleaseStream(StreamId{1});
  EXPECT_TRUE(device_.live.empty());
}

TEST_F(BuiltinOpRunnerTest, ShortRowsAndInnerAxesTakeOneLaunch) {
  ASSERT_THAT(Run("mean", {Array(DType::kInt32, {4, 5})}, {{"axis", int64_t{1}}}), IsOk());
  ASSERT_THAT(Run("max", {Array(DType::kFloat16, {4, 5})}, {{"axis", int64_t{0}}}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  EXPECT_EQ(device_.launches[0].kernel, "image-reduce:gk_reduce_rows_mean_i32");
  EXPECT_EQ(device_.launches[0].config.grid[0], 1u);
  EXPECT_EQ(device_.launches[0].config.grid[1], 4u);
  EXPECT_DOUBLE_EQ(device_.launches[0].Block<GkReduceParams>().divisor, 5.0);
  EXPECT_EQ(device_.launches[1].kernel, "image-reduce:gk_reduce_cols_max_f16");
  const auto cols = device_.launches[1].Block<GkReduceParams>();
  EXPECT_EQ(cols.outer, 1);
  EXPECT_EQ(cols.extent, 4);
  EXPECT_EQ(cols.inner, 5);
  EXPECT_TRUE(device_.allocated.empty());
}

TEST_F(BuiltinOpRunnerTest, AxesApartArePermutedReducedLastIntoATemporaryAndReducedAsRows) {
  // [2, 3, 4] over axes 0 and 2: the kept axis first, then the reduced ones; 3 rows of 8.
  ASSERT_THAT(
      Run("mean", {Array(DType::kFloat32, {2, 3, 4})}, {{"axis", std::vector<int64_t>{0, 2}}}),
      IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  const RecordedLaunch& permute = device_.launches[0];
  EXPECT_EQ(permute.kernel, "image-layout:gk_permute_4");
  const auto q = permute.Block<GkPermuteParams>();
  EXPECT_EQ(q.count, 24);
  EXPECT_EQ(q.rank, 3);
  EXPECT_THAT(std::vector<int64_t>(q.dims, q.dims + 3), ElementsAre(3, 2, 4));
  EXPECT_THAT(std::vector<int64_t>(q.in_strides, q.in_strides + 3), ElementsAre(4, 12, 1));
  EXPECT_THAT(device_.allocated, ElementsAre(24 * 4)) << "the permuted copy";
  const RecordedLaunch& rows = device_.launches[1];
  EXPECT_EQ(rows.kernel, "image-reduce:gk_reduce_rows_mean_f32");
  const auto p = rows.Block<GkReduceParams>();
  EXPECT_EQ(p.outer, 3);
  EXPECT_EQ(p.extent, 8);
  EXPECT_EQ(p.inner, 1);
  EXPECT_DOUBLE_EQ(p.divisor, 8.0);
  EXPECT_EQ(rows.args[1].buffer.value, permute.args[0].buffer.value) << "reads the copy";
  EXPECT_EQ(device_.waits_with_temporaries, 1) << "the copy is freed after the work";
}

TEST_F(BuiltinOpRunnerTest, MatmulViewsA1dOperandInPlaceAsARow) {
  ASSERT_THAT(Run("matmul", {Array(DType::kFloat32, {20}), Array(DType::kFloat32, {3, 20, 50})}),
              IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-matmul:gk_matmul_f32");
  const auto p = launch.Block<GkMatmulParams>();
  EXPECT_EQ(p.m, 1);
  EXPECT_EQ(p.k, 20);
  EXPECT_EQ(p.n, 50);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.a_batch_strides[0], 0) << "a is shared by every batch";
  EXPECT_EQ(p.b_batch_strides[0], 1);
  EXPECT_TRUE(device_.allocated.empty()) << "viewed in place, not copied";
}

TEST_F(BuiltinOpRunnerTest, MatmulTilesTheOutputAndBroadcastsTheBatch) {
  ASSERT_THAT(
      Run("matmul", {Array(DType::kBFloat16, {3, 40, 20}), Array(DType::kBFloat16, {20, 50})}),
      IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-matmul:gk_matmul_bf16");
  EXPECT_EQ(launch.config.grid[0], 4u);  // 50 columns in tiles of 16
  EXPECT_EQ(launch.config.grid[1], 3u);  // 40 rows
  EXPECT_EQ(launch.config.grid[2], 3u);
  EXPECT_EQ(launch.config.block[0], 16u);
  EXPECT_EQ(launch.config.block[1], 16u);
  const auto p = launch.Block<GkMatmulParams>();
  EXPECT_EQ(p.m, 40);
  EXPECT_EQ(p.k, 20);
  EXPECT_EQ(p.n, 50);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.a_batch_strides[0], 1);
  EXPECT_EQ(p.b_batch_strides[0], 0) << "b is shared by every batch";
}

TEST_F(BuiltinOpRunnerTest, TransposeReadsThroughPermutedStrides) {
  ASSERT_THAT(Run("transpose", {Array(DType::kInt64, {2, 3, 4})},
                  {{"perm", std::vector<int64_t>{2, 0, 1}}}),
              IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-layout:gk_permute_8");
  const auto p = launch.Block<GkPermuteParams>();
  EXPECT_EQ(p.dims[0], 4);
  EXPECT_EQ(p.in_strides[0], 1);
  EXPECT_EQ(p.in_strides[1], 12);
  EXPECT_EQ(p.in_strides[2], 4);
}

TEST_F(BuiltinOpRunnerTest, EmptyOutputsLaunchNothing) {
  ASSERT_THAT(Run("add", {Array(DType::kFloat32, {0, 3}), Array(DType::kFloat32, {3})}), IsOk());
  ASSERT_THAT(
      Run("reshape", {Array(DType::kFloat32, {0})}, {{"shape", std::vector<int64_t>{0, 2}}}),
      IsOk());
  EXPECT_TRUE(device_.launches.empty());
  EXPECT_TRUE(device_.copies.empty());
}

TEST_F(BuiltinOpRunnerTest, TranscendentalOfIntegersCastsToFloat32First) {
  ASSERT_THAT(Run("exp", {Array(DType::kInt32, {10})}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  EXPECT_EQ(device_.launches[0].kernel, "image-cast:gk_cast_i32_f32");
  EXPECT_EQ(device_.launches[1].kernel, "image-unary:gk_exp_f32");
  EXPECT_EQ(device_.launches[1].Block<GkUnaryParams>().count, 10);
  ASSERT_THAT(Run("neg", {Array(DType::kUInt8, {10})}), IsOk());
  EXPECT_EQ(device_.launches.back().kernel, "image-unary:gk_neg_u8") << "integers stay";
}

TEST_F(BuiltinOpRunnerTest, ClampCarriesBothFormsOfEachBound) {
  ASSERT_THAT(Run("clamp", {Array(DType::kInt64, {4})}, {{"max", int64_t{9}}}), IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-unary:gk_clamp_i64");
  const auto p = launch.Block<GkClampParams>();
  EXPECT_EQ(p.has_min, 0);
  EXPECT_EQ(p.has_max, 1);
  EXPECT_EQ(p.max_int, 9);
  EXPECT_DOUBLE_EQ(p.max_float, 9.0);
}

TEST_F(BuiltinOpRunnerTest, WhereReadsTheConditionInItsOwnDtype) {
  ASSERT_THAT(
      Run("where", {Array(DType::kFloat16, {2, 1}), Array(DType::kFloat32, {3}), FloatScalar(0.5)}),
      IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-unary:gk_where_f32");
  EXPECT_EQ(launch.args[1].buffer.value, 1u) << "the condition is not cast";
  EXPECT_EQ(launch.args[3].kind, KernelArg::Kind::kScalar) << "b is a scalar";
  const auto p = launch.Block<GkWhereParams>();
  EXPECT_EQ(p.count, 6);
  EXPECT_EQ(p.cond_bytes, 2);
  EXPECT_EQ(p.cond_mask, 0x7fffu);
  EXPECT_EQ(p.cond.mode, GK_OPERAND_STRIDED);
  EXPECT_EQ(p.cond.strides[0], 1);
  EXPECT_EQ(p.cond.strides[1], 0);
  EXPECT_EQ(p.a.mode, GK_OPERAND_STRIDED);
  EXPECT_EQ(p.b.mode, GK_OPERAND_SCALAR);
  EXPECT_EQ(p.b.scalar_bits, 0x3f000000u);
}

TEST_F(BuiltinOpRunnerTest, ArgmaxTakesRowsOrColumns) {
  ASSERT_THAT(Run("argmax", {Array(DType::kBFloat16, {6, 100})}, {{"axis", int64_t{1}}}), IsOk());
  ASSERT_THAT(Run("argmax", {Array(DType::kInt32, {6, 100})}, {{"axis", int64_t{0}}}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  EXPECT_EQ(device_.launches[0].kernel, "image-nn:gk_argmax_rows_bf16");
  EXPECT_EQ(device_.launches[0].config.grid[0], 6u) << "a block per row";
  EXPECT_EQ(device_.launches[1].kernel, "image-nn:gk_argmax_cols_i32");
  const auto cols = device_.launches[1].Block<GkLaneParams>();
  EXPECT_EQ(cols.outer, 1);
  EXPECT_EQ(cols.extent, 6);
  EXPECT_EQ(cols.inner, 100);
}

TEST_F(BuiltinOpRunnerTest, NormsTakeABlockPerRowAndNullForAbsentOperands) {
  ASSERT_THAT(Run("layernorm", {Array(DType::kFloat16, {3, 5, 64}), Array(DType::kFloat16, {64})}),
              IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-nn:gk_layernorm_f16");
  EXPECT_EQ(launch.config.grid[0], 15u);
  EXPECT_EQ(launch.config.block[0], 256u);
  EXPECT_EQ(launch.args[2].buffer.value, 2u);
  EXPECT_EQ(launch.args[3].kind, KernelArg::Kind::kScalar) << "no bias: a null pointer";
  const auto p = launch.Block<GkNormParams>();
  EXPECT_EQ(p.rows, 15);
  EXPECT_EQ(p.dim, 64);
  EXPECT_EQ(p.has_weight, 1);
  EXPECT_EQ(p.has_bias, 0);
  EXPECT_DOUBLE_EQ(p.eps, 1e-5);
}

TEST_F(BuiltinOpRunnerTest, SoftmaxAndRopeParameters) {
  ASSERT_THAT(Run("softmax", {Array(DType::kFloat32, {4, 7, 3})}, {{"axis", int64_t{1}}}), IsOk());
  ASSERT_THAT(Run("rope", {Array(DType::kBFloat16, {2, 10, 8})}, {{"offset", int64_t{5}}}), IsOk());
  ASSERT_EQ(device_.launches.size(), 2u);
  EXPECT_EQ(device_.launches[0].kernel, "image-nn:gk_softmax_f32");
  const auto lanes = device_.launches[0].Block<GkLaneParams>();
  EXPECT_EQ(lanes.outer, 4);
  EXPECT_EQ(lanes.extent, 7);
  EXPECT_EQ(lanes.inner, 3);
  EXPECT_EQ(device_.launches[0].config.grid[0], 12u) << "a block per lane";
  EXPECT_EQ(device_.launches[1].kernel, "image-nn:gk_rope_bf16");
  const auto rope = device_.launches[1].Block<GkRopeParams>();
  EXPECT_EQ(rope.rows, 20);
  EXPECT_EQ(rope.seq, 10);
  EXPECT_EQ(rope.dim, 8);
  EXPECT_EQ(rope.offset, 5);
  EXPECT_DOUBLE_EQ(rope.base, 10000.0);
}

TEST_F(BuiltinOpRunnerTest, AttentionIsABlockPerQueryRowAndRefusesHugeHeadDims) {
  ASSERT_THAT(Run("attention",
                  {Array(DType::kFloat16, {2, 3, 64}), Array(DType::kFloat16, {2, 9, 64}),
                   Array(DType::kFloat16, {2, 9, 32})},
                  {{"causal", true}}),
              IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-nn:gk_attention_f16");
  EXPECT_EQ(launch.config.grid[0], 6u);
  const auto p = launch.Block<GkAttentionParams>();
  EXPECT_EQ(p.sq, 3);
  EXPECT_EQ(p.sk, 9);
  EXPECT_EQ(p.d, 64);
  EXPECT_EQ(p.dv, 32);
  EXPECT_EQ(p.causal, 1);
  EXPECT_DOUBLE_EQ(p.scale, 0.125);
  EXPECT_THAT(
      Run("attention", {Array(DType::kFloat32, {1, 1, 2048}), Array(DType::kFloat32, {1, 1, 2048}),
                        Array(DType::kFloat32, {1, 1, 4})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit of 1024")));
}

TEST_F(BuiltinOpRunnerTest, EmbeddingConvertsNeitherInput) {
  ASSERT_THAT(Run("embedding", {Array(DType::kBFloat16, {50, 16}), Array(DType::kInt64, {4, 3})}),
              IsOk());
  const RecordedLaunch& launch = OnlyLaunch();
  EXPECT_EQ(launch.kernel, "image-layout:gk_embedding_i64_2");
  EXPECT_EQ(launch.args[1].buffer.value, 1u);
  EXPECT_EQ(launch.args[2].buffer.value, 2u);
  const auto p = launch.Block<GkEmbeddingParams>();
  EXPECT_EQ(p.count, 12);
  EXPECT_EQ(p.vocab, 50);
  EXPECT_EQ(p.dim, 16);
  EXPECT_TRUE(device_.allocated.empty());
}

TEST_F(BuiltinOpRunnerTest, ConcatCopiesEachInputIntoItsSlab) {
  ASSERT_THAT(Run("concat",
                  {Array(DType::kFloat32, {2, 3}), Array(DType::kFloat32, {2, 0}),
                   Array(DType::kInt32, {2, 5})},
                  {{"axis", int64_t{1}}}),
              IsOk());
  // The int32 input is cast to float32; the empty one launches nothing.
  ASSERT_EQ(device_.launches.size(), 3u);
  EXPECT_EQ(device_.launches[0].kernel, "image-layout:gk_concat_4");
  const auto first = device_.launches[0].Block<GkConcatParams>();
  EXPECT_EQ(first.outer, 2);
  EXPECT_EQ(first.in_chunk, 3);
  EXPECT_EQ(first.out_chunk, 8);
  EXPECT_EQ(first.offset, 0);
  EXPECT_EQ(device_.launches[1].kernel, "image-cast:gk_cast_i32_f32");
  const auto third = device_.launches[2].Block<GkConcatParams>();
  EXPECT_EQ(third.in_chunk, 5);
  EXPECT_EQ(third.offset, 3);
  EXPECT_TRUE(device_.live.empty());
}

TEST(BuiltinOpRunnerCompileTest, ABuiltinSourceThatDoesNotCompileIsAnInternalError) {
  RecordingDevice device;
  BuiltinOpRunner runner(device, [](absl::string_view, absl::string_view, absl::string_view) {
    return absl::StatusOr<std::string>(absl::InvalidArgumentError("error: expected a ';'"));
  });
  EXPECT_THAT(runner.Kernel("binary", "gk_add_f32"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("expected a ';'")));
  EXPECT_THAT(runner.Kernel("nonesuch", "k"), StatusIs(absl::StatusCode::kInternal));
}

TEST(BuiltinOpRunnerCompileTest, EveryOpTheRunnerSupportsIsABuiltinOpAndEveryModuleIsEmbedded) {
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    // The fault-injection ops of test builds run on the CPU backend only.
    if (IsTestOnlyOp(op.name)) {
      EXPECT_FALSE(BuiltinOpRunner::Supports(op.name)) << op.name;
      continue;
    }
    EXPECT_TRUE(BuiltinOpRunner::Supports(op.name)) << op.name << " has no device kernels";
  }
  std::vector<std::string> modules;
  for (const kernels::EmbeddedKernelSource& s : kernels::EmbeddedKernelSources()) {
    modules.push_back(std::string(s.name));
  }
  EXPECT_THAT(modules, ::testing::UnorderedElementsAre("binary", "cast", "reduce", "layout",
                                                       "matmul", "unary", "nn"));
}

// ---- Where modules come from: precompiled fatbins, the compiler, the warm-up ----

// Two modules of the real sources, "binary" with a (fake) fatbin and "cast" without one.
std::vector<kernels::EmbeddedKernelSource> BinaryWithFatbinCastWithout() {
  std::vector<kernels::EmbeddedKernelSource> modules;
  for (const kernels::EmbeddedKernelSource& s : kernels::EmbeddedKernelSources()) {
    if (s.name == "binary") modules.push_back({s.name, s.text, "FATBIN-binary"});
    if (s.name == "cast") modules.push_back({s.name, s.text, {}});
  }
  return modules;
}

// Every real module, without fatbins.
std::vector<kernels::EmbeddedKernelSource> SourcesOnly() {
  std::vector<kernels::EmbeddedKernelSource> modules;
  for (const kernels::EmbeddedKernelSource& s : kernels::EmbeddedKernelSources()) {
    modules.push_back({s.name, s.text, {}});
  }
  return modules;
}

// A compiler that records what it is asked to compile (from any thread) and returns
// "image-<module>", or `failure` when that is set.
class RecordingCompiler {
 public:
  explicit RecordingCompiler(absl::Status failure = absl::OkStatus()) : failure_(failure) {}
  ModuleCompiler Get() {
    return [this](absl::string_view module, absl::string_view, absl::string_view) {
      absl::MutexLock lock(&mu_);
      compiled_.push_back(std::string(module));
      changed_.SignalAll();
      if (!failure_.ok()) return absl::StatusOr<std::string>(failure_);
      return absl::StatusOr<std::string>(absl::StrCat("image-", module));
    };
  }
  std::vector<std::string> compiled() {
    absl::MutexLock lock(&mu_);
    return compiled_;
  }
  // Blocks until `count` compiles were asked for (the warm-up runs on its own threads).
  void AwaitCompiled(size_t count) {
    absl::MutexLock lock(&mu_);
    while (compiled_.size() < count) changed_.Wait(&mu_);
  }

 private:
  const absl::Status failure_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  std::vector<std::string> compiled_ ABSL_GUARDED_BY(mu_);
};

OpLaunch AddLaunch() {
  OpLaunch launch;
  launch.op = *OpRegistry::Builtin().Find("add");
  launch.plan = *OpRegistry::Builtin().Plan(
      *launch.op, {Array(DType::kFloat32, {4}), Array(DType::kFloat32, {4})}, {});
  launch.output = BufferId{99};
  for (uint64_t i = 1; i <= 2; ++i) {
    OpOperand operand;
    operand.desc = {DType::kFloat32, {4}};
    operand.buffer = BufferId{i};
    launch.inputs.push_back(operand);
  }
  return launch;
}

TEST(BuiltinOpRunnerModulesTest, TakesThePrecompiledImageWhenPresentAndCompilesOtherwise) {
  RecordingDevice device;
  RecordingCompiler compiler;
  const std::vector<kernels::EmbeddedKernelSource> modules = BinaryWithFatbinCastWithout();
  BuiltinOpRunner runner(device,
                         {.compile = compiler.Get(), .modules = modules, .use_precompiled = true});
  ASSERT_THAT(runner.Kernel("binary", "gk_add_f32"), IsOk());
  EXPECT_THAT(compiler.compiled(), IsEmpty());
  EXPECT_THAT(device.loaded, ElementsAre("FATBIN-binary"));
  EXPECT_EQ(runner.Origin("binary"), ModuleOrigin::kPrecompiled);
  EXPECT_EQ(runner.Origin("cast"), ModuleOrigin::kNotLoaded);

  ASSERT_THAT(runner.Kernel("cast", "gk_cast_f32_f16"), IsOk());
  EXPECT_THAT(compiler.compiled(), ElementsAre("cast"));
  EXPECT_THAT(device.loaded, ElementsAre("FATBIN-binary", "image-cast"));
  EXPECT_EQ(runner.Origin("cast"), ModuleOrigin::kCompiled);
}

TEST(BuiltinOpRunnerModulesTest, CompilesEveryModuleWhenTheFatbinsAreNotToBeUsed) {
  RecordingDevice device;
  RecordingCompiler compiler;
  const std::vector<kernels::EmbeddedKernelSource> modules = BinaryWithFatbinCastWithout();
  BuiltinOpRunner runner(device,
                         {.compile = compiler.Get(), .modules = modules, .use_precompiled = false});
  ASSERT_THAT(runner.Kernel("binary", "gk_add_f32"), IsOk());
  EXPECT_THAT(compiler.compiled(), ElementsAre("binary"));
  EXPECT_THAT(device.loaded, ElementsAre("image-binary"));
  EXPECT_EQ(runner.Origin("binary"), ModuleOrigin::kCompiled);
}

TEST(BuiltinOpRunnerModulesTest, AFatbinTheDeviceRefusesIsCompiledAndNoOtherFatbinIsTried) {
  RecordingDevice device;
  device.refused_prefix = "FATBIN";
  RecordingCompiler compiler;
  std::vector<kernels::EmbeddedKernelSource> modules = BinaryWithFatbinCastWithout();
  modules[1].fatbin = "FATBIN-cast";
  BuiltinOpRunner runner(device,
                         {.compile = compiler.Get(), .modules = modules, .use_precompiled = true});
  ASSERT_THAT(runner.Kernel("binary", "gk_add_f32"), IsOk());
  ASSERT_THAT(runner.Kernel("cast", "gk_cast_f32_f16"), IsOk());
  EXPECT_THAT(device.refused, ElementsAre("FATBIN-binary"));
  EXPECT_THAT(compiler.compiled(), ElementsAre("binary", "cast"));
  EXPECT_THAT(device.loaded, ElementsAre("image-binary", "image-cast"));
  EXPECT_EQ(runner.Origin("binary"), ModuleOrigin::kCompiled);
}

TEST(BuiltinOpRunnerModulesTest, WithoutACompilerOnlyPrecompiledModulesLoad) {
  RecordingDevice device;
  const std::vector<kernels::EmbeddedKernelSource> modules = BinaryWithFatbinCastWithout();
  BuiltinOpRunner runner(device, {.compile = nullptr, .modules = modules, .use_precompiled = true});
  EXPECT_THAT(runner.Kernel("binary", "gk_add_f32"), IsOk());
  EXPECT_THAT(runner.Kernel("cast", "gk_cast_f32_f16"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no NVRTC JIT compiler")));
  EXPECT_THAT(device.loaded, ElementsAre("FATBIN-binary"));
}

TEST(BuiltinOpRunnerModulesTest, WarmUpCompilesTheCommonestModulesFirst) {
  RecordingDevice device;
  RecordingCompiler compiler;
  const std::vector<kernels::EmbeddedKernelSource> modules = SourcesOnly();
  BuiltinOpRunner runner(device, {.compile = compiler.Get(), .modules = modules});
  runner.StartWarmUp(1);
  compiler.AwaitCompiled(7);
  runner.StopWarmUp();
  EXPECT_THAT(compiler.compiled(),
              ElementsAre("binary", "cast", "reduce", "unary", "matmul", "layout", "nn"));
  EXPECT_EQ(device.loaded.size(), 7u);
  EXPECT_EQ(runner.Origin("nn"), ModuleOrigin::kCompiled);
}

TEST(BuiltinOpRunnerModulesTest, AnOpDuringTheWarmUpWaitsForItsModuleAndNothingCompilesTwice) {
  RecordingDevice device;
  RecordingCompiler compiler;
  const std::vector<kernels::EmbeddedKernelSource> modules = SourcesOnly();
  BuiltinOpRunner runner(device, {.compile = compiler.Get(), .modules = modules});
  runner.StartWarmUp(3);
  ASSERT_THAT(runner.Run(AddLaunch(), StreamId{1}), IsOk());  // races the warm-up's "binary"
  compiler.AwaitCompiled(7);
  runner.StopWarmUp();
  EXPECT_THAT(compiler.compiled(),
              UnorderedElementsAre("binary", "cast", "reduce", "unary", "matmul", "layout", "nn"));
  ASSERT_EQ(device.launches.size(), 1u);
  EXPECT_EQ(device.launches[0].kernel, "image-binary:gk_add_f32");
}

TEST(BuiltinOpRunnerModulesTest, AFailedWarmUpLoadIsMetAgainByTheOp) {
  RecordingDevice device;
  RecordingCompiler compiler(absl::DeadlineExceededError("compile took longer than 30s"));
  const std::vector<kernels::EmbeddedKernelSource> modules = SourcesOnly();
  BuiltinOpRunner runner(device, {.compile = compiler.Get(), .modules = modules});
  runner.StartWarmUp(2);
  compiler.AwaitCompiled(7);  // every module failed once
  runner.StopWarmUp();
  EXPECT_THAT(runner.Kernel("binary", "gk_add_f32"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("longer than 30s")));
  EXPECT_EQ(compiler.compiled().size(), 8u) << "the op compiled again: no failure is kept";
  EXPECT_THAT(device.loaded, IsEmpty());
  EXPECT_EQ(runner.Origin("binary"), ModuleOrigin::kNotLoaded);
}

}  // namespace
}  // namespace gpukit
