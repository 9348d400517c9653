// Default listen and client addresses (runtime/base/default_address.h).
//
// The rule reads /run/gpukit, $XDG_RUNTIME_DIR, $GPUKIT_ADDR and /tmp/gpukit-$UID. Tests set
// the environment variables with ScopedEnv (restored afterwards) and point XDG_RUNTIME_DIR
// at a fresh temporary directory; where the machine itself holds one of the fixed paths
// (/run/gpukit writable, a daemon's socket already present) a test that cannot control the
// answer skips rather than guessing.
#include "runtime/base/default_address.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedEnv;
using ::gpukit::testing::ScopedTempDir;

bool RunDirWritable() { return access("/run/gpukit", W_OK) == 0; }
bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }
std::string TmpSocket() { return absl::StrCat("/tmp/gpukit-", getuid(), "/gpukitd.sock"); }

TEST(DefaultSocketPathTest, UsesXdgRuntimeDirWhenSet) {
  if (RunDirWritable()) GTEST_SKIP() << "/run/gpukit is writable here and takes precedence";
  ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/4242");
  EXPECT_EQ(DefaultSocketPath(), "/run/user/4242/gpukit/gpukitd.sock");
}

TEST(DefaultSocketPathTest, UsesTmpWithTheUidWithoutXdgRuntimeDir) {
  if (RunDirWritable()) GTEST_SKIP() << "/run/gpukit is writable here and takes precedence";
  ScopedEnv xdg("XDG_RUNTIME_DIR", std::nullopt);
  EXPECT_EQ(DefaultSocketPath(), TmpSocket());
}

TEST(DefaultSocketPathTest, TreatsAnEmptyXdgRuntimeDirAsUnset) {
  if (RunDirWritable()) GTEST_SKIP() << "/run/gpukit is writable here and takes precedence";
  ScopedEnv xdg("XDG_RUNTIME_DIR", "");
  EXPECT_EQ(DefaultSocketPath(), TmpSocket());
}

TEST(DefaultSocketPathTest, PrefersRunGpukitWhenWritable) {
  if (!RunDirWritable()) GTEST_SKIP() << "/run/gpukit is not writable here";
  ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/4242");
  EXPECT_EQ(DefaultSocketPath(), "/run/gpukit/gpukitd.sock");
}

TEST(DefaultListenAddressTest, IsTheSocketPathAsAUnixUri) {
  for (const char* xdg_value : {"/run/user/77", ""}) {
    ScopedEnv xdg("XDG_RUNTIME_DIR", xdg_value);
    EXPECT_EQ(DefaultListenAddress(), "unix://" + DefaultSocketPath());
  }
}

TEST(DefaultClientAddressTest, GpukitAddrWinsVerbatim) {
  ScopedEnv addr("GPUKIT_ADDR", "dns:///gpu-host:7070");
  EXPECT_EQ(DefaultClientAddress(), "dns:///gpu-host:7070");
}

TEST(DefaultClientAddressTest, EmptyGpukitAddrIsIgnored) {
  ScopedTempDir runtime;
  ScopedEnv addr("GPUKIT_ADDR", "");
  ScopedEnv xdg("XDG_RUNTIME_DIR", runtime.path());
  EXPECT_NE(DefaultClientAddress(), "");
  EXPECT_EQ(DefaultClientAddress().rfind("unix://", 0), 0u) << DefaultClientAddress();
}

TEST(DefaultClientAddressTest, FindsAnExistingSocketUnderXdgRuntimeDir) {
  if (Exists("/run/gpukit/gpukitd.sock")) GTEST_SKIP() << "a system daemon's socket exists";
  ScopedTempDir runtime;
  const std::string socket = runtime.WriteFile("gpukit/gpukitd.sock", "");
  ScopedEnv addr("GPUKIT_ADDR", std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", runtime.path());
  EXPECT_EQ(DefaultClientAddress(), "unix://" + socket);
}

TEST(DefaultClientAddressTest, FallsBackToTheListenRuleWhenNoSocketExists) {
  if (Exists("/run/gpukit/gpukitd.sock") || Exists(TmpSocket())) {
    GTEST_SKIP() << "a daemon's socket exists at a fixed path on this machine";
  }
  ScopedTempDir runtime;  // empty: no socket under it
  ScopedEnv addr("GPUKIT_ADDR", std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", runtime.path());
  EXPECT_EQ(DefaultClientAddress(), DefaultListenAddress());
}

TEST(ScopedEnvTest, RestoresThePreviousValueAndAbsence) {
  unsetenv("GPUKIT_TEST_SCOPED_ENV");
  {
    ScopedEnv outer("GPUKIT_TEST_SCOPED_ENV", "outer");
    {
      ScopedEnv inner("GPUKIT_TEST_SCOPED_ENV", std::nullopt);
      EXPECT_EQ(std::getenv("GPUKIT_TEST_SCOPED_ENV"), nullptr);
    }
    ASSERT_NE(std::getenv("GPUKIT_TEST_SCOPED_ENV"), nullptr);
    EXPECT_STREQ(std::getenv("GPUKIT_TEST_SCOPED_ENV"), "outer");
  }
  EXPECT_EQ(std::getenv("GPUKIT_TEST_SCOPED_ENV"), nullptr);
}

}  // namespace
}  // namespace gpukit
