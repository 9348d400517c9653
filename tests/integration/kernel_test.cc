// Custom kernels end to end against the real daemon on the CPU backend: compiling through
// the C++ client (NVRTC needs no GPU), the kernel cache, compile errors with NVRTC's log,
// the launch's FAILED_PRECONDITION on the CPU backend, ownership, and malformed
// CompileKernel and LaunchKernel requests sent through raw stubs. After every test the
// daemon must still serve another client (TearDown checks).
//
// Tests that need a compiled kernel skip, saying so, when the daemon reports at start-up
// that it found no NVRTC ("NVRTC JIT compiler not available" in its log).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr absl::StatusCode kInvalidArgument = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
constexpr absl::StatusCode kFailedPrecondition = absl::StatusCode::kFailedPrecondition;

constexpr char kSaxpy[] = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
)";

#define SKIP_WITHOUT_NVRTC()                                                               \
  do {                                                                                     \
    if (DaemonHasNoNvrtc()) {                                                              \
      GTEST_SKIP() << "the daemon found no NVRTC on this host, so it compiles no kernels"; \
    }                                                                                      \
  } while (false)

class KernelTest : public DaemonTest {
 protected:
  // Memory cache only, so the first compile of each test really compiles.
  std::string DaemonConfigJson() const override { return R"({"jit": {"cacheDir": "none"}})"; }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(DaemonTest::SetUp());
    compute_ = v1::ComputeService::NewStub(api().channel());
    GPUKIT_ASSERT_OK_AND_ASSIGN(session_, api().OpenSession("kernels"));
  }

  void TearDown() override {
    if (!HasFatalFailure()) ExpectDaemonServesAnotherClient();
    compute_.reset();  // lets go of the channel, so the daemon's shutdown waits for nobody
    DaemonTest::TearDown();
  }

  bool DaemonHasNoNvrtc() {
    return absl::StrContains(daemon().Log(), "NVRTC JIT compiler not available");
  }

  absl::StatusOr<v1::CompileKernelResponse> Compile(const v1::CompileKernelRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::CompileKernelResponse response;
    absl::Status status = FromGrpc(compute_->CompileKernel(&context, request, &response), context);
    if (!status.ok()) return status;
    return response;
  }

  absl::StatusOr<v1::LaunchKernelResponse> Launch(const v1::LaunchKernelRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::LaunchKernelResponse response;
    absl::Status status = FromGrpc(compute_->LaunchKernel(&context, request, &response), context);
    if (!status.ok()) return status;
    return response;
  }

  v1::CompileKernelRequest SaxpyRequest() const {
    v1::CompileKernelRequest request;
    request.set_session_id(session_);
    request.set_source(kSaxpy);
    request.add_entries("saxpy");
    return request;
  }

  // A LaunchKernel request for saxpy over `n` elements of arrays x and y, well formed.
  v1::LaunchKernelRequest SaxpyLaunch(const std::string& kernel, const std::string& x,
                                      const std::string& y, int n) const {
    v1::LaunchKernelRequest request;
    request.set_session_id(session_);
    request.set_kernel(kernel);
    request.mutable_grid()->set_x((n + 255) / 256);
    request.mutable_block()->set_x(256);
    request.add_args()->set_f32(2.0f);
    request.add_args()->set_array(x);
    request.add_args()->set_array(y);
    request.add_args()->set_i32(n);
    return request;
  }

  size_t KernelTaskCount() {
    absl::StatusOr<v1::ListTasksResponse> tasks = api().ListTasks({});
    EXPECT_TRUE(tasks.ok()) << tasks.status();
    if (!tasks.ok()) return 0;
    size_t count = 0;
    for (const v1::TaskInfo& task : tasks->tasks()) count += task.kind() == "kernel";
    return count;
  }

  std::unique_ptr<v1::ComputeService::Stub> compute_;
  std::string session_;
};

