#include "daemon/service/request_strings.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "gpukit/v1/compute.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/utf8.h"

namespace gpukit::service {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Program text: newlines and tabs belong there, and its size has the compiler's own bound.
constexpr absl::string_view kExemptFields[] = {"gpukit.v1.CompileKernelRequest.source",
                                               "gpukit.v1.KernelHeader.source"};

bool IsExempt(const FieldDescriptor& field) {
  for (absl::string_view exempt : kExemptFields) {
    if (field.full_name() == exempt) return true;
  }
  return false;
}

// Whether `value` keeps the rule; ValidateRequestString says how it does not.
bool KeepsTheRule(absl::string_view value) {
  if (value.size() > kMaxRequestStringBytes) return false;
  // Printable ASCII (what handles, ids and op names are) keeps it: no decoding needed.
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return true;
  }
  size_t i = 0;
  while (i < value.size()) {
    char32_t cp = 0;
    const int length = DecodeUtf8(value.substr(i), &cp);
    if (length == 0 || IsDisplayControl(cp)) return false;
    i += static_cast<size_t>(length);
  }
  return true;
}

// What the walk looks at in messages of one type, worked out once per type: the string
// fields (less the exempt ones) and the message fields under which a string may sit, in field
// number order (ListFields's order, so that the first error found stays the same).
struct TypePlan {
  struct Step {
    const FieldDescriptor* field = nullptr;
    const TypePlan* child = nullptr;  // the message field's type; null for a string field
  };
  std::vector<Step> steps;
};

// The plans of every type reachable from a request type, built on first use and never changed
// after: a walk takes the lock once per request, to find its root plan.
class TypePlans {
 public:
  static TypePlans& Get() {
    static TypePlans* plans = new TypePlans();  // never destroyed: used until exit
    return *plans;
  }

  const TypePlan& For(const Descriptor* type) {
    {
      absl::ReaderMutexLock lock(&mu_);
      if (auto it = plans_.find(type); it != plans_.end()) return *it->second;
    }
    absl::MutexLock lock(&mu_);
    return BuildLocked(type);
  }

 private:
  // Whether a string field may sit in a message of `type`, at any depth (`seen`: the types on
  // the way there, counted as holding one: a cycle adds nothing new).
  static bool MayHoldStrings(const Descriptor* type, absl::flat_hash_set<const Descriptor*>& seen) {
    if (!seen.insert(type).second) return true;
    for (int i = 0; i < type->field_count(); ++i) {
      const FieldDescriptor* field = type->field(i);
      if (field->type() == FieldDescriptor::TYPE_STRING && !IsExempt(*field)) return true;
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
          MayHoldStrings(field->message_type(), seen)) {
        return true;
      }
    }
    return false;
  }

  const TypePlan& BuildLocked(const Descriptor* type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (auto it = plans_.find(type); it != plans_.end()) return *it->second;
    // In the map before its fields are planned, so that a type that holds itself ends.
    TypePlan& plan = *plans_.emplace(type, std::make_unique<TypePlan>()).first->second;
    std::vector<TypePlan::Step> steps;
    for (int i = 0; i < type->field_count(); ++i) {
      const FieldDescriptor* field = type->field(i);
      if (field->type() == FieldDescriptor::TYPE_STRING && !IsExempt(*field)) {
        steps.push_back({field, nullptr});
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        absl::flat_hash_set<const Descriptor*> seen;
        if (MayHoldStrings(field->message_type(), seen)) {
          steps.push_back({field, &BuildLocked(field->message_type())});
        }
      }
    }
    std::sort(steps.begin(), steps.end(), [](const TypePlan::Step& a, const TypePlan::Step& b) {
      return a.field->number() < b.field->number();
    });
    plan.steps = std::move(steps);
    return plan;
  }

  absl::Mutex mu_;
  absl::flat_hash_map<const Descriptor*, std::unique_ptr<TypePlan>> plans_ ABSL_GUARDED_BY(mu_);
};

