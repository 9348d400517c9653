// Names operators and clients give to things (tenants, partitions): the one character
// rule they share.
//
//   if (!IsValidName(tenant, 63)) ...
//
// Thread safety: pure functions.
#ifndef GPUKIT_RUNTIME_BASE_NAMES_H_
#define GPUKIT_RUNTIME_BASE_NAMES_H_

#include <algorithm>
#include <cstddef>

#include "absl/strings/string_view.h"

namespace gpukit {

// [A-Za-z0-9._-]
inline bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// 1 to `max_length` characters, each IsNameChar.
inline bool IsValidName(absl::string_view name, size_t max_length) {
  return !name.empty() && name.size() <= max_length &&
         std::all_of(name.begin(), name.end(), IsNameChar);
}

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_NAMES_H_
