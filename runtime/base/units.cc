#include "runtime/base/units.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace gpukit {

absl::StatusOr<int64_t> ParseBytes(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  size_t split = 0;
  while (split < text.size() && (absl::ascii_isdigit(text[split]) || text[split] == '.')) {
    ++split;
  }
  const absl::string_view number = text.substr(0, split);
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(split)));
  struct Unit {
    absl::string_view name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"kib", 1024.0},
      {"mib", 1048576.0},
      {"gib", 1073741824.0},
      {"tib", 1099511627776.0},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
  };
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", original, "\" is not a size; write e.g. 512MiB, 8GiB or 4096"));
  }
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      const double bytes = std::round(value * u.factor);
      if (bytes >= 9.2e18) {
        return absl::InvalidArgumentError(absl::StrCat("size \"", original, "\" is too large"));
      }
      return static_cast<int64_t>(bytes);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", original, "\" has an unknown unit; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"));
}

std::string FormatBytes(int64_t bytes) {
  static constexpr absl::string_view kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  // Decide on the value as shown (one decimal), so 1048575 is "1 MiB" rather than
  // "1024.0 KiB" and 1025 is "1 KiB" rather than "1.0 KiB".
  double shown = std::round(value * 10) / 10;
  if (std::abs(shown) >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
    shown = std::round(value * 10) / 10;
  }
  if (shown == std::floor(shown)) return absl::StrFormat("%.0f %s", shown, kUnits[unit]);
  return absl::StrFormat("%.1f %s", shown, kUnits[unit]);
}

}  // namespace gpukit
