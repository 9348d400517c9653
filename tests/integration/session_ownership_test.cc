// Sessions belong to their opener (issue 14, item 4): gpukitd identifies callers on its unix
// socket by SO_PEERCRED, and a caller of another uid can do nothing with a session it did not
// open. Root opens a "victim" session with an array and a kernel; foreign_client, dropped to
// uid 65534, sends every RPC that names a session (found by walking the protos) against it
// and must get NOT_FOUND, word for word the answer for an id that does not exist; the
// victim's session, bytes and kernel must be untouched. Needs root (to spawn another uid),
// as CI runs it; skipped otherwise.
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/session_methods.h"
#include "tests/testing/status_matchers.h"
#include <sys/stat.h>

namespace gpukit::testing {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

constexpr uid_t kForeignUid = 65534;  // nobody
// The RPCs that name a session today; the walk must find at least these.
constexpr size_t kKnownSessionMethods = 17;

constexpr char kKernelSource[] = R"(
extern "C" __global__ void twice(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2;
}
)";

// What gpukitd answers for a session id it does not know (SessionNotFoundError).
std::string NotFoundMessage(const std::string& session_id) {
  return absl::StrCat("session \"", session_id, "\" not found (closed, expired or never opened)");
}

struct ClientOutput {
  // Lines by their first word: "RESULT" -> {"gpukit.v1.X.Y 5 message", ...}.
  std::map<std::string, std::vector<std::string>> lines;
};

ClientOutput ParseOutput(const std::string& text) {
  ClientOutput output;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    output.lines[parts.first].push_back(parts.second);
  }
  return output;
}

class SessionOwnershipTest : public DaemonTest {
 protected:
  // Memory cache only: nothing written under root's home.
  std::string DaemonConfigJson() const override { return R"({"jit": {"cacheDir": "none"}})"; }

  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root, to run a client under another uid (CI runs as root)";
    }
    ASSERT_NO_FATAL_FAILURE(DaemonTest::SetUp());
    // The foreign uid must reach the socket: the directory is 0700 and the socket 0755 (the
    // umask's), as an operator's would be until they open it up for their users.
    ASSERT_EQ(chmod(temp_dir().c_str(), 0755), 0);
    ASSERT_EQ(chmod(daemon().socket_path().c_str(), 0777), 0);
    compute_ = v1::ComputeService::NewStub(api().channel());
  }

  void TearDown() override {
    compute_.reset();
    DaemonTest::TearDown();
  }

  // Runs foreign_client as kForeignUid with `args`; its stdout, parsed.
  ClientOutput RunForeign(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FindBinary(GPUKIT_FOREIGN_CLIENT_PATH), "--addr",
                                     daemon().address(), "--as-uid", std::to_string(kForeignUid)};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ProgramResult> result = RunProgram(argv, temp_dir(), absl::Seconds(60));
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    EXPECT_EQ(result->exit_code, 0) << result->stderr_text;
    return ParseOutput(result->stdout_text);
  }

  // The victim: a session of root's with an array of known bytes and, where NVRTC is
  // present, a compiled kernel; and a task in the history (the upload).
  void OpenVictim() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(session_, api().OpenSession("victim", 60000));
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                                api().CreateArray(session_, {4}, v1::DTYPE_FLOAT32));
    array_ = array.handle();
    bytes_ = std::string("0123456789abcdef");
    GPUKIT_ASSERT_OK(api().UploadBytes(session_, array_, bytes_).status());
    v1::CompileKernelRequest compile;
    compile.set_session_id(session_);
    compile.set_source(kKernelSource);
    compile.add_entries("twice");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::CompileKernelResponse compiled;
    if (compute_->CompileKernel(&context, compile, &compiled).ok()) {
      kernel_ = compiled.kernel();
    } else {
      kernel_ = "k-00000000000000000000000000000000";  // no NVRTC: a handle of nothing
    }
  }

  // The victim's state is what OpenVictim left.
  void ExpectVictimUntouched() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, api().ListSessions());
    const v1::SessionInfo* victim = nullptr;
    for (const v1::SessionInfo& s : listed.sessions()) {
      if (s.session_id() == session_) victim = &s;
    }
    ASSERT_NE(victim, nullptr) << "the victim's session is gone";
    EXPECT_EQ(victim->arrays(), 1);
    v1::DownloadRequest download;
    download.set_session_id(session_);
    download.set_handle(array_);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<v1::DownloadResponse> chunks, api().Download(download));
    std::string read;
    for (const v1::DownloadResponse& chunk : chunks) read += chunk.chunk().data();
    EXPECT_EQ(read, bytes_);
    if (!absl::StartsWith(kernel_, "k-0000")) {
      // The kernel is still there: launching it is refused for want of a GPU (CPU backend)
      // or runs, never "not found".
      v1::LaunchKernelRequest launch;
      launch.set_session_id(session_);
      launch.set_kernel(kernel_);
      launch.mutable_grid()->set_x(1);
      launch.mutable_block()->set_x(4);
      launch.add_args()->set_array(array_);
      launch.add_args()->set_i32(0);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::LaunchKernelResponse launched;
      const grpc::Status status = compute_->LaunchKernel(&context, launch, &launched);
      EXPECT_NE(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
    }
  }

  std::unique_ptr<v1::ComputeService::Stub> compute_;
  std::string session_;
  std::string array_;
  std::string bytes_;
  std::string kernel_;
};