TEST_F(KernelTest, CompilesThroughTheCppClientOnTheCpuBackendAndCachesTheResult) {
  SKIP_WITHOUT_NVRTC();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Kernel first, client->CompileKernel(kSaxpy, {"saxpy"}));
  EXPECT_THAT(first.handle, StartsWith("k-"));
  EXPECT_THAT(first.entries, ElementsAre("saxpy"));
  EXPECT_THAT(first.lowered_names, ElementsAre("saxpy"));
  EXPECT_EQ(first.arch, "sm_90");  // jit.cpuArch's default
  EXPECT_EQ(first.origin, "compiled");
  EXPECT_GT(first.compile_ms, 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Kernel again, client->CompileKernel(kSaxpy, {"saxpy"}));
  EXPECT_EQ(again.origin, "memory");
  EXPECT_EQ(again.compile_ms, 0);
  EXPECT_NE(again.handle, first.handle);
  GPUKIT_EXPECT_OK(client->FreeKernel(first));
  GPUKIT_EXPECT_OK(client->FreeKernel(again));
}

TEST_F(KernelTest, CompileErrorIsInvalidArgumentWithNvrtcsLogLine) {
  SKIP_WITHOUT_NVRTC();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  absl::StatusOr<Kernel> kernel = client->CompileKernel(
      R"(extern "C" __global__ void broken(float* y) { y[0] = undeclared_thing; })", {"broken"});
  EXPECT_THAT(kernel, StatusIs(kInvalidArgument,
                               AllOf(HasSubstr("kernel compilation failed for sm_90"),
                                     HasSubstr("identifier \"undeclared_thing\" is undefined"))));
}

