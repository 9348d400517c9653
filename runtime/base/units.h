// Byte sizes as people write them: "512MiB", "8GiB", "4096", "1.5GB".
//
//   GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ParseBytes("512MiB"));  // 536870912
//   FormatBytes(536870912);                                          // "512 MiB"
#ifndef GPUKIT_RUNTIME_BASE_UNITS_H_
#define GPUKIT_RUNTIME_BASE_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

// A non-negative number (integer or decimal) with an optional unit: B, KiB, MiB, GiB, TiB
// (powers of 1024), KB, MB, GB, TB (powers of 1000); case of the unit is ignored and a
// space may separate it. INVALID_ARGUMENT on anything else or on int64 overflow.
absl::StatusOr<int64_t> ParseBytes(absl::string_view text);

// Largest binary unit that keeps the value >= 1, with up to one decimal: "1.5 GiB", "512 B".
std::string FormatBytes(int64_t bytes);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_UNITS_H_