// Where a value sits in the request, as a chain on the walk's stack; spelled out (Render) only
// for an error, so that a valid request costs no string building. A step is a field, with an
// index when the field is repeated, or a map key (`key`: then the field's entry is named by
// it, or `is_key` for the key itself).
struct PathStep {
  const PathStep* parent = nullptr;
  const FieldDescriptor* field = nullptr;
  int index = -1;
  const std::string* key = nullptr;
  bool is_key = false;
};

std::string Render(const PathStep* step) {
  if (step == nullptr) return "";
  std::string out = Render(step->parent);
  if (!out.empty()) out += ".";
  out += step->field->name();
  if (step->is_key) {
    out += " key";
  } else if (step->key != nullptr) {
    absl::StrAppend(&out, "[\"", *step->key, "\"]");
  } else if (step->index >= 0) {
    absl::StrAppend(&out, "[", step->index, "]");
  }
  return out;
}

absl::Status CheckString(const PathStep& step, const std::string& value) {
  if (KeepsTheRule(value)) return absl::OkStatus();
  return ValidateRequestString(Render(&step), value);
}

absl::Status ValidateMessage(const Message& message, const TypePlan& plan, const PathStep* parent);

// The `index`th entry of the map field `field` (of the message at `parent`; `plan` is the
// entry type's): its key first (once valid, it names the value: "attrs[\"axis\"]"), then its
// value.
absl::Status ValidateMapEntry(const Message& entry, const TypePlan& plan, const PathStep* parent,
                              const FieldDescriptor* field, int index) {
  const Reflection& reflection = *entry.GetReflection();
  const FieldDescriptor* key = entry.GetDescriptor()->map_key();
  const FieldDescriptor* value = entry.GetDescriptor()->map_value();
  PathStep step{parent, field, index};
  std::string key_scratch;
  if (key->type() == FieldDescriptor::TYPE_STRING) {
    const std::string& key_value = reflection.GetStringReference(entry, key, &key_scratch);
    GPUKIT_RETURN_IF_ERROR(CheckString(PathStep{parent, field, -1, nullptr, true}, key_value));
    step.key = &key_value;
  }
  if (value->type() == FieldDescriptor::TYPE_STRING) {
    std::string scratch;
    return CheckString(step, reflection.GetStringReference(entry, value, &scratch));
  }
  if (value->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && reflection.HasField(entry, value)) {
    for (const TypePlan::Step& s : plan.steps) {
      if (s.field == value) {
        return ValidateMessage(reflection.GetMessage(entry, value), *s.child, &step);
      }
    }
  }
  return absl::OkStatus();
}

// Checks every set string field of `message` (of the type `plan` was made for; at `parent`
// in the request, null for the request itself), and recurses into its set message fields.
absl::Status ValidateMessage(const Message& message, const TypePlan& plan, const PathStep* parent) {
  const Reflection& reflection = *message.GetReflection();
  for (const TypePlan::Step& s : plan.steps) {
    const FieldDescriptor* field = s.field;
    const bool repeated = field->is_repeated();
    int count = 0;
    if (repeated) {
      count = reflection.FieldSize(message, field);
    } else if (field->has_presence()) {
      count = reflection.HasField(message, field) ? 1 : 0;
    } else {
      count = 1;  // a proto3 string without presence: an unset one is empty, and passes
    }
    if (s.child == nullptr) {
      std::string scratch;
      for (int i = 0; i < count; ++i) {
        const std::string& value =
            repeated ? reflection.GetRepeatedStringReference(message, field, i, &scratch)
                     : reflection.GetStringReference(message, field, &scratch);
        GPUKIT_RETURN_IF_ERROR(CheckString(PathStep{parent, field, repeated ? i : -1}, value));
      }
      continue;
    }
    for (int i = 0; i < count; ++i) {
      const Message& child = repeated ? reflection.GetRepeatedMessage(message, field, i)
                                      : reflection.GetMessage(message, field);
      if (field->is_map()) {
        GPUKIT_RETURN_IF_ERROR(ValidateMapEntry(child, *s.child, parent, field, i));
      } else {
        const PathStep step{parent, field, repeated ? i : -1};
        GPUKIT_RETURN_IF_ERROR(ValidateMessage(child, *s.child, &step));
      }
    }
  }
  return absl::OkStatus();
}

