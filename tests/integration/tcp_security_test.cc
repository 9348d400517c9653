// TCP needs TLS and bearer tokens (issue 17): gpukitd refuses to serve TCP without TLS unless
// --insecure-tcp is given for a loopback address; with TLS, a client that trusts the test CA
// connects and one that does not cannot; a token the configuration lists is the caller's
// tenant, a wrong or missing one opens nothing. The test CA and the server's certificate are
// made here with the openssl CLI.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "gpukit/client.h"
#include "gtest/gtest.h"
#include "tests/integration/binary_path.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "tls-test-token";  // sha256: kTokenSha256
constexpr char kTokenSha256[] = "141f36a48baa07f36c2dbcfdadaa6bdb9e814d82ad40faaed40945f46ae273eb";

// The openssl CLI from $PATH (RunProgram does not search it); "" when there is none.
std::string OpensslPath() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path == nullptr ? "/usr/bin:/bin" : path, ':')) {
    const std::string candidate = absl::StrCat(dir, "/openssl");
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs `argv` in `dir` and expects exit status 0.
void Run(const std::vector<std::string>& argv, const std::string& dir) {
  absl::StatusOr<ProgramResult> result = RunProgram(argv, dir, absl::Seconds(60));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->exit_code, 0) << argv[0] << " " << argv[1] << ": " << result->stderr_text;
}

// A CA (ca.pem, ca.key) and `name`.pem / `name`.key signed by it for 127.0.0.1 and
// localhost, in `dir`; EC keys, valid for a day.
void MakeCertificates(const std::string& dir, const std::string& ca, const std::string& name) {
  const std::string ca_pem = dir + "/" + ca + ".pem", ca_key = dir + "/" + ca + ".key";
  ASSERT_NO_FATAL_FAILURE(Run(
      {OpensslPath(), "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", ca_key, "-out", ca_pem, "-days", "1", "-subj", "/CN=gpukit test " + ca},
      dir));
  if (name.empty()) return;
  const std::string key = dir + "/" + name + ".key", csr = dir + "/" + name + ".csr";
  ASSERT_NO_FATAL_FAILURE(
      Run({OpensslPath(), "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
           "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=localhost"},
          dir));
  const std::string ext = dir + "/san.ext";
  std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  ASSERT_NO_FATAL_FAILURE(
      Run({OpensslPath(), "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key,
           "-CAcreateserial", "-out", dir + "/" + name + ".pem", "-days", "1", "-extfile", ext},
          dir));
}

// `name`.pem / `name`.key for a client, signed by the CA `ca` in `dir` (made before).
void MakeClientCertificate(const std::string& dir, const std::string& ca, const std::string& name) {
  const std::string key = dir + "/" + name + ".key", csr = dir + "/" + name + ".csr";
  ASSERT_NO_FATAL_FAILURE(
      Run({OpensslPath(), "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
           "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=" + name},
          dir));
  ASSERT_NO_FATAL_FAILURE(Run(
      {OpensslPath(), "x509", "-req", "-in", csr, "-CA", dir + "/" + ca + ".pem", "-CAkey",
       dir + "/" + ca + ".key", "-CAcreateserial", "-out", dir + "/" + name + ".pem", "-days", "1"},
      dir));
}

// gpukitd on its unix socket and, with TLS, on 127.0.0.1; one token of tenant "tls-team".
class TlsTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (OpensslPath().empty()) GTEST_SKIP() << "needs the openssl CLI to make a test CA";
    ASSERT_NO_FATAL_FAILURE(MakeCertificates(certs_.path(), "ca", "server"));
    ASSERT_NO_FATAL_FAILURE(MakeCertificates(certs_.path(), "other-ca", ""));
    ASSERT_NO_FATAL_FAILURE(DaemonTest::SetUp());
    tcp_ = TcpAddress();
    ASSERT_FALSE(tcp_.empty()) << daemon().Log();
  }

  std::string DaemonConfigJson() const override {
    return absl::StrCat(R"({"jit": {"cacheDir": "none"}, "access": {"tls": {"certFile": ")",
                        certs_.path(), R"(/server.pem", "keyFile": ")", certs_.path(),
                        R"(/server.key"}, "tokens": [{"sha256": ")", kTokenSha256,
                        R"(", "tenant": "tls-team"}]}})");
  }
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--listen", "127.0.0.1:0"};
  }

  std::string Ca() const { return certs_.path() + "/ca.pem"; }

  ScopedTempDir certs_;
  std::string tcp_;
};

