// Definitions (planners) of gpukit's built-in ops. Kernels live per backend: the CPU ones
// in runtime/cpu_op_kernels.cc over kernels/cpu.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/op_registry.h"

namespace gpukit {
namespace {

template <typename T>
absl::StatusOr<std::optional<T>> GetAttr(const AttrMap& attrs, absl::string_view name,
                                         absl::string_view type_name) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return std::optional<T>();
  if (const T* value = std::get_if<T>(&it->second)) return std::optional<T>(*value);
  return absl::InvalidArgumentError(absl::StrCat("attribute \"", name, "\" must be ", type_name));
}

absl::StatusOr<const TensorDesc*> ArrayOperand(absl::Span<const OperandDesc> inputs, int i,
                                               absl::string_view op) {
  if (inputs[i].is_scalar) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs[", i, "] of \"", op, "\" must be an array, not a scalar"));
  }
  return &inputs[i].tensor;
}

// add, sub, mul, div: NumPy broadcasting between arrays, or an array and a scalar.
absl::StatusOr<OpPlan> PlanBinary(absl::Span<const OperandDesc> in, bool true_divide) {
  const OperandDesc& a = in[0];
  const OperandDesc& b = in[1];
  if (a.is_scalar && b.is_scalar) {
    return absl::InvalidArgumentError("at least one input must be an array, got two scalars");
  }
  DType dtype;
  if (!a.is_scalar && !b.is_scalar) {
    dtype = PromoteTypes(a.tensor.dtype, b.tensor.dtype);
  } else {
    const OperandDesc& array = a.is_scalar ? b : a;
    const OperandDesc& scalar = a.is_scalar ? a : b;
    dtype = array.tensor.dtype;
    if (scalar.scalar.is_float && !IsFloating(dtype)) dtype = DType::kFloat32;
  }
  if (true_divide && !IsFloating(dtype)) dtype = DType::kFloat32;
  const Shape empty;
  GPUKIT_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.is_scalar ? empty : a.tensor.shape,
                                                       b.is_scalar ? empty : b.tensor.shape));
  OpPlan plan;
  plan.compute_dtype = dtype;
  plan.output = {dtype, std::move(shape)};
  return plan;
}

absl::StatusOr<OpPlan> PlanAddSubMul(absl::Span<const OperandDesc> in, const AttrMap&) {
  return PlanBinary(in, /*true_divide=*/false);
}
absl::StatusOr<OpPlan> PlanDiv(absl::Span<const OperandDesc> in, const AttrMap&) {
  return PlanBinary(in, /*true_divide=*/true);
}

absl::StatusOr<OpPlan> PlanMatmul(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  GPUKIT_ASSIGN_OR_RETURN(const TensorDesc* a, ArrayOperand(in, 0, "matmul"));
  GPUKIT_ASSIGN_OR_RETURN(const TensorDesc* b, ArrayOperand(in, 1, "matmul"));
  if (a->shape.size() < 2 || b->shape.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul needs inputs of rank >= 2, got ", ShapeToString(a->shape), " and ",
                     ShapeToString(b->shape), " (reshape a vector to [1, n] or [n, 1])"));
  }
  const int64_t m = a->shape[a->shape.size() - 2], k = a->shape.back();
  const int64_t kb = b->shape[b->shape.size() - 2], n = b->shape.back();
  if (k != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul inner dimensions differ: inputs[0] ", ShapeToString(a->shape), " has ",
                     k, " columns, inputs[1] ", ShapeToString(b->shape), " has ", kb, " rows"));
  }
  GPUKIT_ASSIGN_OR_RETURN(
      Shape batch, BroadcastShapes(absl::MakeConstSpan(a->shape).first(a->shape.size() - 2),
                                   absl::MakeConstSpan(b->shape).first(b->shape.size() - 2)));
  batch.push_back(m);
  batch.push_back(n);
  GPUKIT_ASSIGN_OR_RETURN(std::optional<bool> allow_tf32,
                          GetAttr<bool>(attrs, "allow_tf32", "a bool"));
  const DType dtype = PromoteTypes(a->dtype, b->dtype);
  OpPlan plan;
  plan.compute_dtype = dtype;
  plan.output = {dtype, std::move(batch)};
  plan.params.allow_tf32 = allow_tf32.value_or(false);
  return plan;
}

