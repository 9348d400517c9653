#include "daemon/metrics/exposition.h"

#include <cassert>
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpukit {
namespace {

absl::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool IsNameChar(char c, bool first, bool colon) {
  if (absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && absl::ascii_isdigit(static_cast<unsigned char>(c));
}

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*colon=*/true)) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || absl::StartsWith(name, "__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*colon=*/false)) return false;
  }
  return true;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  // Shortest round trip: "3", "0.25", "1e-06".
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void ExpositionWriter::Family(absl::string_view name, MetricType type, absl::string_view help) {
  assert(IsValidMetricName(name));
  const bool inserted = families_.emplace(name).second;
  assert(inserted && "a metric family may appear only once in an exposition");
  (void)inserted;
  family_ = std::string(name);
  type_ = type;
  absl::StrAppend(&text_, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ",
                  TypeName(type), "\n");
}

void ExpositionWriter::SeriesName(absl::string_view suffix, absl::Span<const MetricLabel> labels,
                                  MetricLabel extra) {
  assert(!family_.empty() && "a sample needs an open family");
  absl::StrAppend(&text_, family_, suffix);
  if (labels.empty() && extra.name.empty()) return;
  text_ += '{';
  bool first = true;
  auto append = [&](const MetricLabel& label) {
    assert(IsValidLabelName(label.name));
    if (!first) text_ += ',';
    first = false;
    absl::StrAppend(&text_, label.name, "=\"", EscapeLabelValue(label.value), "\"");
  };
  for (const MetricLabel& label : labels) append(label);
  if (!extra.name.empty()) append(extra);
  text_ += '}';
}

std::string ExpositionWriter::FormatValue(double value) { return FormatMetricValue(value); }

std::string ExpositionWriter::FormatValue(int64_t value) { return absl::StrCat(value); }

void ExpositionWriter::WriteSample(absl::Span<const MetricLabel> labels, absl::string_view value) {
  assert(type_ != MetricType::kHistogram);
  SeriesName("", labels, {});
  absl::StrAppend(&text_, " ", value, "\n");
}

void ExpositionWriter::Histogram(absl::Span<const MetricLabel> labels,
                                 absl::Span<const double> upper_bounds,
                                 absl::Span<const int64_t> bucket_counts, double sum) {
  assert(type_ == MetricType::kHistogram);
  assert(bucket_counts.size() == upper_bounds.size() + 1);
  int64_t cumulative = 0;
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    assert(i == 0 || upper_bounds[i - 1] < upper_bounds[i]);
    cumulative += i < bucket_counts.size() ? bucket_counts[i] : 0;
    const std::string le = FormatMetricValue(upper_bounds[i]);
    SeriesName("_bucket", labels, {"le", le});
    absl::StrAppend(&text_, " ", cumulative, "\n");
  }
  if (bucket_counts.size() > upper_bounds.size()) cumulative += bucket_counts[upper_bounds.size()];
  SeriesName("_bucket", labels, {"le", "+Inf"});
  absl::StrAppend(&text_, " ", cumulative, "\n");
  SeriesName("_sum", labels, {});
  absl::StrAppend(&text_, " ", FormatMetricValue(sum), "\n");
  SeriesName("_count", labels, {});
  absl::StrAppend(&text_, " ", cumulative, "\n");
}

}  // namespace gpukit
