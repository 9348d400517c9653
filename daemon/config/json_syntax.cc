#include "daemon/config/json_syntax.h"

#include <algorithm>

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

}  // namespace gpukit