TEST_F(TlsTest, AClientThatTrustsTheCaConnectsAndOneThatDoesNotCannot) {
  EXPECT_THAT(daemon().Log(), HasSubstr("TLS on 127.0.0.1:0"));
  // The test CA: served, and the token is the tenant.
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi tls, RawApi::Connect(tcp_, {kToken, Ca()}));
  EXPECT_TRUE(tls.Status().ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, tls.OpenSession("", 60000));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, tls.ListSessions());
  ASSERT_EQ(listed.sessions_size(), 1);
  EXPECT_EQ(listed.sessions(0).tenant(), "tls-team");
  EXPECT_TRUE(tls.Close(session).ok());

  // Plain TCP, another CA, or a CA file that is not there: no connection.
  EXPECT_THAT(ConnectChannel(tcp_, absl::Seconds(1), {kToken, ""}).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(
      ConnectChannel(tcp_, absl::Seconds(1), {kToken, certs_.path() + "/other-ca.pem"}).status(),
      StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(
      ConnectChannel(tcp_, absl::Seconds(1), {kToken, certs_.path() + "/missing.pem"}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing.pem")));
  // The unix socket is unaffected.
  EXPECT_TRUE(api().Status().ok());
}

TEST_F(TlsTest, TokensWrongMissingAndRightThroughEveryClient) {
  // libgpukit: the right token opens a session of its tenant; a wrong or missing one, none.
  ClientOptions options;
  options.address = tcp_;
  options.tls_ca_file = Ca();
  options.token = kToken;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->FromVector(std::vector<float>{1, 2, 3}, {3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> back, array.ToVector<float>());
  EXPECT_EQ(back, (std::vector<float>{1, 2, 3}));
  options.token = "wrong-token";
  EXPECT_THAT(Client::Connect(options).status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("valid bearer token")));
  options.token = "";
  EXPECT_THAT(Client::Connect(options).status(), StatusIs(absl::StatusCode::kUnauthenticated));

  // gpukitctl: --tls-ca and --token; the open views need no token, the partition calls an
  // admin's.
  const std::vector<std::string> ctl = {CtlPath(), "--addr", tcp_, "--tls-ca", Ca()};
  auto run_ctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = ctl;
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ProgramResult> result = RunProgram(argv, temp_dir(), absl::Seconds(30));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ProgramResult{};
  };
  EXPECT_EQ(run_ctl({"status"}).exit_code, 0);
  const ProgramResult sessions = run_ctl({"--token", kToken, "sessions", "-o", "json"});
  EXPECT_EQ(sessions.exit_code, 0) << sessions.stderr_text;
  EXPECT_THAT(sessions.stdout_text, HasSubstr("tls-team"));
  const ProgramResult create = run_ctl(
      {"--token", kToken, "partition", "create", "p1", "--memory", "64MiB", "--compute", "0.1"});
  EXPECT_NE(create.exit_code, 0);
  EXPECT_THAT(create.stderr_text + create.stdout_text, HasSubstr("needs the admin role"));
  const ProgramResult empty_token = run_ctl({"--token", "", "status"});
  EXPECT_NE(empty_token.exit_code, 0);
  EXPECT_THAT(empty_token.stderr_text, HasSubstr("--token is empty"));
  // Without --tls-ca, gpukitctl cannot reach a TLS daemon.
  absl::StatusOr<ProgramResult> plain = RunProgram(
      {CtlPath(), "--addr", tcp_, "--timeout", "2s", "status"}, temp_dir(), absl::Seconds(30));
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->exit_code, 0);
  EXPECT_THAT(daemon().Log(), HasSubstr("admin call refused: rpc=CreatePartition caller=\"tcp "
                                        "peer=ipv4:127.0.0.1:"));
}

// The same daemon, but asking every TCP client for a certificate signed by its client CA.
class ClientCertificateTest : public TlsTest {
 protected:
  std::string DaemonConfigJson() const override {
    return absl::StrCat(R"({"jit": {"cacheDir": "none"}, "access": {"tls": {"certFile": ")",
                        certs_.path(), R"(/server.pem", "keyFile": ")", certs_.path(),
                        R"(/server.key", "clientCaFile": ")", certs_.path(),
                        R"(/other-ca.pem"}}})");
  }
};

