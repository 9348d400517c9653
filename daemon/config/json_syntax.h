// Where in a JSON config file an error is, for messages an operator can act on
// ("/etc/gpukit/gpukitd.json:12:5: ..."): protobuf's JSON parser, which reads the config
// into its schema, says what is wrong but not where. Syntax errors come from nlohmann/json's
// parser (Debian's nlohmann-json3-dev, header-only), which counts lines; a valid document's
// field, named by a path as error messages name it ("partitions[1].memory"), is found by
// FindJsonFieldLine.
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

// The line of the key of the field at `path` ("limits.maxOpsInFlight", "partitions[1].memory";
// an array element's line is that of its first byte) in `text`, which must be well-formed
// JSON; keys match by their JSON name or their proto name ("max_ops_in_flight"). When the
// path goes deeper than the document, the line of the deepest field it reaches; nullopt
// when not even its first step is there. O(size of text).
std::optional<int> FindJsonFieldLine(absl::string_view text, absl::string_view path);

// The line of the field that a config error `message` names, as ApplyConfigJson and
// protobuf's parser name them: "partitions[1]: memory: ...", "limits.maxOpsInFlight = ...",
// "(partitions[0].compute): invalid value ...", "(partitions[0]) bogus: Cannot find field.";
// nullopt when it names none that `text` has.
std::optional<int> FindConfigErrorLine(absl::string_view text, absl::string_view message);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CONFIG_JSON_SYNTAX_H_