TEST_F(SessionOwnershipTest, ForeignUidGetsNotFoundFromEveryRpcThatNamesASession) {
  ASSERT_NO_FATAL_FAILURE(OpenVictim());
  const ClientOutput out = RunForeign(
      {"--mode", "attack", "--session", session_, "--array", array_, "--kernel", kernel_});

  // The walk covered every method that names a session, here and in the client alike.
  std::set<std::string> expected;
  for (const auto* method : MethodsNamingASession()) expected.insert(method->full_name());
  EXPECT_GE(expected.size(), kKnownSessionMethods);
  EXPECT_THAT(expected, AllOf(Contains("gpukit.v1.SessionService.KeepAlive"),
                              Contains("gpukit.v1.SessionService.Close"),
                              Contains("gpukit.v1.ArrayService.Upload"),
                              Contains("gpukit.v1.ComputeService.LaunchKernel")));
  std::set<std::string> sent;
  const std::string not_found =
      absl::StrCat(static_cast<int>(grpc::StatusCode::NOT_FOUND), " ", NotFoundMessage(session_));
  ASSERT_TRUE(out.lines.count("RESULT")) << "the client sent nothing";
  for (const std::string& line : out.lines.at("RESULT")) {
    std::pair<std::string, std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    sent.insert(parts.first);
    EXPECT_EQ(parts.second, not_found) << parts.first;
  }
  EXPECT_EQ(sent, expected);
  EXPECT_THAT(out.lines.at("RESULT"), SizeIs(expected.size()));

  // Its own session it sees; root's it does not, nor root's tasks.
  ASSERT_TRUE(out.lines.count("OWN"));
  const std::string own = out.lines.at("OWN").front();
  std::vector<std::string> listed;
  if (out.lines.count("LISTED")) listed = out.lines.at("LISTED");
  EXPECT_EQ(listed, std::vector<std::string>{own});
  if (out.lines.count("TASK")) {
    EXPECT_THAT(out.lines.at("TASK"), Not(Contains(session_)));
  }
  // Of the tenants, only its own session's: root's "victim" tenant and its usage stay hidden.
  ASSERT_TRUE(out.lines.count("TENANT"));
  EXPECT_EQ(out.lines.at("TENANT"), std::vector<std::string>{"foreign"});
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTenantsResponse all, api().ListTenants());
  ASSERT_EQ(all.tenants_size(), 2) << "an admin sees both";
  EXPECT_EQ(all.tenants(0).tenant(), "foreign");
  EXPECT_EQ(all.tenants(1).tenant(), "victim");

  ExpectVictimUntouched();
  // gpukitd logged the refusals with the caller's uid.
  EXPECT_THAT(daemon().Log(), AllOf(HasSubstr("session access refused: session=" + session_),
                                    HasSubstr("caller=\"uid=65534 gid=65534 pid=")));
  // And the victim itself still works, its lease renewable and its session closable.
  EXPECT_TRUE(api().KeepAlive(session_).ok());
  EXPECT_TRUE(api().Close(session_).ok());
}

TEST_F(SessionOwnershipTest, ForeignRefusalReadsExactlyAsAnUnknownSession) {
  ASSERT_NO_FATAL_FAILURE(OpenVictim());
  // A session id that never existed, from the same foreign client: same code, and the
  // message differs only by the id it quotes.
  const std::string unknown = "s-" + std::string(32, '0');
  const ClientOutput out = RunForeign(
      {"--mode", "attack", "--session", unknown, "--array", array_, "--kernel", kernel_});
  ASSERT_TRUE(out.lines.count("RESULT"));
  const std::string expected =
      absl::StrCat(static_cast<int>(grpc::StatusCode::NOT_FOUND), " ", NotFoundMessage(unknown));
  for (const std::string& line : out.lines.at("RESULT")) {
    EXPECT_THAT(line, HasSubstr(expected));
  }
  ExpectVictimUntouched();
}

