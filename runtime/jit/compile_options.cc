#include "runtime/jit/compile_options.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace gpukit {
namespace {

// Longer options are not useful and would only bloat logs and cache keys.
constexpr size_t kMaxOptionBytes = 4096;
constexpr size_t kMaxEntryNameBytes = 1024;

constexpr char kAllowedList[] =
    "-D NAME[=VALUE], --use_fast_math, --std=c++17|c++20, --fmad=, --ftz=, --prec-div=, "
    "--prec-sqrt= (true|false), --generate-line-info (-lineinfo), --restrict, "
    "--extra-device-vectorization, --device-as-default-execution-space (-default-device)";

enum class ValueKind { kNone, kBool, kStd };

struct AllowedOption {
  absl::string_view canonical;  // also the first accepted spelling
  absl::string_view alias;      // a second accepted spelling
  ValueKind value;
};

constexpr AllowedOption kAllowedOptions[] = {
    {"--use_fast_math", "-use_fast_math", ValueKind::kNone},
    {"--std", "-std", ValueKind::kStd},
    {"--fmad", "-fmad", ValueKind::kBool},
    {"--ftz", "-ftz", ValueKind::kBool},
    {"--prec-div", "-prec-div", ValueKind::kBool},
    {"--prec-sqrt", "-prec-sqrt", ValueKind::kBool},
    {"--generate-line-info", "-lineinfo", ValueKind::kNone},
    {"--restrict", "-restrict", ValueKind::kNone},
    {"--extra-device-vectorization", "-extra-device-vectorization", ValueKind::kNone},
    {"--device-as-default-execution-space", "-default-device", ValueKind::kNone},
};

bool IsIdentifierStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentifierChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

bool IsIdentifier(absl::string_view text) {
  if (text.empty() || !IsIdentifierStart(text[0])) return false;
  return std::all_of(text.begin(), text.end(), IsIdentifierChar);
}

absl::Status Refuse(absl::string_view option, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("compile option \"", option, "\" ", why));
}

// "NAME" or "NAME=VALUE" after -D, normalised to "-DNAME[=VALUE]".
absl::StatusOr<std::string> NormalizeMacro(absl::string_view option, absl::string_view body) {
  const absl::string_view name = body.substr(0, body.find('='));
  if (!IsIdentifier(name)) {
    return Refuse(option, absl::StrCat("defines \"", name, "\", which is not a macro name"));
  }
  for (char c : body) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Refuse(option, "holds a control character");
    }
  }
  return absl::StrCat("-D", body);
}

// The option's normalised form, or why it is refused. Macros are handled by the caller.
absl::StatusOr<std::string> NormalizeFlag(absl::string_view option) {
  if (absl::StartsWith(option, "-I") || absl::StartsWith(option, "--include-path")) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile option \"", option,
                     "\": -I is not allowed: kernels are compiled from source "
                     "alone"));
  }
  if (absl::StartsWith(option, "-arch") || absl::StartsWith(option, "--gpu-architecture")) {
    return Refuse(option, "is not allowed: the daemon sets the architecture from the device");
  }
  const size_t equals = option.find('=');
  const absl::string_view name = option.substr(0, equals);
  const bool has_value = equals != absl::string_view::npos;
  const absl::string_view value = has_value ? option.substr(equals + 1) : absl::string_view();
  for (const AllowedOption& allowed : kAllowedOptions) {
    if (name != allowed.canonical && name != allowed.alias) continue;
    switch (allowed.value) {
      case ValueKind::kNone:
        if (has_value) return Refuse(option, "takes no value");
        return std::string(allowed.canonical);
      case ValueKind::kBool:
        if (value != "true" && value != "false") {
          return Refuse(option, "needs the value true or false");
        }
        return absl::StrCat(allowed.canonical, "=", value);
      case ValueKind::kStd:
        if (value != "c++17" && value != "c++20") {
          return Refuse(option, "needs the value c++17 or c++20");
        }
        return absl::StrCat(allowed.canonical, "=", value);
    }
  }
  return Refuse(option, absl::StrCat("is not allowed; allowed options are ", kAllowedList));
}

// What two options must agree on to coexist: the macro name, or the option's name.
std::string ConflictKey(absl::string_view normalized) {
  return std::string(normalized.substr(0, normalized.find('=')));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> NormalizeCompileOptions(
    const std::vector<std::string>& options, const CompileLimits& limits) {
  if (options.size() > static_cast<size_t>(limits.max_options)) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.size(), " compile options; the limit is ", limits.max_options));
  }
  std::map<std::string, std::string> by_key;  // ConflictKey -> normalised option
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string& option = options[i];
    if (option.size() > kMaxOptionBytes) {
      return absl::InvalidArgumentError(absl::StrCat("compile option ", i, " is ", option.size(),
                                                     " bytes; the limit is ", kMaxOptionBytes));
    }
    std::string normalized;
    if (option == "-D" || option == "--define-macro") {
      if (i + 1 == options.size()) return Refuse(option, "needs a macro after it");
      ++i;
      GPUKIT_ASSIGN_OR_RETURN(normalized, NormalizeMacro(options[i], options[i]));
    } else if (absl::StartsWith(option, "--define-macro=")) {
      GPUKIT_ASSIGN_OR_RETURN(normalized,
                              NormalizeMacro(option, absl::string_view(option).substr(15)));
    } else if (absl::StartsWith(option, "-D")) {
      GPUKIT_ASSIGN_OR_RETURN(normalized,
                              NormalizeMacro(option, absl::string_view(option).substr(2)));
    } else {
      GPUKIT_ASSIGN_OR_RETURN(normalized, NormalizeFlag(option));
    }
    auto [it, inserted] = by_key.emplace(ConflictKey(normalized), normalized);
    if (!inserted && it->second != normalized) {
      return absl::InvalidArgumentError(
          absl::StrCat("compile options \"", it->second, "\" and \"", normalized, "\" conflict"));
    }
  }
  std::vector<std::string> normalized;
  normalized.reserve(by_key.size());
  for (auto& [key, option] : by_key) normalized.push_back(std::move(option));
  std::sort(normalized.begin(), normalized.end());
  return normalized;
}

