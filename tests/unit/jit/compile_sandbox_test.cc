// The compile sandbox (runtime/jit/compile_sandbox.h, compile_worker.h): NVRTC in worker
// processes that can open no file. A kernel source is a hostile tenant's input here: every
// way of naming a file from the preprocessor must fail without quoting the file, and a worker
// that dies or hangs costs its compile only. NVRTC needs no GPU; where it is not installed
// these tests skip, saying so.
#include "runtime/jit/compile_sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/jit/compile_worker.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/socket.h>
#include <sys/wait.h>

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "gpukit-sandbox-secret-7f3a9c";

// The build tree's worker, or (run from a bundle, where every program sits in one bin/) the
// one beside this test.
std::string WorkerPath() {
  if (access(GPUKIT_COMPILE_WORKER_PATH, X_OK) == 0) return GPUKIT_COMPILE_WORKER_PATH;
  std::error_code error;
  const std::filesystem::path beside =
      std::filesystem::read_symlink("/proc/self/exe", error).parent_path() /
      "gpukit-compile-worker";
  return !error && access(beside.c_str(), X_OK) == 0 ? beside.string()
                                                      : GPUKIT_COMPILE_WORKER_PATH;
}

absl::StatusOr<std::unique_ptr<CompileSandbox>> StartSandbox(CompileSandboxOptions options = {}) {
  options.worker_path = WorkerPath();
  return CompileSandbox::Start(options);
}

NvrtcInput Kernel(std::string source) {
  return NvrtcInput{.source = std::move(source),
                    .name_expressions = {"k"},
                    .arch = "sm_80",
                    .time_budget = absl::Seconds(60)};
}

class CompileSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CompileSandbox>> sandbox = StartSandbox();
    if (!sandbox.ok() &&
        absl::StrContains(sandbox.status().message(), "NVRTC JIT compiler not available")) {
      GTEST_SKIP() << "NVRTC cannot be loaded here: " << sandbox.status();
    }
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandbox_ = *std::move(sandbox);
    secret_path_ = dir_.WriteFile("secret.h", absl::StrCat(kSecret, "\n"));
  }

  ScopedTempDir dir_;
  std::string secret_path_;
  std::unique_ptr<CompileSandbox> sandbox_;
};

