// OpRegistry: the table of gpukit's built-in ops, the one place where an op is defined.
//
// Each op is one OpDef, registered in runtime/builtin_ops.cc: its name and summary, its
// inputs (how many, which dtypes each accepts, whether it may be a scalar), its attributes
// (name, type, default, one-line doc), a planner that validates operand shapes and attribute
// values and decides the output (shape, dtype) and the dtype the kernel computes in, and its
// kernels: a CPU kernel (runtime/cpu/cpu_op_kernels.h) and a CUDA lowering
// (runtime/cuda/op_lowering.h), each a function or none. Every backend's SupportsOp and
// dispatch, the executor's hello and ListOps read this table; no other file names an op.
//
//   const OpRegistry& ops = OpRegistry::Builtin();
//   GPUKIT_ASSIGN_OR_RETURN(const OpDef* add, ops.Find("add"));
//   GPUKIT_ASSIGN_OR_RETURN(OpPlan plan, ops.Plan(*add, operands, attrs));
//   // allocate plan.output, then device.RunOp({add, plan, inputs, out}, stream)
//
// Thread safety: a registry is immutable once built; Builtin() is safe from any thread.
#ifndef GPUKIT_RUNTIME_OP_REGISTRY_H_
#define GPUKIT_RUNTIME_OP_REGISTRY_H_

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/base/dtype.h"
#include "runtime/base/shape.h"

namespace gpukit {

struct TensorDesc {
  DType dtype = DType::kFloat32;
  Shape shape;
};

// A scalar operand of arithmetic ops.
struct ScalarValue {
  bool is_float = false;
  double float_value = 0;
  int64_t int_value = 0;
};

// What the planner knows of an operand: an array's layout, or a scalar.
struct OperandDesc {
  bool is_scalar = false;
  TensorDesc tensor;   // when !is_scalar
  ScalarValue scalar;  // when is_scalar
};

using AttrValue = std::variant<int64_t, double, bool, DType, std::vector<int64_t>, std::string>;
using AttrMap = absl::flat_hash_map<std::string, AttrValue>;

// Attributes after validation, in the form kernels use.
struct OpParams {
  // argmax, softmax, concat: the axis; argmax reduces everything when nullopt.
  std::optional<int> axis;
  // sum, mean, max, min: the axes reduced, ascending and distinct. Every axis when the op had
  // no "axis" attribute (none for a 0-d input); none for "axis" = [] (NumPy's axis=(): each
  // element is its own result, in the op's output dtype).
  std::vector<int> reduce_axes;
  bool keepdims = false;  // sum, mean, max, min, argmax: reduced axes stay as dimensions of 1
  std::vector<int> perm;  // transpose
  // matmul: float32 may round its inputs to TF32 on the tensor cores (about 1e-3 relative
  // error, several times faster). Backends that compute exactly (CPU, gpukit's own kernel)
  // ignore it; cuBLASLt uses CUBLAS_COMPUTE_32F_FAST_TF32 only when it is set.
  bool allow_tf32 = false;
  // clamp: the bounds, each optional. Integer bounds only reach an integer compute dtype (the
  // planner checked that they fit it); a float bound makes an integer input compute in float32.
  std::optional<ScalarValue> clamp_min;
  std::optional<ScalarValue> clamp_max;
  double eps = 0;            // layernorm, rmsnorm
  double rope_base = 0;      // rope: theta_i = position * rope_base^(-2i / dim)
  int64_t rope_offset = 0;   // rope: position of the first row of the sequence
  bool causal = false;       // attention
  double scale = 0;          // attention: scores are scale * q . k
};

struct OpPlan {
  // Dtype every array operand is converted to before the kernel runs (scalars too).
  DType compute_dtype = DType::kFloat32;
  TensorDesc output;
  OpParams params;
};

// The type of an attribute's value, checked once by OpRegistry::Plan: a planner reads the
// value of an attribute its op declares without checking its type again.
enum class AttrType {
  kInt,      // int64_t
  kNumber,   // double or int64_t (clamp tells them apart; the others read it as a double)
  kBool,     // bool
  kDType,    // DType
  kIntList,  // std::vector<int64_t>
  kString,   // std::string
  kAxes,     // int64_t or std::vector<int64_t>: one axis, or NumPy's tuple of axes
};

// "an integer", "a number", "a bool", "a dtype", "a list of integers", "a string",
// "an integer or a list of integers".
absl::string_view AttrTypeName(AttrType type);
// Whether `value` is of `type`.
bool AttrHasType(const AttrValue& value, AttrType type);

struct AttrSpec {
  std::string name;
  AttrType type = AttrType::kInt;
  bool required = false;
  // What the op does without the attribute, as text for ListOps and docs ("false", "1e-5",
  // "all axes"); empty when `required`.
  std::string default_value;
  std::string doc;  // one line
};

// One input of an op. A variadic op (concat, layernorm's optional inputs) lists one spec per
// position up to max_inputs, except that the last spec stands for every input after it.
struct InputSpec {
  std::string name;           // "a", "x", "indices", ...
  std::vector<DType> dtypes;  // the dtypes it accepts as an array; checked by Plan
  bool scalar_ok = false;     // whether it may be a scalar (a + 1); checked by Plan
};

// Forward declarations of the kernel signatures: OpLaunch is in runtime/device.h, which
// includes this header, and OpLowering is the CUDA backend's (runtime/cuda/op_lowering.h).
struct OpLaunch;
class OpLowering;

// Runs `launch` on the CPU with host addresses already resolved: inputs[i] is the data of
// launch.inputs[i] (nullptr for a scalar operand), `out` the output's.
using CpuOpKernel = absl::Status (*)(const OpLaunch& launch, const std::vector<const void*>& inputs,
                                     void* out);
// Enqueues the op's kernels of kernels/cuda (runtime/cuda/op_lowering.h).
using CudaOpLowering = absl::Status (*)(OpLowering& lowering);

// A vendor library the CUDA device offers the op to before its own lowering, which runs
// what the library declines.
enum class CudaLibrary {
  kNone,
  kCublasLtMatmul,  // cuBLASLt's matmul (runtime/cuda/cublaslt.h, RouteMatmul)
};

struct OpDef {
  std::string name;
  std::string summary;  // one line for ListOps and docs
  int min_inputs = 1;
  int max_inputs = 1;
  // See InputSpec. Every built-in op has at least one; with none (a test's registry), Plan
  // checks no operand's dtype.
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;  // the attributes it accepts; others are rejected
  // Validates operands (count, dtypes and scalars already checked against `inputs`) and
  // attribute values (names and types already checked against `attrs`); returns the plan or
  // INVALID_ARGUMENT naming the operand or attribute and the value.
  absl::StatusOr<OpPlan> (*plan)(absl::Span<const OperandDesc> inputs, const AttrMap& attrs);
  CpuOpKernel cpu = nullptr;      // none: the CPU backend does not run it
  CudaOpLowering cuda = nullptr;  // none: the CUDA backend does not run it
  CudaLibrary cuda_library = CudaLibrary::kNone;
  // Whether the CPU device runs the kernel on its stream's worker thread, never on the
  // thread that enqueues it: work that does not return (_test_hang, _test_abort) must leave
  // RunOp returning, as a GPU's launch returns before its kernel runs.
  bool cpu_on_stream_thread = false;

