#include "runtime/op_registry.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpukit {
namespace {

// Quotes a client-supplied name for an error message: escaped and cut to 64 characters,
// so that a huge name cannot make the status exceed gRPC's metadata limit (the client would
// then get RESOURCE_EXHAUSTED instead of the error).
std::string QuoteName(absl::string_view name) {
  return absl::StrCat("\"", absl::CHexEscape(name.substr(0, 64)),
                      name.size() > 64 ? "...\"" : "\"");
}

absl::string_view ValueTypeName(const AttrValue& value) {
  switch (value.index()) {
    case 0:
      return "an integer";
    case 1:
      return "a float";
    case 2:
      return "a bool";
    case 3:
      return "a dtype";
    case 4:
      return "a list of integers";
    default:
      return "a string";
  }
}

// "float32", "int32 or int64", "float32, float16 or bfloat16".
std::string DTypeList(const std::vector<DType>& dtypes) {
  std::string text;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) absl::StrAppend(&text, i + 1 == dtypes.size() ? " or " : ", ");
    absl::StrAppend(&text, DTypeName(dtypes[i]));
  }
  return text;
}

}  // namespace

absl::string_view AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "an integer";
    case AttrType::kNumber:
      return "a number";
    case AttrType::kBool:
      return "a bool";
    case AttrType::kDType:
      return "a dtype";
    case AttrType::kIntList:
      return "a list of integers";
    case AttrType::kString:
      return "a string";
    case AttrType::kAxes:
      return "an integer or a list of integers";
  }
  return "a value";
}

bool AttrHasType(const AttrValue& value, AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return std::holds_alternative<int64_t>(value);
    case AttrType::kNumber:
      return std::holds_alternative<int64_t>(value) || std::holds_alternative<double>(value);
    case AttrType::kBool:
      return std::holds_alternative<bool>(value);
    case AttrType::kDType:
      return std::holds_alternative<DType>(value);
    case AttrType::kIntList:
      return std::holds_alternative<std::vector<int64_t>>(value);
    case AttrType::kString:
      return std::holds_alternative<std::string>(value);
    case AttrType::kAxes:
      return std::holds_alternative<int64_t>(value) ||
             std::holds_alternative<std::vector<int64_t>>(value);
  }
  return false;
}

const InputSpec& OpDef::input(int i) const {
  return inputs[std::min<size_t>(static_cast<size_t>(i), inputs.size() - 1)];
}

const AttrSpec* OpDef::FindAttr(absl::string_view attr_name) const {
  for (const AttrSpec& attr : attrs) {
    if (attr.name == attr_name) return &attr;
  }
  return nullptr;
}

OpRegistry::OpRegistry(std::vector<OpDef> ops) : ops_(std::move(ops)) {
  for (size_t i = 0; i < ops_.size(); ++i) index_.emplace(ops_[i].name, i);
}

absl::StatusOr<const OpDef*> OpRegistry::Find(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::vector<absl::string_view> names;
    for (const OpDef& op : ops_) names.push_back(op.name);
    return absl::InvalidArgumentError(
        absl::StrCat("unknown op ", QuoteName(name), "; known ops: ", absl::StrJoin(names, ", ")));
  }
  return &ops_[it->second];
}

absl::StatusOr<OpPlan> OpRegistry::Plan(const OpDef& op, absl::Span<const OperandDesc> inputs,
                                        const AttrMap& attrs) const {
  const int n = static_cast<int>(inputs.size());
  if (n < op.min_inputs || n > op.max_inputs) {
    const std::string expected = op.min_inputs == op.max_inputs
                                     ? absl::StrCat(op.min_inputs)
                                     : absl::StrCat(op.min_inputs, " to ", op.max_inputs);
    return absl::InvalidArgumentError(absl::StrCat("op \"", op.name, "\" takes ", expected,
                                                   expected == "1" ? " input" : " inputs", ", got ",
                                                   n));
  }
  // In the order the planners checked before the table did: attribute names, operands,
  // attribute values.
  for (const auto& [name, value] : attrs) {
    if (op.FindAttr(name) == nullptr) {
      std::vector<absl::string_view> names;
      for (const AttrSpec& attr : op.attrs) names.push_back(attr.name);
      return absl::InvalidArgumentError(absl::StrCat(
          "op \"", op.name, "\" has no attribute ", QuoteName(name),
          names.empty() ? "" : absl::StrCat("; it accepts ", absl::StrJoin(names, ", "))));
    }
  }
  for (int i = 0; i < n && !op.inputs.empty(); ++i) {
    const InputSpec& spec = op.input(i);
    if (inputs[i].is_scalar) {
      if (!spec.scalar_ok) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs[", i, "] of \"", op.name, "\" must be an array, not a scalar"));
      }
      continue;
    }
    const DType dtype = inputs[i].tensor.dtype;
    if (std::find(spec.dtypes.begin(), spec.dtypes.end(), dtype) == spec.dtypes.end()) {
      return absl::InvalidArgumentError(absl::StrCat(op.name, " inputs[", i, "] (", spec.name,
                                                     ") must be ", DTypeList(spec.dtypes), ", got ",
                                                     DTypeName(dtype)));
    }
  }
  for (const auto& [name, value] : attrs) {
    const AttrSpec& spec = *op.FindAttr(name);
    if (!AttrHasType(value, spec.type)) {
      return absl::InvalidArgumentError(absl::StrCat("attribute \"", name, "\" must be ",
                                                     AttrTypeName(spec.type), " for op \"", op.name,
                                                     "\", got ", ValueTypeName(value)));
    }
  }
  for (const AttrSpec& spec : op.attrs) {
    if (spec.required && !attrs.contains(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op.name, " needs attribute \"", spec.name, "\""));
    }
  }
  return op.plan(inputs, attrs);
}

}  // namespace gpukit
