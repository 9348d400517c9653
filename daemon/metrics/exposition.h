// ExpositionWriter: writes metrics in the Prometheus text exposition format, version 0.0.4
// (what a scrape of /metrics gets, Content-Type "text/plain; version=0.0.4").
//
// A metric family is opened with its name, type and help text (its "# HELP" and "# TYPE"
// lines), then its samples follow, each with its labels. Label values and help texts are
// escaped as the format says (backslash, double quote and newline in label values;
// backslash and newline in help), so a tenant or device name cannot break the text. Values
// are written as the shortest decimal that reads back as the same double ("+Inf", "-Inf",
// "NaN" for the special ones), integers without a fraction.
//
//   ExpositionWriter out;
//   out.Family("gpukit_device_memory_used_bytes", MetricType::kGauge, "Memory in use.");
//   out.Sample({{"device", "0"}}, 4096);
//   out.Family("gpukit_rpc_duration_seconds", MetricType::kHistogram, "Latency.");
//   out.Histogram({{"method", "m"}}, {0.001, 0.01}, {3, 1, 0}, 0.0042);
//   std::string text = std::move(out).Finish();
//
// Names of families and labels are the program's own constants: a name that the format does
// not allow, a family opened twice or a sample with no family open is a programming error,
// caught by a debug assertion (and written as given in a release build).
//
// Cost: appends to one string; O(bytes written).
// Thread safety: none; one writer per scrape.
#ifndef GPUKIT_DAEMON_METRICS_EXPOSITION_H_
#define GPUKIT_DAEMON_METRICS_EXPOSITION_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpukit {

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricLabel {
  absl::string_view name;
  absl::string_view value;
};

// The Content-Type of the text this writer produces.
inline constexpr absl::string_view kExpositionContentType =
    "text/plain; version=0.0.4; charset=utf-8";

class ExpositionWriter {
 public:
  // Opens a family: writes "# HELP name help" and "# TYPE name type". A family opened with
  // no sample after it is valid (it says the metric exists and has no series now).
  void Family(absl::string_view name, MetricType type, absl::string_view help);

  // One sample of the open counter or gauge family. Integers are written exactly (a double
  // holds them exactly only up to 2^53).
  void Sample(std::initializer_list<MetricLabel> labels, double value) {
    WriteSample(absl::MakeConstSpan(labels.begin(), labels.size()), FormatValue(value));
  }
  void Sample(std::initializer_list<MetricLabel> labels, int64_t value) {
    WriteSample(absl::MakeConstSpan(labels.begin(), labels.size()), FormatValue(value));
  }
  void Sample(std::initializer_list<MetricLabel> labels, int value) {
    Sample(labels, static_cast<int64_t>(value));
  }

  // One series of the open histogram family: `upper_bounds` ascending (without +Inf),
  // `bucket_counts` the observations in each bucket, not cumulative, with one more entry than
  // `upper_bounds` for those above the last bound. Writes the cumulative name_bucket series
  // with le="<bound>" and le="+Inf", then name_sum and name_count.
  void Histogram(absl::Span<const MetricLabel> labels, absl::Span<const double> upper_bounds,
                 absl::Span<const int64_t> bucket_counts, double sum);

  const std::string& text() const { return text_; }
  std::string Finish() && { return std::move(text_); }

 private:
  static std::string FormatValue(double value);
  static std::string FormatValue(int64_t value);
  void WriteSample(absl::Span<const MetricLabel> labels, absl::string_view value);
  // name{labels,extra} (extra: the histogram's le, or none when its name is empty).
  void SeriesName(absl::string_view suffix, absl::Span<const MetricLabel> labels,
                  MetricLabel extra);

  std::string text_;
  std::string family_;  // the open family's name
  MetricType type_ = MetricType::kGauge;
  absl::flat_hash_set<std::string> families_;
};

// Whether `name` may be a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or, with `label`, a label
// name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__").
bool IsValidMetricName(absl::string_view name);
bool IsValidLabelName(absl::string_view name);

// A label value with backslash, double quote and newline escaped ("\\", "\"", "\n").
std::string EscapeLabelValue(absl::string_view value);
// A help text with backslash and newline escaped.
std::string EscapeHelp(absl::string_view help);
// A sample value as the format writes it: "+Inf", "-Inf", "NaN", else the shortest decimal
// that parses back to `value` ("3", "0.25", "1e-06").
std::string FormatMetricValue(double value);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_METRICS_EXPOSITION_H_
