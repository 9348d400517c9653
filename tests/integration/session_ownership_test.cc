// Sessions belong to their opener (issue 14, item 4), tenants come from identity and the
// admin role guards partitions (issue 17): gpukitd identifies callers on its unix
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
#include "absl/strings/numbers.h"
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
using ::testing::StartsWith;

constexpr uid_t kForeignUid = 65534;  // nobody
// Its tenant: with no `access` configured, every uid is a tenant of its own.
constexpr char kForeignTenant[] = "uid-65534";
// Another local uid that is not an admin.
constexpr uid_t kOtherUid = 65533;
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

// "OPENED <session> <array>" of foreign_client --mode open.
std::pair<std::string, std::string> OpenedIds(const ClientOutput& out) {
  if (!out.lines.count("OPENED")) return {};
  return absl::StrSplit(out.lines.at("OPENED").front(), absl::MaxSplits(' ', 1));
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
    return RunClient(kForeignUid, daemon().address(), args);
  }

  // Runs foreign_client as `uid` (0: root itself) against `address` with `args`.
  ClientOutput RunClient(uid_t uid, const std::string& address,
                         const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FindBinary(GPUKIT_FOREIGN_CLIENT_PATH), "--addr", address,
                                     "--as-uid", std::to_string(uid)};
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
  EXPECT_EQ(out.lines.at("TENANT"), std::vector<std::string>{kForeignTenant});
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTenantsResponse all, api().ListTenants());
  ASSERT_EQ(all.tenants_size(), 2) << "an admin sees both";
  EXPECT_EQ(all.tenants(0).tenant(), kForeignTenant);
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

// --- Tenants from identity ------------------------------------------------------------------

TEST_F(SessionOwnershipTest, ALocalUserActsAsItsOwnTenantAndMayClaimNoOther) {
  // Leaving the tenant empty takes the caller's own; naming it is the same.
  const ClientOutput own = RunForeign({"--mode", "open"});
  ASSERT_TRUE(own.lines.count("GRANTED")) << "refused: " << own.lines.count("REFUSED");
  EXPECT_EQ(own.lines.at("GRANTED"), std::vector<std::string>{kForeignTenant});
  const ClientOutput named = RunForeign({"--mode", "open", "--tenant", kForeignTenant});
  ASSERT_TRUE(named.lines.count("GRANTED"));
  EXPECT_EQ(named.lines.at("GRANTED"), std::vector<std::string>{kForeignTenant});

  // Another tenant's name is refused, and logged with the caller's uid.
  const ClientOutput claimed = RunForeign({"--mode", "open", "--tenant", "victim"});
  ASSERT_TRUE(claimed.lines.count("REFUSED"));
  EXPECT_THAT(
      claimed.lines.at("REFUSED").front(),
      AllOf(StartsWith(absl::StrCat(static_cast<int>(grpc::StatusCode::PERMISSION_DENIED), " ")),
            HasSubstr("acts as tenant \"uid-65534\""),
            HasSubstr("may not open a session for tenant \"victim\"")));
  EXPECT_THAT(daemon().Log(), HasSubstr("session open refused: caller=\"uid=65534 gid=65534 pid="));

  // An admin (root) may open a session for any tenant, and its own is "uid-0".
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string for_other, api().OpenSession(kForeignTenant, 60000));
  EXPECT_TRUE(api().Close(for_other).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTenantsResponse tenants, api().ListTenants());
  std::vector<std::string> names;
  for (const v1::TenantUsage& t : tenants.tenants()) names.push_back(t.tenant());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(kForeignTenant)) << "no \"victim\" tenant";
}

// An `access` block: uid 65534 is tenant "guests", which may use partition "guest-pool" only;
// uid 65533 is an admin by configuration.
class AccessConfigTest : public SessionOwnershipTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"jit": {"cacheDir": "none"},
               "partitions": [{"name": "guest-pool", "memory": "256MiB", "compute": 0.25}],
               "access": {"uids": {"65534": "guests"},
                          "tenants": [{"name": "guests", "partitions": ["guest-pool"]}],
                          "adminUids": [65533]}})";
  }
};

