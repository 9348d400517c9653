// JSON syntax errors with their line and column, for messages an operator can act on
// ("/etc/gpukit/gpukitd.json:12:5: ..."): protobuf's JSON parser, which reads the config
// into its schema, says what is wrong but not where. The check uses nlohmann/json's parser
// (Debian's nlohmann-json3-dev, header-only), which counts lines.
//
//   if (std::optional<JsonSyntaxError> e = FindJsonSyntaxError(text)) {
//     return absl::InvalidArgumentError(absl::StrCat(path, ":", e->line, ":", e->column, ": ",
//                                                    e->message));
//   }
//
// Thread safety: a pure function.
#ifndef GPUKIT_DAEMON_CONFIG_JSON_SYNTAX_H_
#define GPUKIT_DAEMON_CONFIG_JSON_SYNTAX_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace gpukit {

struct JsonSyntaxError {
  int line = 0;         // 1-based
  int column = 0;       // 1-based, in bytes
  std::string message;  // the parser's, without its position
};

// The first syntax error of `text`, or nullopt when it is well-formed JSON. Reads `text`
// once, building its document (config files are small).
std::optional<JsonSyntaxError> FindJsonSyntaxError(absl::string_view text);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CONFIG_JSON_SYNTAX_H_