TEST_F(KernelTest, LaunchOnTheCpuBackendIsFailedPreconditionAndRunsNothing) {
  SKIP_WITHOUT_NVRTC();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<float>({1, 2, 3, 4}, {4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array y, client->FromVector<float>({10, 20, 30, 40}, {4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Kernel saxpy, client->CompileKernel(kSaxpy, {"saxpy"}));
  EXPECT_THAT(client->LaunchKernel(saxpy, "", {1}, {4}, 0, {2.0f, x, y, 4}),
              StatusIs(kFailedPrecondition,
                       HasSubstr("kernel launch requires a GPU; the kernel compiled")));
  EXPECT_EQ(KernelTaskCount(), 0u);
  EXPECT_THAT(y.ToVector<float>(), IsOkAndHolds(ElementsAre(10, 20, 30, 40)));
}

TEST_F(KernelTest, AnotherClientsKernelAndAFreedKernelAreNotFound) {
  SKIP_WITHOUT_NVRTC();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> owner, Connect("owner"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> other, Connect("other"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Kernel saxpy, owner->CompileKernel(kSaxpy, {"saxpy"}));
  EXPECT_THAT(other->LaunchKernel(saxpy, "saxpy", {1}, {1}, 0, {}),
              StatusIs(kNotFound, HasSubstr("not found in this session")));
  EXPECT_THAT(other->FreeKernel(saxpy), StatusIs(kNotFound));
  GPUKIT_ASSERT_OK(owner->FreeKernel(saxpy));
  EXPECT_THAT(owner->LaunchKernel(saxpy, "saxpy", {1}, {1}, 0, {}),
              StatusIs(kNotFound, HasSubstr("not found in this session")));
  EXPECT_THAT(owner->FreeKernel(saxpy), StatusIs(kNotFound));
}

TEST_F(KernelTest, MalformedCompileRequestsGetClearErrors) {
  SKIP_WITHOUT_NVRTC();
  v1::CompileKernelRequest no_entries = SaxpyRequest();
  no_entries.clear_entries();
  EXPECT_THAT(Compile(no_entries), StatusIs(kInvalidArgument, HasSubstr("entries is empty")));
  v1::CompileKernelRequest no_source = SaxpyRequest();
  no_source.clear_source();
  EXPECT_THAT(Compile(no_source), StatusIs(kInvalidArgument, HasSubstr("source is empty")));
  v1::CompileKernelRequest include = SaxpyRequest();
  include.add_options("-I/tmp");
  EXPECT_THAT(Compile(include), StatusIs(kInvalidArgument, HasSubstr("-I/tmp")));
  v1::CompileKernelRequest arch = SaxpyRequest();
  arch.add_options("--gpu-architecture=sm_75");
  EXPECT_THAT(Compile(arch), StatusIs(kInvalidArgument));
  v1::CompileKernelRequest no_such_entry = SaxpyRequest();
  no_such_entry.add_entries("nothing_here");
  EXPECT_THAT(Compile(no_such_entry), StatusIs(kInvalidArgument, HasSubstr("nothing_here")));
  v1::CompileKernelRequest unknown_session = SaxpyRequest();
  unknown_session.set_session_id("s-00000000000000000000000000000000");
  EXPECT_THAT(Compile(unknown_session), StatusIs(kNotFound));
}

// These refusals come before any kernel is needed, so they hold with or without NVRTC.
TEST_F(KernelTest, MalformedLaunchRequestsWithoutAKernelGetClearErrors) {
  v1::LaunchKernelRequest no_value = SaxpyLaunch("k-nope", "a-x", "a-y", 4);
  no_value.mutable_args(1)->Clear();
  EXPECT_THAT(Launch(no_value), StatusIs(kInvalidArgument, "args[1] has no value"));
  v1::LaunchKernelRequest negative_timeout = SaxpyLaunch("k-nope", "a-x", "a-y", 4);
  negative_timeout.mutable_task()->set_queue_timeout_ms(-5);
  EXPECT_THAT(Launch(negative_timeout),
              StatusIs(kInvalidArgument, "task.queue_timeout_ms = -5 must be >= 0"));
  EXPECT_THAT(Launch(SaxpyLaunch("k-nope", "a-x", "a-y", 4)),
              StatusIs(kNotFound, "kernel handle \"k-nope\" not found in this session"));
  v1::LaunchKernelRequest unknown_session = SaxpyLaunch("k-nope", "a-x", "a-y", 4);
  unknown_session.set_session_id("s-00000000000000000000000000000000");
  EXPECT_THAT(Launch(unknown_session), StatusIs(kNotFound, HasSubstr("session")));
  v1::FreeKernelRequest free;
  free.set_session_id(session_);
  free.set_kernel(std::string(10000, 'k'));
  grpc::ClientContext context;
  v1::FreeKernelResponse freed;
  EXPECT_THAT(FromGrpc(compute_->FreeKernel(&context, free, &freed), context),
              StatusIs(kInvalidArgument, HasSubstr("kernel is 10000 bytes long")));
}

TEST_F(KernelTest, MalformedLaunchRequestsForARealKernelGetClearErrors) {
  SKIP_WITHOUT_NVRTC();
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::CompileKernelResponse compiled, Compile(SaxpyRequest()));
  const std::string k = compiled.kernel();
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo x, api().CreateArray(session_, {4}, v1::DTYPE_FLOAT32));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo y, api().CreateArray(session_, {4}, v1::DTYPE_FLOAT32));

  v1::LaunchKernelRequest huge_grid = SaxpyLaunch(k, x.handle(), y.handle(), 4);
  huge_grid.mutable_grid()->set_y(1u << 20);
  EXPECT_THAT(Launch(huge_grid),
              StatusIs(kInvalidArgument, "grid.y = 1048576 is above the device's limit of 65535"));
  v1::LaunchKernelRequest max_grid = SaxpyLaunch(k, x.handle(), y.handle(), 4);
  max_grid.mutable_grid()->set_x(4294967295u);
  EXPECT_THAT(Launch(max_grid), StatusIs(kInvalidArgument, HasSubstr("grid.x = 4294967295")));
  v1::LaunchKernelRequest huge_block = SaxpyLaunch(k, x.handle(), y.handle(), 4);
  huge_block.mutable_block()->set_x(1u << 31);
  EXPECT_THAT(Launch(huge_block), StatusIs(kInvalidArgument, HasSubstr("block.x = 2147483648")));
  v1::LaunchKernelRequest unknown_entry = SaxpyLaunch(k, x.handle(), y.handle(), 4);
  unknown_entry.set_entry("daxpy");
  EXPECT_THAT(Launch(unknown_entry), StatusIs(kNotFound, HasSubstr("has no entry \"daxpy\"")));
  v1::LaunchKernelRequest unknown_array = SaxpyLaunch(k, x.handle(), "a-nope", 4);
  EXPECT_THAT(Launch(unknown_array),
              StatusIs(kNotFound, "args[2]: array handle \"a-nope\" not found in this session"));
  v1::LaunchKernelRequest no_value = SaxpyLaunch(k, x.handle(), y.handle(), 4);
  no_value.add_args();
  EXPECT_THAT(Launch(no_value), StatusIs(kInvalidArgument, "args[4] has no value"));
  // Unset grid and block count as 1 x 1 x 1: well formed, so the CPU backend refuses it.
  v1::LaunchKernelRequest defaults = SaxpyLaunch(k, x.handle(), y.handle(), 4);
  defaults.clear_grid();
  defaults.clear_block();
  EXPECT_THAT(Launch(defaults), StatusIs(kFailedPrecondition));
  EXPECT_EQ(KernelTaskCount(), 0u);
}

// ---- Hostile sources (issue: a kernel source reads no host file) ----

TEST_F(KernelTest, AnIncludedHostFileIsNeitherReadNorQuoted) {
  SKIP_WITHOUT_NVRTC();
  constexpr char kToken[] = "gpukit-integration-secret-31c7";
  const std::string secret = absl::StrCat(temp_dir(), "/secret.h");
  {
    std::FILE* file = std::fopen(secret.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fprintf(file, "%s\n", kToken);
    std::fclose(file);
  }
  for (const std::string& source :
       {absl::StrCat("#include \"", secret, "\"\n"), absl::StrCat("#include <", secret, ">\n"),
        std::string("#include \"/etc/passwd\"\n"),
        absl::StrCat("#define F \"", secret, "\"\n#include F\n")}) {
    v1::CompileKernelRequest request = SaxpyRequest();
    request.set_source(source + kSaxpy);
    absl::StatusOr<v1::CompileKernelResponse> compiled = Compile(request);
    EXPECT_THAT(compiled, StatusIs(kInvalidArgument, AllOf(HasSubstr("Permission denied"),
                                                           Not(HasSubstr(kToken)),
                                                           Not(HasSubstr("root:x:0")))))
        << source;
  }
}

TEST_F(KernelTest, NamedHeadersAreTheOnlyIncludesAndTheyWork) {
  SKIP_WITHOUT_NVRTC();
  v1::CompileKernelRequest request = SaxpyRequest();
  request.set_source(absl::StrCat("#include \"scale.h\"\n", kSaxpy));
  v1::KernelHeader* header = request.add_headers();
  header->set_name("scale.h");
  header->set_source("constexpr float kScale = 2.0f;\n");
  GPUKIT_EXPECT_OK(Compile(request).status());
  header->set_name("bad name.h");
  EXPECT_THAT(Compile(request), StatusIs(kInvalidArgument, HasSubstr("headers[0]")));
}

TEST_F(KernelTest, AHugeCompileLogFitsTheStatusAndGetCompileLogHasAllOfIt) {
  SKIP_WITHOUT_NVRTC();
  // Each line's error quotes a 2000-character name: far more log than gRPC's 16 KiB of
  // metadata could carry in a status message.
  const std::string name(2000, 'q');
  std::string source;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&source, "int v", i, " = ", name, i, ";\n");
  v1::CompileKernelRequest request = SaxpyRequest();
  request.set_source(source);
  absl::StatusOr<v1::CompileKernelResponse> compiled = Compile(request);
  ASSERT_THAT(compiled, StatusIs(kInvalidArgument, HasSubstr("GetCompileLog returns the whole")));
  EXPECT_LT(compiled.status().message().size(), size_t{8} << 10);

  grpc::ClientContext context;
  v1::GetCompileLogRequest log_request;
  log_request.set_session_id(session_);
  v1::GetCompileLogResponse log;
  GPUKIT_ASSERT_OK(FromGrpc(compute_->GetCompileLog(&context, log_request, &log), context));
  EXPECT_TRUE(log.failed());
  EXPECT_GT(log.log().size(), size_t{16} << 10);
  EXPECT_THAT(log.log(), HasSubstr(absl::StrCat(name, "39")));

  // The C++ client reads it too, and a good compile replaces it.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  EXPECT_FALSE(client->CompileKernel(source, {"saxpy"}).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string whole, client->LastCompileLog());
  EXPECT_GT(whole.size(), size_t{16} << 10);
  GPUKIT_ASSERT_OK(client->CompileKernel(kSaxpy, {"saxpy"}).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(whole, client->LastCompileLog());
  EXPECT_EQ(whole, "");
}

}  // namespace
}  // namespace gpukit::testing
