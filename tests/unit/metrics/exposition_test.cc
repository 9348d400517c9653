// ExpositionWriter: the Prometheus text format 0.0.4 as written (HELP/TYPE lines, labels,
// escaping, values, histograms). tests/python/test_metrics.py parses a live daemon's text
// with the official parser.
#include "daemon/metrics/exposition.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::HasSubstr;

TEST(ExpositionWriterTest, FamilyWritesHelpAndTypeThenItsSamples) {
  ExpositionWriter out;
  out.Family("gpukit_sessions", MetricType::kGauge, "Sessions open now.");
  out.Sample({}, 3);
  out.Family("gpukit_rpc_requests_total", MetricType::kCounter, "Calls.");
  out.Sample({{"method", "a/B"}, {"code", "OK"}}, int64_t{7});
  EXPECT_EQ(out.text(),
            "# HELP gpukit_sessions Sessions open now.\n"
            "# TYPE gpukit_sessions gauge\n"
            "gpukit_sessions 3\n"
            "# HELP gpukit_rpc_requests_total Calls.\n"
            "# TYPE gpukit_rpc_requests_total counter\n"
            "gpukit_rpc_requests_total{method=\"a/B\",code=\"OK\"} 7\n");
}

TEST(ExpositionWriterTest, LabelValuesEscapeBackslashQuoteAndNewline) {
  ExpositionWriter out;
  out.Family("m", MetricType::kGauge, "h");
  out.Sample({{"tenant", "a\\b\"c\nd"}}, 1);
  EXPECT_THAT(out.text(), HasSubstr("m{tenant=\"a\\\\b\\\"c\\nd\"} 1\n"));
  EXPECT_EQ(EscapeLabelValue("plain-name_1.x"), "plain-name_1.x");
}

TEST(ExpositionWriterTest, HelpEscapesBackslashAndNewlineButNotQuotes) {
  ExpositionWriter out;
  out.Family("m", MetricType::kCounter, "line one\nback\\slash \"quoted\"");
  EXPECT_THAT(out.text(), HasSubstr("# HELP m line one\\nback\\\\slash \"quoted\"\n"));
}

TEST(ExpositionWriterTest, ValuesAreShortestRoundTripAndSpecialValuesHaveTheirNames) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(-1.5), "-1.5");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  const double precise = 12345.123456789;
  EXPECT_EQ(std::stod(FormatMetricValue(precise)), precise) << "no digits lost";
}

TEST(ExpositionWriterTest, IntegersAreWrittenExactlyBeyondWhatADoubleHolds) {
  ExpositionWriter out;
  out.Family("m", MetricType::kGauge, "h");
  out.Sample({}, int64_t{9007199254740993});  // 2^53 + 1
  EXPECT_THAT(out.text(), HasSubstr("m 9007199254740993\n"));
}

TEST(ExpositionWriterTest, HistogramWritesCumulativeBucketsInfSumAndCount) {
  ExpositionWriter out;
  out.Family("lat_seconds", MetricType::kHistogram, "Latency.");
  const MetricLabel labels[] = {{"method", "m"}};
  out.Histogram(labels, {0.001, 0.01}, {3, 1, 2}, 0.5);
  EXPECT_EQ(out.text(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{method=\"m\",le=\"0.001\"} 3\n"
            "lat_seconds_bucket{method=\"m\",le=\"0.01\"} 4\n"
            "lat_seconds_bucket{method=\"m\",le=\"+Inf\"} 6\n"
            "lat_seconds_sum{method=\"m\"} 0.5\n"
            "lat_seconds_count{method=\"m\"} 6\n");
}

TEST(ExpositionWriterTest, HistogramWithoutLabelsHasOnlyLe) {
  ExpositionWriter out;
  out.Family("h", MetricType::kHistogram, "x");
  out.Histogram({}, {1}, {0, 0}, 0);
  EXPECT_THAT(out.text(), HasSubstr("h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\n"
                                    "h_count 0\n"));
}

TEST(ExpositionWriterTest, FamilyWithNoSamplesIsOnlyItsHelpAndType) {
  ExpositionWriter out;
  out.Family("gpukit_jit_cache_misses_total", MetricType::kCounter, "None yet.");
  EXPECT_EQ(std::move(out).Finish(),
            "# HELP gpukit_jit_cache_misses_total None yet.\n"
            "# TYPE gpukit_jit_cache_misses_total counter\n");
}

TEST(ExpositionNamesTest, MetricAndLabelNamesFollowTheFormatsRules) {
  EXPECT_TRUE(IsValidMetricName("gpukit_rpc_requests_total"));
  EXPECT_TRUE(IsValidMetricName("ns:rule_1"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_TRUE(IsValidLabelName("partition"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9x"));
}

}  // namespace
}  // namespace gpukit