TEST_F(CompileSandboxTest, ReportsTheWorkersNvrtc) {
  EXPECT_THAT(sandbox_->version_string(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_FALSE(sandbox_->library_path().empty());
  EXPECT_EQ(sandbox_->workers_started(), 1);
}

TEST_F(CompileSandboxTest, CompilesWithNamedHeadersAndLowersTemplateNames) {
  NvrtcInput input = Kernel(
      "#include \"scale.h\"\n#include <limits.h>\n"
      "template <typename T> __global__ void scale(T* x) { x[threadIdx.x] *= kScale; }\n");
  input.headers = {{"scale.h", "constexpr int kScale = 3;\n"}, {"limits.h", "\n"}};
  input.name_expressions = {"scale<float>"};
  GPUKIT_ASSERT_OK_AND_ASSIGN(NvrtcOutput out, sandbox_->Compile(input));
  EXPECT_THAT(out.cubin.substr(0, 4),
              "\x7f"
              "ELF");
  ASSERT_EQ(out.lowered_names.size(), 1u);
  EXPECT_THAT(out.lowered_names[0], HasSubstr("scale"));
}

// Every way the preprocessor can name a file. Each must fail (or, for __has_include, see
// nothing) and never quote the file.
class IncludeFormTest : public CompileSandboxTest,
                        public ::testing::WithParamInterface<const char*> {};

TEST_P(IncludeFormTest, CannotReadAHostFile) {
  std::string source = GetParam();
  for (size_t at; (at = source.find("SECRET")) != std::string::npos;) {
    source.replace(at, 6, secret_path_);
  }
  const std::string dir = dir_.path();
  for (size_t at; (at = source.find("DIR")) != std::string::npos;) source.replace(at, 3, dir);
  absl::StatusOr<NvrtcOutput> out = sandbox_->Compile(Kernel(source));
  ASSERT_FALSE(out.ok()) << "compiled: " << source;
  EXPECT_THAT(std::string(out.status().message()), Not(HasSubstr(kSecret)));
  EXPECT_THAT(std::string(out.status().message()), Not(HasSubstr("root:x:0:0")));
  // The sandbox goes on serving.
  EXPECT_TRUE(sandbox_->Compile(Kernel("extern \"C\" __global__ void k() {}")).ok());
}

INSTANTIATE_TEST_SUITE_P(
    EveryForm, IncludeFormTest,
    ::testing::Values(
        "#include \"SECRET\"\n",                                     // absolute, quoted
        "#include <SECRET>\n",                                       // absolute, angled
        "#include \"/etc/passwd\"\n",                                // a system file
        "#include \"/proc/self/environ\"\n",                         // the daemon's environment
        "#include \"../../../../../../../../SECRET\"\n",             // relative, climbing
        "#define P \"SECRET\"\n#include P\n",                        // through a macro
        "#define S(x) #x\n#define X(x) S(x)\n#include X(SECRET)\n",  // stringified
        "#include_next <SECRET>\n",                                  // the GNU extension
        "#line 1 \"DIR/kernel.cu\"\n#include \"secret.h\"\n",        // relative to a #line name
        "#if __has_include(\"SECRET\")\n#error the file is visible\n#endif\n#error end\n",
        "#if __has_include(<SECRET>)\n#error the file is visible\n#endif\n#error end\n",
        "const char x[] = {\n#embed \"SECRET\"\n};\n",  // C23's #embed
        "_Pragma(\"include_alias(\\\"a.h\\\", \\\"SECRET\\\")\")\n#include \"a.h\"\n",
        "#pragma push_macro(\"x\")\n#include \"/dev/stdin\"\n", "#include \"/proc/self/fd/0\"\n"));

TEST_F(CompileSandboxTest, HasIncludeSeesNoHostFile) {
  const std::string source =
      absl::StrCat("#if __has_include(\"", secret_path_, "\") || __has_include(\"/etc/passwd\")\n",
                   "#error visible\n#endif\nextern \"C\" __global__ void k() {}\n");
  EXPECT_TRUE(sandbox_->Compile(Kernel(source)).ok());
}

TEST_F(CompileSandboxTest, ASymlinkHeaderNameReadsNothing) {
  std::filesystem::create_symlink(secret_path_, dir_.path() + "/link.h");
  EXPECT_THAT(sandbox_->Compile(Kernel(absl::StrCat("#include \"", dir_.path(), "/link.h\"\n"))),
              StatusIs(absl::StatusCode::kInvalidArgument, Not(HasSubstr(kSecret))));
}

TEST_F(CompileSandboxTest, CompileErrorsCarryTheLog) {
  EXPECT_THAT(sandbox_->Compile(Kernel("extern \"C\" __global__ void k() { undeclared(); }")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("undeclared")));
}

TEST(CompileSandboxLogTest, LongLogsAreCutWithANote) {
  absl::StatusOr<std::unique_ptr<CompileSandbox>> sandbox = StartSandbox({.max_log_bytes = 2000});
  if (!sandbox.ok()) GTEST_SKIP() << sandbox.status();
  std::string source;
  for (int i = 0; i < 200; ++i) absl::StrAppend(&source, "int v", i, " = undeclared_", i, ";\n");
  absl::StatusOr<NvrtcOutput> out = (*sandbox)->Compile(Kernel(source));
  ASSERT_THAT(out, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more bytes]")));
  EXPECT_LT(out.status().message().size(), 2200u);
}

TEST(CompileSandboxLogTest, LogsAreValidUtf8) {
  absl::StatusOr<std::unique_ptr<CompileSandbox>> sandbox = StartSandbox();
  if (!sandbox.ok()) GTEST_SKIP() << sandbox.status();
  absl::StatusOr<NvrtcOutput> out = (*sandbox)->Compile(Kernel("int \xff\xfe bad;\n"));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), Not(HasSubstr("\xff")));
}

#if !defined(__SANITIZE_ADDRESS__)  // the worker sets no memory limit under ASan
TEST(CompileSandboxMemoryTest, ACompileBeyondTheMemoryLimitIsResourceExhausted) {
  absl::StatusOr<std::unique_ptr<CompileSandbox>> sandbox =
      StartSandbox({.memory_limit_bytes = int64_t{1} << 20});
  if (!sandbox.ok()) GTEST_SKIP() << sandbox.status();
  std::string source = "extern \"C\" __global__ void k(float* x) {\n";
  for (int i = 0; i < 4000; ++i) absl::StrAppend(&source, "  x[", i, "] = x[", i + 1, "] * 2;\n");
  source += "}\n";
  EXPECT_THAT((*sandbox)->Compile(Kernel(source)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("memory")));
}
#endif

TEST_F(CompileSandboxTest, AWorkerKilledWhileIdleCostsNoCompile) {
  const std::vector<pid_t> idle = sandbox_->idle_worker_pids();
  ASSERT_EQ(idle.size(), 1u);
  ASSERT_EQ(kill(idle[0], SIGKILL), 0);
  EXPECT_TRUE(sandbox_->Compile(Kernel("extern \"C\" __global__ void k() {}")).ok());
  EXPECT_EQ(sandbox_->workers_started(), 2);
}