absl::Status ValidateKernelSource(absl::string_view source, const CompileLimits& limits) {
  if (source.empty()) return absl::InvalidArgumentError("kernel source is empty");
  if (static_cast<int64_t>(source.size()) > limits.max_source_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel source is ", source.size(), " bytes; the limit is ", limits.max_source_bytes));
  }
  if (const size_t nul = source.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel source holds a NUL byte at offset ", nul));
  }
  return absl::OkStatus();
}

absl::Status ValidateKernelHeaders(absl::string_view source,
                                   const std::vector<std::pair<std::string, std::string>>& headers,
                                   const CompileLimits& limits) {
  if (static_cast<int64_t>(headers.size()) > limits.max_headers) {
    return absl::InvalidArgumentError(
        absl::StrCat(headers.size(), " headers; the limit is ", limits.max_headers));
  }
  int64_t total_bytes = static_cast<int64_t>(source.size());
  std::set<absl::string_view> names;
  for (size_t i = 0; i < headers.size(); ++i) {
    const auto& [name, text] = headers[i];
    if (name.empty() || name.size() > 256 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers[", i,
                       "]: a header's name must be 1 to 256 printable ASCII characters "
                       "without spaces, as the source #includes it"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers[", i, "]: the name \"", name, "\" is given twice"));
    }
    if (const size_t nul = text.find('\0'); nul != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers[", i, "] (\"", name, "\") holds a NUL byte at offset ", nul));
    }
    total_bytes += static_cast<int64_t>(text.size());
  }
  if (total_bytes > limits.max_source_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kernel source and headers are ", total_bytes,
                                                   " bytes; the limit is ",
                                                   limits.max_source_bytes));
  }
  return absl::OkStatus();
}

namespace {

// A name expression for a kernel: an identifier, optionally qualified with ::, optionally
// with template arguments. Inside <...> the arguments may hold types, numbers, spaces,
// commas, pointers and references; nothing that could end NVRTC's pragma line or open a
// statement (no newline, ';', '{', quotes).
absl::Status ValidateEntryName(size_t index, absl::string_view name) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("entries[", index, "] = \"", name, "\" ", why));
  };
  if (name.empty())
    return absl::InvalidArgumentError(absl::StrCat("entries[", index, "] is empty"));
  if (name.size() > kMaxEntryNameBytes) {
    return refuse(absl::StrCat("is longer than ", kMaxEntryNameBytes, " bytes"));
  }
  if (!IsIdentifierStart(name[0]) && !absl::StartsWith(name, "::")) {
    return refuse("must start with a letter, '_' or '::'");
  }
  int angle_depth = 0;
  int paren_depth = 0;
  for (char c : name) {
    if (IsIdentifierChar(c) || c == ':') continue;
    if (c == '<') {
      ++angle_depth;
    } else if (c == '>') {
      if (--angle_depth < 0) return refuse("has an unbalanced '>'");
    } else if (c == '(') {
      if (angle_depth == 0) return refuse("has '(' outside template arguments");
      ++paren_depth;
    } else if (c == ')') {
      if (--paren_depth < 0) return refuse("has an unbalanced ')'");
    } else if (c == ' ' || c == ',' || c == '*' || c == '&' || c == '-' || c == '.') {
      if (angle_depth == 0) {
        return refuse(absl::StrCat("has '", std::string(1, c), "' outside template arguments"));
      }
    } else {
      return refuse("is not a kernel name (letters, digits, '_', '::' and template arguments)");
    }
  }
  if (angle_depth != 0) return refuse("has an unbalanced '<'");
  if (paren_depth != 0) return refuse("has an unbalanced '('");
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateEntryNames(const std::vector<std::string>& entries,
                                const CompileLimits& limits) {
  if (entries.empty())
    return absl::InvalidArgumentError("entries is empty: name at least one kernel");
  if (entries.size() > static_cast<size_t>(limits.max_entries)) {
    return absl::InvalidArgumentError(
        absl::StrCat(entries.size(), " entries; the limit is ", limits.max_entries));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    GPUKIT_RETURN_IF_ERROR(ValidateEntryName(i, entries[i]));
    for (size_t j = 0; j < i; ++j) {
      if (entries[j] == entries[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("entries[", i, "] = \"", entries[i], "\" repeats entries[", j, "]"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gpukit
