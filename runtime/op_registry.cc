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

}  // namespace

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
  for (const auto& [name, value] : attrs) {
    if (std::find(op.attrs.begin(), op.attrs.end(), name) == op.attrs.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op \"", op.name, "\" has no attribute ", QuoteName(name),
          op.attrs.empty() ? "" : absl::StrCat("; it accepts ", absl::StrJoin(op.attrs, ", "))));
    }
  }
  return op.plan(inputs, attrs);
}

}  // namespace gpukit
