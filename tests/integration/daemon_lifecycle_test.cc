// gpukitd's life as a process: its informational flags, the choice of backend on a machine
// without an NVIDIA driver, SIGTERM, and the unix socket it owns (a second daemon must not
// take it over; a stale one left by a killed daemon is replaced).
#include <dlfcn.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gpukit/client.h"
#include "gpukit/config/v1/daemon_config.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_api.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/stat.h>

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kRunTimeout = absl::Seconds(15);

bool IsSocket(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

class DaemonLifecycleTest : public ::testing::Test {
 protected:
  DaemonOptions Options(const std::string& log_name = "gpukitd.log") const {
    DaemonOptions options;
    options.dir = dir_.path();
    options.log_name = log_name;
    return options;
  }

  std::string socket_path() const { return dir_.path() + "/gpukitd.sock"; }

  // Opens a client of the daemon at `address` and runs an op on it.
  void ExpectServes(const std::string& address) {
    ClientOptions options;
    options.address = address;
    options.tenant = "lifecycle";
    options.call_timeout = absl::Seconds(10);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<int64_t>({1, 2}, {2}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Sum(a));
    EXPECT_THAT(sum.ToVector<int64_t>(), IsOkAndHolds(::testing::ElementsAre(3)));
  }

  ScopedTempDir dir_;
};

TEST_F(DaemonLifecycleTest, VersionHelpAndPrintDefaultConfigExitZero) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult version,
                              RunProgram({kDaemonPath, "--version"}, dir_.path(), kRunTimeout));
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.stdout_text, "gpukitd " GPUKIT_VERSION_STRING "\n");

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult help,
                              RunProgram({kDaemonPath, "--help"}, dir_.path(), kRunTimeout));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.stdout_text, HasSubstr("Usage: gpukitd"));
  EXPECT_THAT(help.stdout_text, HasSubstr("--listen ADDR"));

  // The embedded default configuration is valid input for --config.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult config,
      RunProgram({kDaemonPath, "--print-default-config"}, dir_.path(), kRunTimeout));
  EXPECT_EQ(config.exit_code, 0);
  gpukit::config::v1::DaemonConfig parsed;
  google::protobuf::util::JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(config.stdout_text, &parsed, strict).ok())
      << config.stdout_text;
  EXPECT_EQ(parsed.backend(), "auto");
}

TEST_F(DaemonLifecycleTest, UnknownFlagAndBadConfigFileExitTwoNamingTheProblem) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult flag,
                              RunProgram({kDaemonPath, "--frobnicate"}, dir_.path(), kRunTimeout));
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.stderr_text, HasSubstr("unknown argument \"--frobnicate\""));

  const std::string config = dir_.WriteFile("typo.json", R"({"sessions": {"minLeas": "1s"}})");
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult typo,
      RunProgram({kDaemonPath, "--listen", "unix://" + socket_path(), "--config", config},
                 dir_.path(), kRunTimeout));
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.stderr_text, HasSubstr(config));
  EXPECT_THAT(typo.stderr_text, HasSubstr("minLeas"));
  EXPECT_FALSE(PathExists(socket_path()));
}

TEST_F(DaemonLifecycleTest, CudaBackendWithoutANvidiaDriverExitsNonZeroSayingSo) {
  if (void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); cuda != nullptr) {
    dlclose(cuda);
    GTEST_SKIP() << "this machine has an NVIDIA driver (libcuda.so.1)";
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult result,
      RunProgram({kDaemonPath, "--listen", "unix://" + socket_path(), "--backend=cuda"},
                 dir_.path(), kRunTimeout));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.stdout_text + result.stderr_text, HasSubstr("CUDA driver not detected"));
  EXPECT_FALSE(PathExists(socket_path()));
}

TEST_F(DaemonLifecycleTest, AutoBackendFallsBackToTheCpuSimulationAndSaysSo) {
  DaemonOptions options = Options();
  options.backend = "";  // no --backend flag: auto
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon, DaemonProcess::Start(options));
  EXPECT_TRUE(PollUntil(
      [&] { return absl::StrContains(daemon->Log(), "Falling back to CPU simulation backend"); },
      absl::Seconds(5)))
      << daemon->Log();
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi api, RawApi::Connect(daemon->address()));
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api.Status());
    EXPECT_EQ(status.backend(), "cpu");
  }  // An idle connection would hold up shutdown for the 5 s grace (see below).
  GPUKIT_EXPECT_OK(daemon->Stop());
}

