#include "daemon/config/json_syntax.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace gpukit {

std::optional<JsonSyntaxError> FindJsonSyntaxError(absl::string_view text) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end());
    static_cast<void>(parsed);
    return std::nullopt;
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte: the 1-based offset of the byte the parser stopped at.
    const size_t pos = std::min(text.size(), e.byte > 0 ? static_cast<size_t>(e.byte - 1) : 0);
    JsonSyntaxError error;
    error.line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
    const size_t newline = pos == 0 ? absl::string_view::npos : text.rfind('\n', pos - 1);
    error.column = static_cast<int>(newline == absl::string_view::npos ? pos + 1 : pos - newline);
    // "[json.exception.parse_error.101] parse error at line 2, column 5: syntax error ..."
    std::string message = e.what();
    if (size_t colon = message.find(": "); colon != std::string::npos) {
      message = message.substr(colon + 2);
    }
    error.message = std::move(message);
    return error;
  }
}

namespace {

// "max_ops_in_flight" -> "maxOpsInFlight", as protobuf names JSON fields.
std::string CamelCase(absl::string_view name) {
  std::string out;
  bool upper = false;
  for (char c : name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    upper = false;
  }
  return out;
}

// Walks a well-formed JSON text once, recording the line of every field's key and every
// array element, by path ("a.b[2].c").
class FieldLines {
 public:
  explicit FieldLines(absl::string_view text) : text_(text) {
    SkipSpace();
    Value("");
  }
  const absl::flat_hash_map<std::string, int>& lines() const { return lines_; }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }
  std::string String() {  // at the opening quote; escapes are kept as written
    std::string out;
    for (++pos_; pos_ < text_.size() && text_[pos_] != '"'; ++pos_) {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) out.push_back(text_[pos_++]);
      out.push_back(text_[pos_]);
    }
    ++pos_;
    return out;
  }
  void Value(const std::string& path) {
    if (pos_ >= text_.size()) return;
    const char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      for (SkipSpace(); pos_ < text_.size() && text_[pos_] != '}'; SkipSpace()) {
        if (text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        const int key_line = line_;
        const std::string key = CamelCase(String());
        const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
        lines_.emplace(child, key_line);
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ':') ++pos_;
        SkipSpace();
        Value(child);
      }
      ++pos_;
    } else if (c == '[') {
      ++pos_;
      int index = 0;
      for (SkipSpace(); pos_ < text_.size() && text_[pos_] != ']'; SkipSpace()) {
        if (text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        const std::string element = absl::StrCat(path, "[", index++, "]");
        lines_.emplace(element, line_);
        Value(element);
      }
      ++pos_;
    } else if (c == '"') {
      String();
    } else {  // a number, true, false or null
      while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_])) &&
             text_[pos_] != ',' && text_[pos_] != '}' && text_[pos_] != ']') {
        ++pos_;
      }
    }
  }

  const absl::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  absl::flat_hash_map<std::string, int> lines_;
};

bool IsPathChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' ||
         c == ']';
}

// The path-like word at the start of `text` ("partitions[1]", "limits.maxOpsInFlight").
absl::string_view LeadingPath(absl::string_view text) {
  size_t n = 0;
  while (n < text.size() && IsPathChar(text[n])) ++n;
  return text.substr(0, n);
}

}  // namespace

std::optional<int> FindJsonFieldLine(absl::string_view text, absl::string_view path) {
  const FieldLines fields(text);
  // The deepest prefix of the path that the document has, cutting at '.' and '['.
  std::string prefix(path);
  while (!prefix.empty()) {
    if (auto it = fields.lines().find(CamelCase(prefix)); it != fields.lines().end()) {
      return it->second;
    }
    const size_t cut = prefix.find_last_of(".[");
    if (cut == std::string::npos) break;
    prefix.resize(cut);
  }
  return std::nullopt;
}

std::optional<int> FindConfigErrorLine(absl::string_view text, absl::string_view message) {
  absl::ConsumePrefix(&message, "configuration is not valid: ");
  std::string path;
  if (absl::ConsumePrefix(&message, "(")) {  // protobuf's "(path): ..." or "(path) field: ..."
    const size_t close = message.find(')');
    if (close == absl::string_view::npos) return std::nullopt;
    path = std::string(message.substr(0, close));
    message.remove_prefix(close + 1);
    absl::ConsumePrefix(&message, " ");
  } else {
    path = std::string(LeadingPath(message));
    message.remove_prefix(path.size());
    if (!absl::ConsumePrefix(&message, ": ")) message = {};
  }
  // A field named after the path ("partitions[1]: memory: ...", "(partitions[0]) bogus: ...").
  if (absl::string_view field = LeadingPath(message);
      !field.empty() && field.find_first_of(".[") == absl::string_view::npos) {
    path = path.empty() ? std::string(field) : absl::StrCat(path, ".", field);
  }
  if (path.empty()) return std::nullopt;
  return FindJsonFieldLine(text, path);
}

}  // namespace gpukit
