// OpRegistry: the device-independent half of every built-in op.
//
// Each op is an OpDef: its name, how many operands and which attributes it takes, and a
// planner that validates operand shapes, dtypes and attributes and decides the output
// (shape, dtype) and the dtype the kernel computes in. Each backend then carries its own
// kernel table keyed by op name (Device::SupportsOp / RunOp), so adding an op is one OpDef
// here plus one kernel per backend: no new plumbing in the daemon or the API.
//
//   const OpRegistry& ops = OpRegistry::Builtin();
//   GPUKIT_ASSIGN_OR_RETURN(const OpDef* add, ops.Find("add"));
//   GPUKIT_ASSIGN_OR_RETURN(OpPlan plan, add->plan(operands, attrs));
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

struct OpDef {
  std::string name;
  std::string summary;  // one line for ListOps and docs
  int min_inputs = 1;
  int max_inputs = 1;
  std::vector<std::string> attrs;  // accepted attribute names; others are rejected
  // Validates operands (count already checked) and attributes; returns the plan or
  // INVALID_ARGUMENT naming the operand or attribute and the value.
  absl::StatusOr<OpPlan> (*plan)(absl::Span<const OperandDesc> inputs, const AttrMap& attrs);
};

// Builds with GPUKIT_FAULT_INJECTION (test builds; never a release) add fault-injection ops to
// the built-in registry, named with this prefix: _test_fault (a sticky device fault),
// _test_hang (work that never finishes) and _test_abort (the device's process aborts). Only
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

  // Find + operand-count and attribute-name checks + the op's planner.
  absl::StatusOr<OpPlan> Plan(const OpDef& op, absl::Span<const OperandDesc> inputs,
                              const AttrMap& attrs) const;

  const std::vector<OpDef>& ops() const { return ops_; }

 private:
  std::vector<OpDef> ops_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_OP_REGISTRY_H_
