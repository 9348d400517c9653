// ConnectChannel's security options (client/cpp/channel.h) are checked before any address is
// tried: a TLS CA for a unix socket, a certificate without its key, and a TLS file that
// cannot be used are INVALID_ARGUMENT naming the problem, whether or not a daemon listens.
#include <unistd.h>

#include <cstring>
#include <string>

#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/socket.h>
#include <sys/un.h>

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(5);

ChannelSecurity WithCa(const std::string& ca_file) {
  ChannelSecurity security;
  security.tls_ca_file = ca_file;
  return security;
}

TEST(ChannelSecurityTest, ATlsCaForAUnixSocketTargetIsRefusedWhetherOrNotTheSocketExists) {
  ScopedTempDir dir;
  const std::string ca = dir.WriteFile("ca.pem", "not read: the target is refused first");
  // A socket file that exists (nothing accepts on it; the option is refused before that).
  const std::string socket_path = dir.path() + "/gpukitd.sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  for (const std::string& target :
       {"unix://" + socket_path, "unix://" + dir.path() + "/missing.sock",
        std::string("unix:relative.sock"), std::string("unix-abstract:gpukitd")}) {
    EXPECT_THAT(
        ConnectChannel(target, kTimeout, WithCa(ca)),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("a TLS CA is for TCP addresses; " + target + " is a unix socket")))
        << target;
  }
  close(fd);
}

TEST(ChannelSecurityTest, ACertificateWithoutItsKeyIsRefusedBeforeTheAddressIsTried) {
  ChannelSecurity security;
  security.tls_ca_file = "/nonexistent/ca.pem";
  security.tls_cert_file = "/nonexistent/client.pem";
  EXPECT_THAT(ConnectChannel("unix:///nonexistent/gpukitd.sock", kTimeout, security),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs its key")));
}

TEST(ChannelSecurityTest, AnUnreadableOrEmptyTlsFileIsNamed) {
  ScopedTempDir dir;
  const std::string missing = dir.path() + "/missing-ca.pem";
  // "unixbox" is a host name, not a unix socket: the CA is read (and found missing).
  EXPECT_THAT(ConnectChannel("unixbox:7070", kTimeout, WithCa(missing)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cannot read the TLS file " + missing + ": No such file or directory"));
  const std::string empty = dir.WriteFile("empty-ca.pem", "");
  EXPECT_THAT(ConnectChannel("127.0.0.1:1", kTimeout, WithCa(empty)),
              StatusIs(absl::StatusCode::kInvalidArgument, "the TLS file " + empty + " is empty"));
}

}  // namespace
}  // namespace gpukit