TEST_F(ClientCertificateTest, OnlyAClientWithACertificateOfTheClientCaConnects) {
  EXPECT_THAT(daemon().Log(), HasSubstr("client certificates required"));
  const std::string dir = certs_.path();
  ASSERT_NO_FATAL_FAILURE(MakeClientCertificate(dir, "other-ca", "client"));
  ASSERT_NO_FATAL_FAILURE(MakeClientCertificate(dir, "ca", "stranger"));  // the wrong CA
  // No certificate, or one the client CA did not sign: no connection.
  EXPECT_THAT(ConnectChannel(tcp_, absl::Seconds(1), {kToken, Ca()}).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(ConnectChannel(tcp_, absl::Seconds(1),
                             {kToken, Ca(), dir + "/stranger.pem", dir + "/stranger.key"})
                  .status(),
              StatusIs(absl::StatusCode::kUnavailable));
  // A certificate without its key is the caller's mistake.
  EXPECT_THAT(
      ConnectChannel(tcp_, absl::Seconds(1), {kToken, Ca(), dir + "/client.pem", ""}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs its key")));
  // The client CA's certificate: served (the open views need no token).
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      RawApi tls, RawApi::Connect(tcp_, {kToken, Ca(), dir + "/client.pem", dir + "/client.key"}));
  EXPECT_TRUE(tls.Status().ok());
  // gpukitctl the same way.
  absl::StatusOr<ProgramResult> ctl =
      RunProgram({CtlPath(), "--addr", tcp_, "--tls-ca", Ca(), "--tls-cert", dir + "/client.pem",
                  "--tls-key", dir + "/client.key", "status"},
                 temp_dir(), absl::Seconds(30));
  ASSERT_TRUE(ctl.ok()) << ctl.status();
  EXPECT_EQ(ctl->exit_code, 0) << ctl->stderr_text;
  EXPECT_TRUE(api().Status().ok()) << "the unix socket is unaffected";
}

// gpukitd started by hand: it must refuse TCP without TLS, and insecure TCP off loopback.
class TcpStartUpTest : public ::testing::Test {
 protected:
  ProgramResult StartDaemon(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DaemonPath(), "--backend", "cpu", "--listen",
                                     "unix://" + dir_.path() + "/gpukitd.sock"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    absl::StatusOr<ProgramResult> result = RunProgram(argv, dir_.path(), absl::Seconds(60));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ProgramResult{};
  }
  ScopedTempDir dir_;
};

TEST_F(TcpStartUpTest, TcpWithoutTlsOrOffLoopbackIsRefused) {
  const ProgramResult plain = StartDaemon({"--listen", "127.0.0.1:0"});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_THAT(plain.stderr_text + plain.stdout_text,
              HasSubstr("listen address 127.0.0.1:0 is TCP: set access.tls"));
  const ProgramResult everywhere = StartDaemon({"--listen", "0.0.0.0:0", "--insecure-tcp"});
  EXPECT_EQ(everywhere.exit_code, 1);
  EXPECT_THAT(everywhere.stderr_text + everywhere.stdout_text,
              HasSubstr("serves loopback addresses only, not 0.0.0.0:0"));
}

TEST_F(TcpStartUpTest, AnUnreadableOrEmptyTlsFileStopsStartUpNamingIt) {
  const std::string missing = dir_.path() + "/missing.pem";
  const std::string empty = dir_.WriteFile("empty.key", "");
  const std::string cert = dir_.WriteFile("server.pem", "-----BEGIN CERTIFICATE-----\n");
  auto config = [&](const std::string& cert_file, const std::string& key_file) {
    return dir_.WriteFile(
        "gpukitd.json",
        absl::StrCat(R"({"jit": {"cacheDir": "none"}, "access": {"tls": )", R"({"certFile": ")",
                     cert_file, R"(", "keyFile": ")", key_file, R"("}}})"));
  };
  const ProgramResult no_cert =
      StartDaemon({"--config", config(missing, empty), "--listen", "127.0.0.1:0"});
  EXPECT_EQ(no_cert.exit_code, 1);
  EXPECT_THAT(
      no_cert.stderr_text + no_cert.stdout_text,
      HasSubstr("cannot read access.tls.certFile " + missing + ": No such file or directory"));
  const ProgramResult empty_key =
      StartDaemon({"--config", config(cert, empty), "--listen", "127.0.0.1:0"});
  EXPECT_EQ(empty_key.exit_code, 1);
  EXPECT_THAT(empty_key.stderr_text + empty_key.stdout_text,
              HasSubstr("access.tls.keyFile " + empty + " is empty"));
}

}  // namespace
}  // namespace gpukit::testing