  // The spec of input `i` (the last one for a variadic op's later inputs); `inputs` must not
  // be empty.
  const InputSpec& input(int i) const;
  // nullptr if the op has no such attribute.
  const AttrSpec* FindAttr(absl::string_view attr_name) const;
};

// Builds with GPUKIT_FAULT_INJECTION (test builds; never a release) add fault-injection ops to
// the built-in registry, named with this prefix: _test_fault (a sticky device fault),
// _test_hang (work that never finishes), _test_abort (the device's process aborts) and
// _test_error (work that fails, the device healthy). Only
// the CPU backend runs them. Code that walks every op (ListOps, docs, the tests that check
// each op has a kernel on every backend) skips them with IsTestOnlyOp.
inline constexpr absl::string_view kTestOnlyOpPrefix = "_test_";
bool IsTestOnlyOp(absl::string_view name);

class OpRegistry {
 public:
  // The registry of gpukit's built-in ops (runtime/builtin_ops.cc); with GPUKIT_FAULT_INJECTION
  // also the test-only ops above.
  static const OpRegistry& Builtin();

  explicit OpRegistry(std::vector<OpDef> ops);

  // INVALID_ARGUMENT "unknown op \"foo\"" if absent.
  absl::StatusOr<const OpDef*> Find(absl::string_view name) const;

  // The checks the table states (operand count; each operand's dtype and whether it may be a
  // scalar; attribute names, types and required ones), then the op's planner. Errors are
  // INVALID_ARGUMENT naming the operand or attribute: "attribute \"axis\" must be an integer
  // for op \"sum\", got a bool".
  absl::StatusOr<OpPlan> Plan(const OpDef& op, absl::Span<const OperandDesc> inputs,
                              const AttrMap& attrs) const;

  const std::vector<OpDef>& ops() const { return ops_; }

 private:
  std::vector<OpDef> ops_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_OP_REGISTRY_H_
