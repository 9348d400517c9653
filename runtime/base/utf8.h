// UTF-8 as gpukit checks and cuts text that reaches people: request strings (the service's
// rule), what gpukitctl prints, compile logs and status messages.
//
//   char32_t cp;
//   const int length = DecodeUtf8(text.substr(i), &cp);  // 0: not UTF-8 here
//   if (length > 0 && IsDisplayControl(cp)) ...
//   message.resize(Utf8PrefixBytes(message, 8192));      // never cuts a character in two
//
// Thread safety: pure functions.
#ifndef GPUKIT_RUNTIME_BASE_UTF8_H_
#define GPUKIT_RUNTIME_BASE_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace gpukit {

// The length (1 to 4) of the valid UTF-8 sequence that starts `text` (not empty), and its code
// point; 0 when it does not start with one (a stray continuation byte, an overlong form, a
// surrogate, a truncated sequence, or beyond U+10FFFF).
int DecodeUtf8(absl::string_view text, char32_t* code_point);

// Code points a terminal or a log viewer acts on, or that reorder or break what follows them
// on screen: C0, DEL, C1, the bidirectional marks, embeddings, overrides and isolates, and the
// line and paragraph separators.
bool IsDisplayControl(char32_t cp);

// The length of the longest prefix of `text` of at most `max_bytes` that does not end inside
// a multi-byte sequence.
size_t Utf8PrefixBytes(absl::string_view text, size_t max_bytes);

// `text` with each byte that is not part of a valid UTF-8 sequence replaced by '?'.
std::string ToValidUtf8(std::string text);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_UTF8_H_