TEST_F(SessionOwnershipTest, SameUidAndAdminsMayUseASession) {
  // uid 65534 opens a session; another process of uid 65534 uses it; root (an admin) uses
  // and lists it, with its owner as the socket saw it.
  const ClientOutput opened = RunForeign({"--mode", "open"});
  ASSERT_TRUE(opened.lines.count("OPENED"));
  std::pair<std::string, std::string> ids =
      absl::StrSplit(opened.lines.at("OPENED").front(), absl::MaxSplits(' ', 1));
  const std::string& session = ids.first;
  const std::string& array = ids.second;

  const ClientOutput used = RunForeign({"--mode", "use", "--session", session, "--array", array});
  ASSERT_TRUE(used.lines.count("USE"));
  EXPECT_EQ(used.lines.at("USE"), (std::vector<std::string>{"KeepAlive 0", "Describe 0"}));

  EXPECT_TRUE(api().Describe(session, array).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, api().ListSessions());
  bool found = false;
  for (const v1::SessionInfo& s : listed.sessions()) {
    if (s.session_id() != session) continue;
    found = true;
    EXPECT_FALSE(s.owner_network());
    EXPECT_EQ(s.owner_uid(), kForeignUid);
    EXPECT_EQ(s.owner_gid(), kForeignUid);
    EXPECT_GT(s.owner_pid(), 0);
  }
  EXPECT_TRUE(found) << "root (an admin) should list the session of uid " << kForeignUid;
  EXPECT_TRUE(api().Close(session).ok());
}

// The daemon also listens on TCP (loopback, a port of its choosing).
class TcpSessionOwnershipTest : public SessionOwnershipTest {
 protected:
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--listen", "127.0.0.1:0"};
  }

  // "127.0.0.1:<port>" from the daemon's "listening on" line.
  std::string TcpAddress() {
    const std::string log = daemon().Log();
    const size_t at = log.find("listening on 127.0.0.1:");
    if (at == std::string::npos) return "";
    const size_t start = at + std::string("listening on ").size();
    const size_t end =
        log.find_first_not_of("0123456789", start + std::string("127.0.0.1:").size());
    return log.substr(start, end - start);
  }
};

TEST_F(TcpSessionOwnershipTest, OverTcpTheIdIsTheCapabilityAndLocalSessionsAreOffLimits) {
  ASSERT_NO_FATAL_FAILURE(OpenVictim());  // root's session, on the unix socket
  const std::string tcp = TcpAddress();
  ASSERT_FALSE(tcp.empty()) << daemon().Log();
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi first, RawApi::Connect(tcp));
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi second, RawApi::Connect(tcp));

  // A TCP caller cannot touch a session opened on the unix socket, nor list it.
  EXPECT_THAT(first.KeepAlive(session_).status(),
              StatusIs(absl::StatusCode::kNotFound, NotFoundMessage(session_)));
  EXPECT_THAT(first.Describe(session_, array_).status(),
              StatusIs(absl::StatusCode::kNotFound, NotFoundMessage(session_)));

  // A session opened over TCP: any TCP connection with its id may use it.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string remote, first.OpenSession("remote", 60000));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              first.CreateArray(remote, {4}, v1::DTYPE_FLOAT32));
  EXPECT_TRUE(second.Describe(remote, array.handle()).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse tcp_listed, second.ListSessions());
  EXPECT_EQ(tcp_listed.sessions_size(), 0) << "TCP callers list no sessions";
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTenantsResponse tcp_tenants, first.ListTenants());
  EXPECT_EQ(tcp_tenants.tenants_size(), 0) << "nor tenants, not even their own session's";

  // Root (an admin, on the unix socket) sees and may use it, with its owner's address.
  EXPECT_TRUE(api().Describe(remote, array.handle()).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, api().ListSessions());
  bool found = false;
  for (const v1::SessionInfo& s : listed.sessions()) {
    if (s.session_id() != remote) continue;
    found = true;
    EXPECT_TRUE(s.owner_network());
    EXPECT_THAT(s.owner_address(), HasSubstr("ipv4:127.0.0.1:"));
    EXPECT_EQ(s.owner_uid(), 0u);
  }
  EXPECT_TRUE(found);

  // A local user who is not an admin may not use it.
  const ClientOutput out = RunForeign(
      {"--mode", "attack", "--session", remote, "--array", array.handle(), "--kernel", kernel_});
  ASSERT_TRUE(out.lines.count("RESULT"));
  const std::string not_found =
      absl::StrCat(static_cast<int>(grpc::StatusCode::NOT_FOUND), " ", NotFoundMessage(remote));
  for (const std::string& line : out.lines.at("RESULT")) EXPECT_THAT(line, HasSubstr(not_found));
  EXPECT_TRUE(second.Describe(remote, array.handle()).ok());
  EXPECT_TRUE(second.Close(remote).ok());
  ExpectVictimUntouched();
}

}  // namespace
}  // namespace gpukit::testing
