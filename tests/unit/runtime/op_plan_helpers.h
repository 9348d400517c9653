// Operands and planning for the tests of the built-in op planners (op_registry_test,
// numpy_plan_test): an array or scalar operand in one call, and Plan as the daemon does it
// (find the op in the built-in registry, then OpRegistry::Plan).
#ifndef GPUKIT_TESTS_UNIT_RUNTIME_OP_PLAN_HELPERS_H_
#define GPUKIT_TESTS_UNIT_RUNTIME_OP_PLAN_HELPERS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/op_registry.h"

namespace gpukit::testing {

inline OperandDesc Array(DType dtype, Shape shape) {
  OperandDesc d;
  d.tensor = {dtype, std::move(shape)};
  return d;
}
inline OperandDesc IntScalar(int64_t value) {
  OperandDesc d;
  d.is_scalar = true;
  d.scalar.int_value = value;
  return d;
}
inline OperandDesc FloatScalar(double value) {
  OperandDesc d;
  d.is_scalar = true;
  d.scalar.is_float = true;
  d.scalar.float_value = value;
  return d;
}

// Finds `op` in the built-in registry and plans it, as the daemon does.
inline absl::StatusOr<OpPlan> Plan(absl::string_view op, std::vector<OperandDesc> inputs,
                                   const AttrMap& attrs = {}) {
  const OpRegistry& registry = OpRegistry::Builtin();
  absl::StatusOr<const OpDef*> def = registry.Find(op);
  if (!def.ok()) return def.status();
  return registry.Plan(**def, inputs, attrs);
}

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_UNIT_RUNTIME_OP_PLAN_HELPERS_H_