// The fields of SubmitRequest and below that ValidateSubmitRequestStrings reads through the
// generated accessors, for naming a value's path in an error.
struct SubmitFields {
  const FieldDescriptor* session_id = nullptr;
  const FieldDescriptor* ops = nullptr;
  const FieldDescriptor* run = nullptr;
  const FieldDescriptor* free = nullptr;
  const FieldDescriptor* op = nullptr;
  const FieldDescriptor* inputs = nullptr;
  const FieldDescriptor* handle = nullptr;
  const TypePlan* run_plan = nullptr;  // for a run op with attributes
};

const SubmitFields& SubmitFieldsOnce() {
  static const SubmitFields* fields = [] {
    auto* f = new SubmitFields();  // never destroyed: used until exit
    f->session_id = v1::SubmitRequest::descriptor()->FindFieldByName("session_id");
    f->ops = v1::SubmitRequest::descriptor()->FindFieldByName("ops");
    f->run = v1::PipelinedOp::descriptor()->FindFieldByName("run");
    f->free = v1::PipelinedOp::descriptor()->FindFieldByName("free");
    f->op = v1::PipelinedRunOp::descriptor()->FindFieldByName("op");
    f->inputs = v1::PipelinedRunOp::descriptor()->FindFieldByName("inputs");
    f->handle = v1::Operand::descriptor()->FindFieldByName("handle");
    f->run_plan = &TypePlans::Get().For(v1::PipelinedRunOp::descriptor());
    return f;
  }();
  return *fields;
}

}  // namespace

absl::Status ValidateSubmitRequestStrings(const v1::SubmitRequest& request) {
  const SubmitFields& f = SubmitFieldsOnce();
  GPUKIT_RETURN_IF_ERROR(CheckString(PathStep{nullptr, f.session_id}, request.session_id()));
  for (int i = 0; i < request.ops_size(); ++i) {
    const v1::PipelinedOp& op = request.ops(i);
    const PathStep op_step{nullptr, f.ops, i};
    if (op.has_free()) {
      GPUKIT_RETURN_IF_ERROR(CheckString(PathStep{&op_step, f.free}, op.free()));
      continue;
    }
    if (!op.has_run()) continue;
    const v1::PipelinedRunOp& run = op.run();
    const PathStep run_step{&op_step, f.run};
    if (run.attrs_size() > 0) {
      // Maps go through reflection, as in every other request: the whole op, in field order.
      GPUKIT_RETURN_IF_ERROR(ValidateMessage(run, *f.run_plan, &run_step));
      continue;
    }
    GPUKIT_RETURN_IF_ERROR(CheckString(PathStep{&run_step, f.op}, run.op()));
    for (int j = 0; j < run.inputs_size(); ++j) {
      if (!run.inputs(j).has_handle()) continue;
      const PathStep input_step{&run_step, f.inputs, j};
      GPUKIT_RETURN_IF_ERROR(CheckString(PathStep{&input_step, f.handle}, run.inputs(j).handle()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequestString(absl::string_view field, absl::string_view value) {
  if (value.size() > kMaxRequestStringBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", value.size(),
                                                   " bytes long; at most ", kMaxRequestStringBytes,
                                                   " are allowed"));
  }
  size_t i = 0;
  while (i < value.size()) {
    char32_t cp = 0;
    const int length = DecodeUtf8(value.substr(i), &cp);
    if (length == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s is not valid UTF-8 (byte %d is 0x%02x); strings in requests must "
                          "be printable UTF-8",
                          field, i, static_cast<unsigned char>(value[i])));
    }
    if (IsDisplayControl(cp)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s holds control character U+%04X at byte %d; strings in requests "
                          "must be printable UTF-8",
                          field, static_cast<uint32_t>(cp), i));
    }
    i += static_cast<size_t>(length);
  }
  return absl::OkStatus();
}

absl::Status ValidateRequestStrings(const google::protobuf::Message& request) {
  return ValidateMessage(request, TypePlans::Get().For(request.GetDescriptor()), nullptr);
}

}  // namespace gpukit::service
