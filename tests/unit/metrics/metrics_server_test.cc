// MetricsServer::Start's address rule (daemon/metrics/metrics_server.h): anything but
// host:port is INVALID_ARGUMENT naming the address, before anything is bound.
#include "daemon/metrics/metrics_server.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

class MetricsServerAddressTest : public ::testing::TestWithParam<const char*> {};

TEST_P(MetricsServerAddressTest, IsRefusedAsNotHostPort) {
  const std::string address = GetParam();
  EXPECT_THAT(MetricsServer::Start(address, [] { return std::string(); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metrics address \"" + address + "\" is not host:port")));
}

INSTANTIATE_TEST_SUITE_P(Rows, MetricsServerAddressTest,
                         ::testing::Values("9400", ":9400", "127.0.0.1",
                                           "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536",
                                           "127.0.0.1:-1", "[::1]",
                                           "unix:///run/gpukit/metrics.sock", "unix:9400", ""));

TEST(MetricsServerTest, AHostAndPortZeroServesOnAFreePort) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsServer> server,
                              MetricsServer::Start("127.0.0.1:0", [] { return std::string(); }));
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()) + "/metrics");
  server->Stop();
}

}  // namespace
}  // namespace gpukit