enum class ReduceKind { kSum, kMean, kMax, kMin };

absl::StatusOr<OpPlan> PlanReduce(absl::Span<const OperandDesc> in, const AttrMap& attrs,
                                  ReduceKind kind, absl::string_view op) {
  GPUKIT_ASSIGN_OR_RETURN(const TensorDesc* x, ArrayOperand(in, 0, op));
  GPUKIT_ASSIGN_OR_RETURN(std::optional<int64_t> axis,
                          GetAttr<int64_t>(attrs, "axis", "an integer"));
  GPUKIT_ASSIGN_OR_RETURN(std::optional<bool> keepdims, GetAttr<bool>(attrs, "keepdims", "a bool"));
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.params.keepdims = keepdims.value_or(false);
  const int rank = static_cast<int>(x->shape.size());
  Shape out_shape;
  int64_t reduced = 0;
  if (axis.has_value()) {
    GPUKIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*axis, rank, "attribute \"axis\""));
    plan.params.axis = ax;
    reduced = x->shape[ax];
    for (int i = 0; i < rank; ++i) {
      if (i != ax) {
        out_shape.push_back(x->shape[i]);
      } else if (plan.params.keepdims) {
        out_shape.push_back(1);
      }
    }
  } else {
    GPUKIT_ASSIGN_OR_RETURN(reduced, ElementCount(x->shape));
    if (plan.params.keepdims) out_shape.assign(rank, 1);
  }
  if (reduced == 0 && (kind == ReduceKind::kMax || kind == ReduceKind::kMin)) {
    return absl::InvalidArgumentError(absl::StrCat(op, " of an empty extent (shape ",
                                                   ShapeToString(x->shape), ") has no identity"));
  }
  DType out = x->dtype;
  if (kind == ReduceKind::kSum && !IsFloating(out)) out = DType::kInt64;
  if (kind == ReduceKind::kMean && !IsFloating(out)) out = DType::kFloat32;
  plan.output = {out, std::move(out_shape)};
  return plan;
}

absl::StatusOr<OpPlan> PlanSum(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kSum, "sum");
}
absl::StatusOr<OpPlan> PlanMean(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kMean, "mean");
}
absl::StatusOr<OpPlan> PlanMax(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kMax, "max");
}
absl::StatusOr<OpPlan> PlanMin(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kMin, "min");
}

absl::StatusOr<OpPlan> PlanAstype(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  GPUKIT_ASSIGN_OR_RETURN(const TensorDesc* x, ArrayOperand(in, 0, "astype"));
  GPUKIT_ASSIGN_OR_RETURN(std::optional<DType> dtype, GetAttr<DType>(attrs, "dtype", "a dtype"));
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError("astype needs attribute \"dtype\"");
  }
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.output = {*dtype, x->shape};
  return plan;
}

absl::StatusOr<OpPlan> PlanReshape(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  GPUKIT_ASSIGN_OR_RETURN(const TensorDesc* x, ArrayOperand(in, 0, "reshape"));
  GPUKIT_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> shape,
                          GetAttr<std::vector<int64_t>>(attrs, "shape", "a list of integers"));
  if (!shape.has_value()) {
    return absl::InvalidArgumentError("reshape needs attribute \"shape\"");
  }
  GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(x->shape));
  Shape out = *shape;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
      continue;
    }
    if (out[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("attribute \"shape\"[", i, "] = ", out[i],
                                                     " must be >= 0 (or a single -1)"));
    }
    if (__builtin_mul_overflow(known, out[i], &known)) {
      return absl::InvalidArgumentError("attribute \"shape\" overflows int64 elements");
    }
  }
  if (inferred >= 0) {
    if (known == 0 || count % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeToString(x->shape),
                                                     " into ", ShapeToString(*shape)));
    }
    out[inferred] = count / known;
    known = count;
  }
  if (known != count) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeToString(x->shape), " (",
                                                   count, " elements) into ",
                                                   ShapeToString(*shape)));
  }
  GPUKIT_RETURN_IF_ERROR(ValidateShape(out, "attribute \"shape\""));
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.output = {x->dtype, std::move(out)};
  return plan;
}