TEST_F(DaemonLifecycleTest, SigtermWithAnOpenSessionExitsZeroAndRemovesTheSocket) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                              DaemonProcess::Start(Options()));
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi api, RawApi::Connect(daemon->address()));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api.OpenSession("open-at-shutdown"));
    GPUKIT_ASSERT_OK(api.CreateArray(session, {256}, v1::DTYPE_FLOAT32));
  }
  // The session lives on its 30 s lease without the connection. A connection left open
  // would delay the exit by up to the 5 s grace: gRPC's graceful GOAWAY waits for the
  // client to answer a PING, and an idle client polls its socket only every 5 s.
  ASSERT_TRUE(IsSocket(daemon->socket_path()));

  GPUKIT_EXPECT_OK(daemon->Stop());
  EXPECT_FALSE(PathExists(daemon->socket_path()));
  EXPECT_THAT(daemon->Log(), HasSubstr("received SIGTERM"));
  EXPECT_THAT(daemon->Log(), HasSubstr("closed 1 session(s)"));
  EXPECT_THAT(daemon->Log(), HasSubstr("gpukitd stopped"));
}

TEST_F(DaemonLifecycleTest, SigtermAfterLargeTransfersExitsPromptly) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                              DaemonProcess::Start(Options()));
  {
    ClientOptions options;
    options.address = daemon->address();
    options.tenant = "bulk";
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
    const int64_t bytes = int64_t{12} << 20;
    const std::string data(bytes, '\x7f');
    std::string back(bytes, '\0');
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array array,
                                client->FromBytes(data.data(), bytes, {bytes}, DType::kUInt8));
    for (int round = 0; round < 3; ++round) GPUKIT_ASSERT_OK(array.Read(back.data(), bytes));
  }
  // Streaming megabytes can leave one of gRPC's threads in a 10 s poll; shutting down must
  // not wait for it.
  const absl::Time start = absl::Now();
  GPUKIT_EXPECT_OK(daemon->Stop(absl::Seconds(4)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

TEST_F(DaemonLifecycleTest, SecondDaemonOnTheSameSocketFailsWhileTheFirstKeepsServing) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> first,
                              DaemonProcess::Start(Options()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult second, RunProgram({kDaemonPath, "--listen", first->address(), "--backend=cpu"},
                                       dir_.path(), kRunTimeout));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_THAT(second.stdout_text + second.stderr_text,
              HasSubstr("another process is listening on " + first->socket_path()));
  EXPECT_THAT(second.stdout_text + second.stderr_text, Not(HasSubstr("listening on unix://")));

  EXPECT_TRUE(IsSocket(first->socket_path()));
  ExpectServes(first->address());
  GPUKIT_EXPECT_OK(first->Stop());
}

TEST_F(DaemonLifecycleTest, StaleSocketOfAKilledDaemonIsReplacedOnRestart) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> killed,
                              DaemonProcess::Start(Options("killed.log")));
  GPUKIT_ASSERT_OK(killed->Kill());
  ASSERT_TRUE(IsSocket(socket_path())) << "SIGKILL should leave the socket file behind";
  ASSERT_FALSE(UnixSocketAccepts(socket_path()));

  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> restarted,
                              DaemonProcess::Start(Options("restarted.log")));
  EXPECT_THAT(restarted->Log(), HasSubstr("removing stale socket " + socket_path()));
  ExpectServes(restarted->address());
  GPUKIT_EXPECT_OK(restarted->Stop());
  EXPECT_FALSE(PathExists(socket_path()));
}

TEST_F(DaemonLifecycleTest, RefusesToReplaceAFileThatIsNotASocket) {
  { std::ofstream(socket_path()) << "precious"; }
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult result,
      RunProgram({kDaemonPath, "--listen", "unix://" + socket_path(), "--backend=cpu"}, dir_.path(),
                 kRunTimeout));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.stdout_text + result.stderr_text,
              HasSubstr(socket_path() + " exists and is not a socket"));
  std::ifstream file(socket_path());
  std::string contents((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, "precious");  // left as it was
}

}  // namespace
}  // namespace gpukit::testing
