// ReadSettingFile (runtime/base/read_file.h): a file a setting names, whole, or an error that
// names the setting and the file and says why.
#include "runtime/base/read_file.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ReadSettingFile, ReturnsTheWholeFile) {
  ScopedTempDir dir;
  // Longer than one read of the loop, so the pieces must be joined in order.
  std::string text;
  for (int i = 0; i < 20000; ++i) text += std::to_string(i) + "\n";
  ASSERT_GT(text.size(), size_t{64} << 10);
  const std::string path = dir.WriteFile("bundle.pem", text);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string read, ReadSettingFile("the TLS file", path));
  EXPECT_EQ(read, text);
}

TEST(ReadSettingFile, AMissingFileNamesTheSettingTheFileAndTheReason) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/missing.pem";
  EXPECT_THAT(ReadSettingFile("access.tls.certFile", path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cannot read access.tls.certFile " + path + ": No such file or directory"));
}

TEST(ReadSettingFile, ADirectoryIsNotAFile) {
  ScopedTempDir dir;
  EXPECT_THAT(ReadSettingFile("access.tls.keyFile", dir.path()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cannot read access.tls.keyFile " + dir.path() + ": Is a directory"));
}

TEST(ReadSettingFile, AnEmptyFileIsRefused) {
  ScopedTempDir dir;
  const std::string path = dir.WriteFile("empty.pem", "");
  EXPECT_THAT(ReadSettingFile("the TLS file", path),
              StatusIs(absl::StatusCode::kInvalidArgument, "the TLS file " + path + " is empty"));
}

TEST(ReadSettingFile, AFileAboveTheLimitIsRefused) {
  ScopedTempDir dir;
  const std::string path = dir.WriteFile("big.pem", std::string(101, 'x'));
  EXPECT_THAT(ReadSettingFile("the TLS file", path, /*max_bytes=*/100),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is larger than 100 bytes")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string at_limit,
                              ReadSettingFile("the TLS file", path, /*max_bytes=*/101));
  EXPECT_EQ(at_limit.size(), 101u);
}

TEST(ReadSettingFile, AnEmptyPathNamesTheSetting) {
  EXPECT_THAT(ReadSettingFile("access.tls.clientCaFile", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot read access.tls.clientCaFile")));
}

}  // namespace
}  // namespace gpukit