TEST_F(AccessConfigTest, MappedTenantsAndTheirPartitionsComeFromTheConfiguration) {
  const ClientOutput in_default = RunForeign({"--mode", "open"});
  ASSERT_TRUE(in_default.lines.count("REFUSED"));
  EXPECT_THAT(
      in_default.lines.at("REFUSED").front(),
      AllOf(StartsWith(absl::StrCat(static_cast<int>(grpc::StatusCode::PERMISSION_DENIED), " ")),
            HasSubstr("tenant \"guests\" may not use partition \"default\"")));
  const ClientOutput in_pool = RunForeign({"--mode", "open", "--partition", "guest-pool"});
  ASSERT_TRUE(in_pool.lines.count("GRANTED"));
  EXPECT_EQ(in_pool.lines.at("GRANTED"), std::vector<std::string>{"guests"});
  EXPECT_THAT(daemon().Log(), HasSubstr("and those access names"));

  // uid 65533 is an admin here: a partition call passes the role check (and fails only on
  // its empty request), where uid 65534 is refused.
  const std::string partition_call = "gpukit.v1.AdminService.DeletePartition";
  std::map<std::string, std::string> codes;
  for (uid_t uid : {kOtherUid, kForeignUid}) {
    const ClientOutput out =
        RunClient(uid, daemon().address(),
                  {"--mode", "every", "--session", "s-x", "--array", "a-x", "--kernel", "k-x"});
    ASSERT_TRUE(out.lines.count("RESULT"));
    for (const std::string& line : out.lines.at("RESULT")) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      if (parts[0] == partition_call) codes[std::to_string(uid)] = parts[1];
    }
  }
  EXPECT_NE(codes[std::to_string(kOtherUid)],
            std::to_string(static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)));
  EXPECT_EQ(codes[std::to_string(kForeignUid)],
            std::to_string(static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)));
}

// Bearer tokens of the TCP tests; the configuration holds their SHA-256 (printf %s TOKEN |
// sha256sum). Two tokens of one tenant are two identities.
constexpr char kRemoteToken[] = "tcp-token-remote-1";
constexpr char kRemoteToken2[] = "tcp-token-remote-2";

// The daemon also listens on TCP (loopback, a port of its choosing, without TLS), where two
// tokens of tenant "remote" are valid.
class TcpSessionOwnershipTest : public SessionOwnershipTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"jit": {"cacheDir": "none"}, "access": {"tokens": [
      {"sha256": "4b83aba2af197ec3d7a703870524713f7d15ab138fafdb9045b241deb7c227dc",
       "tenant": "remote"},
      {"sha256": "2722304a8b67ae90d50c53e360e631d8c991544185e65e24bad6985f4ffe9de8",
       "tenant": "remote"}]}})";
  }
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--listen", "127.0.0.1:0", "--insecure-tcp"};
  }
};

TEST_F(TcpSessionOwnershipTest, OverTcpTheTokenIsTheIdentityAndLocalSessionsAreOffLimits) {
  ASSERT_NO_FATAL_FAILURE(OpenVictim());  // root's session, on the unix socket
  const std::string tcp = TcpAddress();
  ASSERT_FALSE(tcp.empty()) << daemon().Log();
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi first, RawApi::Connect(tcp, {kRemoteToken, ""}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi again, RawApi::Connect(tcp, {kRemoteToken, ""}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi other_token, RawApi::Connect(tcp, {kRemoteToken2, ""}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi no_token, RawApi::Connect(tcp));
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi wrong_token, RawApi::Connect(tcp, {"not-a-token", ""}));

  // A TCP caller cannot touch a session opened on the unix socket, nor list it.
  EXPECT_THAT(first.KeepAlive(session_).status(),
              StatusIs(absl::StatusCode::kNotFound, NotFoundMessage(session_)));
  EXPECT_THAT(first.Describe(session_, array_).status(),
              StatusIs(absl::StatusCode::kNotFound, NotFoundMessage(session_)));

  // A session opened with a token acts for the token's tenant, and no other may be claimed.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string remote, first.OpenSession("", 60000));
  EXPECT_THAT(first.OpenSession("victim", 60000).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("this token acts as tenant \"remote\"")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              first.CreateArray(remote, {4}, v1::DTYPE_FLOAT32));
  // Another connection with the same token may use it; another token of the same tenant
  // may not, and gets the unknown id's answer.
  EXPECT_TRUE(again.Describe(remote, array.handle()).ok());
  EXPECT_THAT(other_token.Describe(remote, array.handle()).status(),
              StatusIs(absl::StatusCode::kNotFound, NotFoundMessage(remote)));
  // Without a token, or with one the daemon does not know: UNAUTHENTICATED, whatever the id,
  // and no session opens.
  for (RawApi* anonymous : {&no_token, &wrong_token}) {
    EXPECT_THAT(anonymous->Describe(remote, array.handle()).status(),
                StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("valid bearer token")));
    EXPECT_THAT(anonymous->KeepAlive("s-" + std::string(32, '0')).status(),
                StatusIs(absl::StatusCode::kUnauthenticated));
    EXPECT_THAT(anonymous->OpenSession("remote", 60000).status(),
                StatusIs(absl::StatusCode::kUnauthenticated));
    // The open read-only views still answer.
    EXPECT_TRUE(anonymous->Status().ok());
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse same_token_listed, again.ListSessions());
  ASSERT_EQ(same_token_listed.sessions_size(), 1) << "a token lists its own sessions";
  EXPECT_EQ(same_token_listed.sessions(0).session_id(), remote);
  EXPECT_EQ(same_token_listed.sessions(0).tenant(), "remote");
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse other_listed, other_token.ListSessions());
  EXPECT_EQ(other_listed.sessions_size(), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse anonymous_listed, no_token.ListSessions());
  EXPECT_EQ(anonymous_listed.sessions_size(), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTenantsResponse tcp_tenants, no_token.ListTenants());
  EXPECT_EQ(tcp_tenants.tenants_size(), 0);

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
  EXPECT_TRUE(again.Describe(remote, array.handle()).ok());
  EXPECT_TRUE(again.Close(remote).ok());
  ExpectVictimUntouched();
  // The refusals were logged with the peer's address (and a prefix of the token's hash).
  EXPECT_THAT(daemon().Log(),
              AllOf(HasSubstr("session access refused, no valid token: caller=\"tcp peer=ipv4:"),
                    HasSubstr("session open refused: caller=\"tcp peer=ipv4:127.0.0.1:"),
                    HasSubstr("token=4b83aba2af19")));
}