absl::StatusOr<OpPlan> PlanTranspose(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  GPUKIT_ASSIGN_OR_RETURN(const TensorDesc* x, ArrayOperand(in, 0, "transpose"));
  GPUKIT_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> perm_attr,
                          GetAttr<std::vector<int64_t>>(attrs, "perm", "a list of integers"));
  const int rank = static_cast<int>(x->shape.size());
  OpPlan plan;
  std::vector<int>& perm = plan.params.perm;
  if (perm_attr.has_value()) {
    if (static_cast<int>(perm_attr->size()) != rank) {
      return absl::InvalidArgumentError(absl::StrCat("attribute \"perm\" has ", perm_attr->size(),
                                                     " entries; the array "
                                                     "has rank ",
                                                     rank));
    }
    std::vector<bool> seen(rank, false);
    for (int i = 0; i < rank; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(int axis, NormalizeAxis((*perm_attr)[i], rank,
                                                      absl::StrCat("attribute \"perm\"[", i, "]")));
      if (seen[axis]) {
        return absl::InvalidArgumentError(absl::StrCat("attribute \"perm\" repeats axis ", axis));
      }
      seen[axis] = true;
      perm.push_back(axis);
    }
  } else {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  Shape out(rank);
  for (int i = 0; i < rank; ++i) out[i] = x->shape[perm[i]];
  plan.compute_dtype = x->dtype;
  plan.output = {x->dtype, std::move(out)};
  return plan;
}

}  // namespace

const OpRegistry& OpRegistry::Builtin() {
  static const OpRegistry* registry = new OpRegistry({
      {"add", "a + b, NumPy broadcasting; either may be a scalar", 2, 2, {}, PlanAddSubMul},
      {"sub", "a - b, NumPy broadcasting; either may be a scalar", 2, 2, {}, PlanAddSubMul},
      {"mul", "a * b, NumPy broadcasting; either may be a scalar", 2, 2, {}, PlanAddSubMul},
      {"div",
       "a / b (true division: integers give float32); either may be a scalar",
       2,
       2,
       {},
       PlanDiv},
      {"matmul",
       "a @ b for [..., m, k] x [..., k, n], batch dims broadcast; allow_tf32: float32 in TF32",
       2,
       2,
       {"allow_tf32"},
       PlanMatmul},
      {"sum",
       "sum of all elements or along axis; integers sum into int64",
       1,
       1,
       {"axis", "keepdims"},
       PlanSum},
      {"mean",
       "mean of all elements or along axis; integers give float32",
       1,
       1,
       {"axis", "keepdims"},
       PlanMean},
      {"max",
       "maximum of all elements or along axis; NaN propagates",
       1,
       1,
       {"axis", "keepdims"},
       PlanMax},
      {"min",
       "minimum of all elements or along axis; NaN propagates",
       1,
       1,
       {"axis", "keepdims"},
       PlanMin},
      {"astype", "convert to attribute dtype", 1, 1, {"dtype"}, PlanAstype},
      {"reshape",
       "same elements in attribute shape (one -1 is inferred)",
       1,
       1,
       {"shape"},
       PlanReshape},
      {"transpose",
       "permute axes by attribute perm (default: reverse them)",
       1,
       1,
       {"perm"},
       PlanTranspose},
  });
  return *registry;
}

}  // namespace gpukit
