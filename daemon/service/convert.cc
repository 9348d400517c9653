#include "daemon/service/convert.h"

#include "absl/strings/str_cat.h"
#include "daemon/scheduler/admission.h"
#include "proto/dtype_convert.h"
#include "runtime/base/status_macros.h"

namespace gpukit::service {

void ToProto(const ArrayView& view, v1::ArrayInfo* info) {
  info->set_handle(view.handle);
  info->mutable_shape()->Assign(view.desc.shape.begin(), view.desc.shape.end());
  info->set_dtype(DTypeToProto(view.desc.dtype));
  info->set_size_bytes(view.bytes);
  info->set_device_index(view.device_index);
}

absl::StatusOr<AttrMap> FromProto(const google::protobuf::Map<std::string, v1::AttrValue>& attrs) {
  AttrMap out;
  for (const auto& [name, value] : attrs) {
    const std::string field = absl::StrCat("attrs[\"", name.substr(0, 64), "\"]");
    switch (value.value_case()) {
      case v1::AttrValue::kIntValue:
        out.emplace(name, value.int_value());
        break;
      case v1::AttrValue::kFloatValue:
        out.emplace(name, value.float_value());
        break;
      case v1::AttrValue::kBoolValue:
        out.emplace(name, value.bool_value());
        break;
      case v1::AttrValue::kDtypeValue: {
        GPUKIT_ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(value.dtype_value(), field));
        out.emplace(name, dtype);
        break;
      }
      case v1::AttrValue::kIntList:
        out.emplace(name, std::vector<int64_t>(value.int_list().values().begin(),
                                               value.int_list().values().end()));
        break;
      case v1::AttrValue::kStringValue:
        out.emplace(name, value.string_value());
        break;
      case v1::AttrValue::VALUE_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat(field, " has no value"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<OpInput>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Operand>& inputs) {
  std::vector<OpInput> out;
  out.reserve(inputs.size());
  for (int i = 0; i < inputs.size(); ++i) {
    const v1::Operand& operand = inputs[i];
    OpInput input;
    switch (operand.value_case()) {
      case v1::Operand::kHandle:
        input.handle = operand.handle();
        break;
      case v1::Operand::kScalar:
        input.is_scalar = true;
        if (operand.scalar().value_case() == v1::Scalar::kFloatValue) {
          input.scalar.is_float = true;
          input.scalar.float_value = operand.scalar().float_value();
        } else if (operand.scalar().value_case() == v1::Scalar::kIntValue) {
          input.scalar.int_value = operand.scalar().int_value();
        } else {
          return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "].scalar has no value"));
        }
        break;
      case v1::Operand::VALUE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrCat("inputs[", i, "] is neither a handle nor a scalar"));
    }
    out.push_back(std::move(input));
  }
  return out;
}

grpc::Status ToGrpc(const absl::Status& status, grpc::ServerContext* context) {
  if (status.ok()) return grpc::Status::OK;
  if (context != nullptr) {
    if (RejectReason reason = ReasonOf(status); reason != RejectReason::kNone) {
      context->AddTrailingMetadata("gpukit-reason", std::string(RejectReasonName(reason)));
    }
  }
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace gpukit::service