// --- Who may call each RPC (docs/security.md, "Who may call each RPC") ----------------------

// What a role gets from an RPC sent with a request that names a session of the owner's.
enum class Expect {
  kServed,           // passes every access check: any answer but the refusals below
  kSessionNotFound,  // exactly the answer for a session id that does not exist
  kDenied,           // PERMISSION_DENIED: needs the admin role
  kTaskNotFound,     // CancelTask of task 0: no such task, for everyone
  kUnauthenticated,  // UNAUTHENTICATED: a TCP caller without a valid token
};

struct RpcAccess {
  Expect admin;  // root, on the unix socket
  Expect owner;  // the uid that opened the session
  Expect other;  // another local uid, not an admin
  Expect tcp;    // a TCP caller with a valid token (not an admin's)
  Expect anonymous;  // a TCP caller without a token
};

// The table of docs/security.md. Every gpukit.v1 method must have a row.
const std::map<std::string, RpcAccess>& AccessTable() {
  constexpr RpcAccess kSession = {Expect::kServed, Expect::kServed, Expect::kSessionNotFound,
                                  Expect::kSessionNotFound, Expect::kUnauthenticated};
  constexpr RpcAccess kOpen = {Expect::kServed, Expect::kServed, Expect::kServed, Expect::kServed,
                               Expect::kServed};
  constexpr RpcAccess kAdminOnly = {Expect::kServed, Expect::kDenied, Expect::kDenied,
                                    Expect::kDenied, Expect::kDenied};
  static const auto* table = new std::map<std::string, RpcAccess>{
      {"gpukit.v1.SessionService.Open",
       {Expect::kServed, Expect::kServed, Expect::kServed, Expect::kServed,
        Expect::kUnauthenticated}},
      {"gpukit.v1.SessionService.KeepAlive", kSession},
      {"gpukit.v1.SessionService.Close", kSession},
      {"gpukit.v1.ArrayService.Create", kSession},
      {"gpukit.v1.ArrayService.Upload", kSession},
      {"gpukit.v1.ArrayService.Download", kSession},
      {"gpukit.v1.ArrayService.Free", kSession},
      {"gpukit.v1.ArrayService.Describe", kSession},
      {"gpukit.v1.ArrayService.RegisterHostMemory", kSession},
      {"gpukit.v1.ArrayService.UnregisterHostMemory", kSession},
      {"gpukit.v1.ArrayService.CopyFromHostMemory", kSession},
      {"gpukit.v1.ArrayService.CopyToHostMemory", kSession},
      {"gpukit.v1.ArrayService.Export", kSession},
      {"gpukit.v1.ArrayService.Import", kSession},
      {"gpukit.v1.ComputeService.RunOp", kSession},
      {"gpukit.v1.ComputeService.ListOps", kOpen},
      {"gpukit.v1.ComputeService.Submit", kSession},
      {"gpukit.v1.ComputeService.CompileKernel", kSession},
      {"gpukit.v1.ComputeService.GetCompileLog", kSession},
      {"gpukit.v1.ComputeService.LaunchKernel", kSession},
      {"gpukit.v1.ComputeService.FreeKernel", kSession},
      {"gpukit.v1.AdminService.Status", kOpen},
      {"gpukit.v1.AdminService.ListDevices", kOpen},
      {"gpukit.v1.AdminService.ListSessions", kOpen},  // filtered: see the tests above
      {"gpukit.v1.AdminService.CreatePartition", kAdminOnly},
      {"gpukit.v1.AdminService.UpdatePartition", kAdminOnly},
      {"gpukit.v1.AdminService.DeletePartition", kAdminOnly},
      {"gpukit.v1.AdminService.ListPartitions", kOpen},
      {"gpukit.v1.AdminService.ListTasks", kOpen},  // filtered
      {"gpukit.v1.AdminService.CancelTask",
       {Expect::kTaskNotFound, Expect::kTaskNotFound, Expect::kTaskNotFound, Expect::kTaskNotFound,
        Expect::kTaskNotFound}},
      {"gpukit.v1.AdminService.ListTenants", kOpen},  // filtered
  };
  return *table;
}