TEST_F(CompileSandboxTest, ABudgetRunOutIsDeadlineExceededAndTheNextCompileWorks) {
  NvrtcInput slow = Kernel(
      "template <int N> struct F { static constexpr long v = F<N - 1>::v + F<N - 2>::v; };\n"
      "template <> struct F<1> { static constexpr long v = 1; };\n"
      "template <> struct F<0> { static constexpr long v = 0; };\n"
      "extern \"C\" __global__ void k(long* x) { x[0] = F<400>::v; }\n");
  slow.time_budget = absl::Milliseconds(1);
  EXPECT_THAT(sandbox_->Compile(slow), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(sandbox_->Compile(Kernel("extern \"C\" __global__ void k() {}")).ok());
}

TEST_F(CompileSandboxTest, ConcurrentCompilesShareAtMostMaxWorkers) {
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      results[i] = sandbox_
                       ->Compile(Kernel(absl::StrCat(
                           "extern \"C\" __global__ void k(int* x) { x[0] = ", i, "; }")))
                       .status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& result : results) EXPECT_TRUE(result.ok()) << result;
  EXPECT_LE(sandbox_->workers_started(), 2);  // CompileSandboxOptions::max_workers
}

TEST(CompileSandboxStartTest, AMissingWorkerIsFailedPreconditionNamingIt) {
  EXPECT_THAT(CompileSandbox::Start({.worker_path = "/nonexistent/gpukit-compile-worker"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("/nonexistent/gpukit-compile-worker")));
}

TEST(CompileSandboxStartTest, AWorkerWithoutNvrtcSaysSo) {
  absl::StatusOr<std::unique_ptr<CompileSandbox>> sandbox =
      StartSandbox({.library_dir = "/nonexistent/nvrtc"});
  if (sandbox.ok()) GTEST_SKIP() << "NVRTC is on the loader path here";
  EXPECT_THAT(sandbox, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("NVRTC JIT compiler not available")));
}

// The lock-down itself, in a child process: each forbidden call must fail. Exit status 0
// means every check passed; otherwise the bit of the first that did not.
TEST(LockDownTest, ALockedDownProcessCannotOpenExecConnectOrFork) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child must never return into GoogleTest: every path ends in _exit.
    if (!LockDownCompileWorker(int64_t{1} << 30).ok()) _exit(1);
    int failed = 0;
    try {
      if (open("/etc/passwd", O_RDONLY) >= 0 || errno != EACCES) failed |= 2;
      if (openat(AT_FDCWD, "/etc/hostname", O_RDONLY) >= 0) failed |= 4;
      if (access("/etc/passwd", F_OK) == 0) failed |= 8;
      if (socket(AF_INET, SOCK_STREAM, 0) >= 0) failed |= 16;
      char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
      execv("/bin/true", argv);
      if (errno != EACCES) failed |= 32;
      const pid_t grandchild = fork();
      if (grandchild == 0) _exit(0);
      if (grandchild > 0) failed |= 64;
      if (kill(getppid(), 0) == 0) failed |= 128;
      if (open("/tmp/gpukit-lockdown-probe", O_WRONLY | O_CREAT, 0600) >= 0) failed |= 1;
      // Its own threads still work (NVRTC may use them).
      std::thread([] {}).join();
    } catch (...) {
      _exit(255);  // the thread could not start
    }
    _exit(failed > 254 ? 254 : failed);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "failed checks (bits; 255: no thread; 1 alone: lock-down failed or file created): "
      << WEXITSTATUS(status);
}

TEST(JitCompilerSandboxTest, HeadersArePartOfTheCacheKey) {
  absl::StatusOr<std::unique_ptr<JitCompiler>> jit =
      JitCompiler::Create({.worker_path = WorkerPath()});
  if (!jit.ok()) GTEST_SKIP() << jit.status();
  EXPECT_TRUE((*jit)->sandboxed());
  CompileRequest request{.source =
                             "#include \"v.h\"\nextern \"C\" __global__ void k(int* x) "
                             "{ x[0] = kV; }\n",
                         .headers = {{"v.h", "constexpr int kV = 1;"}},
                         .entries = {"k"}};
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult first, (*jit)->Compile(request, "sm_80"));
  request.headers[0].second = "constexpr int kV = 2;";
  GPUKIT_ASSERT_OK_AND_ASSIGN(JitResult second, (*jit)->Compile(request, "sm_80"));
  EXPECT_EQ(second.origin, KernelOrigin::kCompiled);
  EXPECT_NE(first.kernel->cubin, second.kernel->cubin);
  request.headers.push_back({"v.h", "again"});
  EXPECT_THAT((*jit)->Compile(request, "sm_80"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("given twice")));
}

}  // namespace
}  // namespace gpukit
