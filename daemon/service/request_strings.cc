#include "daemon/service/request_strings.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "runtime/base/status_macros.h"

namespace gpukit::service {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Program text: newlines and tabs belong there, and its size has the compiler's own bound.
constexpr absl::string_view kExemptFields[] = {"gpukit.v1.CompileKernelRequest.source"};

bool IsExempt(const FieldDescriptor& field) {
  for (absl::string_view exempt : kExemptFields) {
    if (field.full_name() == exempt) return true;
  }
  return false;
}

// The length (1 to 4) of the valid UTF-8 sequence that starts `text` (not empty), and its code
// point; 0 when it does not start with one (a stray continuation byte, an overlong form, a
// surrogate, a truncated sequence, or beyond U+10FFFF).
int DecodeUtf8(absl::string_view text, char32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  int length = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  } else if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, cp = lead & 0x1f, min = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, cp = lead & 0x0f, min = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < static_cast<size_t>(length)) return 0;
  for (int i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  *code_point = cp;
  return length;
}

// Code points a terminal or a log viewer acts on, or that reorder or break what follows them.
bool IsControl(char32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

absl::Status ValidateMessage(const Message& message, const std::string& path);

// A map entry of the field at `path`, the `index`th: its key first (once valid, it names the
// value: "attrs[\"axis\"]"), then its value.
absl::Status ValidateMapEntry(const Message& entry, const std::string& path, int index) {
  const Reflection& reflection = *entry.GetReflection();
  const FieldDescriptor* key = entry.GetDescriptor()->map_key();
  const FieldDescriptor* value = entry.GetDescriptor()->map_value();
  std::string value_path = absl::StrCat(path, "[", index, "]");
  if (key->type() == FieldDescriptor::TYPE_STRING) {
    std::string scratch;
    const std::string& key_value = reflection.GetStringReference(entry, key, &scratch);
    GPUKIT_RETURN_IF_ERROR(ValidateRequestString(absl::StrCat(path, " key"), key_value));
    value_path = absl::StrCat(path, "[\"", key_value, "\"]");
  }
  if (value->type() == FieldDescriptor::TYPE_STRING) {
    std::string scratch;
    return ValidateRequestString(value_path, reflection.GetStringReference(entry, value, &scratch));
  }
  if (value->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && reflection.HasField(entry, value)) {
    return ValidateMessage(reflection.GetMessage(entry, value), value_path);
  }
  return absl::OkStatus();
}

// Checks every set string field of `message`, whose path in the request is `path` ("" for the
// request itself), and recurses into its set message fields.
absl::Status ValidateMessage(const Message& message, const std::string& path) {
  const Reflection& reflection = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    const int count = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
    if (field->type() == FieldDescriptor::TYPE_STRING && !IsExempt(*field)) {
      std::string scratch;
      for (int i = 0; i < count; ++i) {
        const std::string& value =
            field->is_repeated()
                ? reflection.GetRepeatedStringReference(message, field, i, &scratch)
                : reflection.GetStringReference(message, field, &scratch);
        GPUKIT_RETURN_IF_ERROR(ValidateRequestString(
            field->is_repeated() ? absl::StrCat(name, "[", i, "]") : name, value));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      for (int i = 0; i < count; ++i) {
        const Message& child = field->is_repeated()
                                   ? reflection.GetRepeatedMessage(message, field, i)
                                   : reflection.GetMessage(message, field);
        if (field->is_map()) {
          GPUKIT_RETURN_IF_ERROR(ValidateMapEntry(child, name, i));
        } else {
          GPUKIT_RETURN_IF_ERROR(ValidateMessage(
              child, field->is_repeated() ? absl::StrCat(name, "[", i, "]") : name));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
    if (IsControl(cp)) {
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
  return ValidateMessage(request, "");
}

}  // namespace gpukit::service