// Checks one "RESULT <method> <code> <message>" line against what `expect` allows.
void ExpectAnswer(const std::string& role, const std::string& method, Expect expect, int code,
                  const std::string& message, const std::string& session_id) {
  const bool session_refusal = code == static_cast<int>(grpc::StatusCode::NOT_FOUND) &&
                               message == NotFoundMessage(session_id);
  const bool refusal = session_refusal ||
                       code == static_cast<int>(grpc::StatusCode::PERMISSION_DENIED) ||
                       code == static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  SCOPED_TRACE(absl::StrCat(role, " calling ", method, ": ", code, " ", message));
  switch (expect) {
    case Expect::kServed:
      EXPECT_FALSE(refusal);
      break;
    case Expect::kSessionNotFound:
      EXPECT_TRUE(session_refusal);
      break;
    case Expect::kDenied:
      EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
      EXPECT_THAT(message, HasSubstr("needs the admin role"));
      break;
    case Expect::kUnauthenticated:
      EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::UNAUTHENTICATED));
      EXPECT_THAT(message, HasSubstr("valid bearer token"));
      break;
    case Expect::kTaskNotFound:
      EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::NOT_FOUND));
      EXPECT_FALSE(session_refusal);
      break;
  }
}

TEST_F(TcpSessionOwnershipTest, EveryRpcAnswersEachRoleAsTheTableSays) {
  // The table covers every method of every service, no more.
  std::set<std::string> methods;
  for (const auto* method : EveryMethod()) methods.insert(method->full_name());
  std::set<std::string> rows;
  for (const auto& [name, access] : AccessTable()) rows.insert(name);
  ASSERT_EQ(methods, rows) << "a new RPC needs a row here and in docs/security.md";

  const std::string tcp = TcpAddress();
  ASSERT_FALSE(tcp.empty()) << daemon().Log();
  // Two sessions of the owner's: the admin's run closes the one it aims at (Close is let
  // through), the other roles aim at the other, the owner last.
  const auto [for_others, others_array] = OpenedIds(RunForeign({"--mode", "open"}));
  const auto [for_admin, admin_array] = OpenedIds(RunForeign({"--mode", "open"}));
  ASSERT_FALSE(for_others.empty());
  ASSERT_FALSE(for_admin.empty());

  struct Run {
    std::string role;
    uid_t uid;
    std::string address;
    std::string session;
    std::string array;
    Expect RpcAccess::*expect;
    std::string token;  // for TCP; "" sends none
  };
  const std::vector<Run> runs = {
      {"another local uid", kOtherUid, daemon().address(), for_others, others_array,
       &RpcAccess::other},
      {"a TCP caller with a token", kOtherUid, tcp, for_others, others_array, &RpcAccess::tcp,
       kRemoteToken},
      {"a TCP caller without a token", kOtherUid, tcp, for_others, others_array,
       &RpcAccess::anonymous, ""},
      {"the owner", kForeignUid, daemon().address(), for_others, others_array, &RpcAccess::owner},
      {"an admin", 0, daemon().address(), for_admin, admin_array, &RpcAccess::admin},
  };
  for (const Run& run : runs) {
    std::vector<std::string> args = {
        "--mode",  "every",   "--session", run.session,
        "--array", run.array, "--kernel",  kernel_.empty() ? "k-x" : kernel_};
    if (!run.token.empty()) args.insert(args.end(), {"--token", run.token});
    const ClientOutput out = RunClient(run.uid, run.address, args);
    ASSERT_TRUE(out.lines.count("RESULT")) << run.role << " sent nothing";
    std::set<std::string> answered;
    for (const std::string& line : out.lines.at("RESULT")) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      ASSERT_GE(parts.size(), 2u) << line;
      parts.resize(3);
      int code = -1;
      ASSERT_TRUE(absl::SimpleAtoi(parts[1], &code)) << line;
      answered.insert(parts[0]);
      ExpectAnswer(run.role, parts[0], AccessTable().at(parts[0]).*run.expect, code, parts[2],
                   run.session);
    }
    EXPECT_EQ(answered, methods) << run.role;
  }
  // Each refusal of the admin role was logged with the caller.
  EXPECT_THAT(
      daemon().Log(),
      AllOf(
          HasSubstr("admin call refused: rpc=CreatePartition caller=\"uid=65533"),
          HasSubstr("admin call refused: rpc=DeletePartition caller=\"tcp peer=ipv4:127.0.0.1:")));
}

}  // namespace
}  // namespace gpukit::testing
