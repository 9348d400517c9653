// Reading fatbins (runtime/cuda/fatbin.h): synthetic containers for the format and its
// errors, the compatibility rules as a table, and the fatbins this build embedded
// (kernels/cuda/embedded_kernels.h): one per built-in module, holding SASS for every
// architecture of GPUKIT_KERNEL_ARCHS and PTX for the newest.
#include "runtime/cuda/fatbin.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/embedded_kernels.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

template <typename T>
void Put(std::string& out, size_t offset, T value) {
  if (out.size() < offset + sizeof(T)) out.resize(offset + sizeof(T));
  std::memcpy(out.data() + offset, &value, sizeof(T));
}

struct TestImage {
  uint16_t kind;  // 1 PTX, 2 ELF
  uint32_t arch;
  uint64_t flags = 0x11;  // 64-bit, Linux
  std::string payload = "payload!";
};

// A fatbin laid out as nvcc writes one: container header, then per image a 64-byte header
// and its payload.
std::string MakeFatbin(const std::vector<TestImage>& images) {
  std::string body;
  for (const TestImage& image : images) {
    std::string header;
    Put<uint16_t>(header, 0, image.kind);
    Put<uint16_t>(header, 2, 0x0101);
    Put<uint32_t>(header, 4, 64);
    Put<uint64_t>(header, 8, image.payload.size());
    Put<uint32_t>(header, 28, image.arch);
    Put<uint64_t>(header, 40, image.flags);
    header.resize(64);
    body += header + image.payload;
  }
  std::string fatbin;
  Put<uint32_t>(fatbin, 0, 0xBA55ED50);
  Put<uint16_t>(fatbin, 4, 1);
  Put<uint16_t>(fatbin, 6, 16);
  Put<uint64_t>(fatbin, 8, body.size());
  return fatbin + body;
}

TEST(FatbinTest, ReadsKindArchitectureAndCompressionOfEveryImage) {
  const std::string fatbin = MakeFatbin({{2, 80}, {2, 90, 0x8011, "compressed"}, {1, 120}});
  absl::StatusOr<std::vector<FatbinImage>> images = ParseFatbin(fatbin);
  ASSERT_TRUE(images.ok()) << images.status();
  ASSERT_EQ(images->size(), 3u);
  EXPECT_EQ((*images)[0].kind, FatbinImage::Kind::kElf);
  EXPECT_EQ((*images)[0].arch, 80);
  EXPECT_FALSE((*images)[0].compressed);
  EXPECT_EQ((*images)[1].arch, 90);
  EXPECT_TRUE((*images)[1].compressed);
  EXPECT_EQ((*images)[1].payload_bytes, 10);
  EXPECT_EQ((*images)[2].kind, FatbinImage::Kind::kPtx);
  EXPECT_EQ((*images)[2].arch, 120);
}

TEST(FatbinTest, RefusesWhatIsNotAWholeFatbin) {
  const std::string good = MakeFatbin({{2, 80}, {1, 90}});
  EXPECT_THAT(ParseFatbin(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("magic")));
  EXPECT_THAT(ParseFatbin("\x7f"
                          "ELF and more bytes than a header"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("magic")));
  std::string version = good;
  Put<uint16_t>(version, 4, 2);
  EXPECT_THAT(ParseFatbin(version),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 2")));
  // Cut anywhere inside, the fatbin is refused, never read past its end.
  for (size_t cut = 16; cut < good.size(); ++cut) {
    EXPECT_THAT(ParseFatbin(absl::string_view(good).substr(0, cut)),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "cut at " << cut;
  }
  std::string huge_payload = good;
  Put<uint64_t>(huge_payload, 16 + 8, uint64_t{1} << 62);
  EXPECT_THAT(ParseFatbin(huge_payload),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("runs past the end")));
  std::string small_header = good;
  Put<uint32_t>(small_header, 16 + 4, 8);
  EXPECT_THAT(ParseFatbin(small_header), StatusIs(absl::StatusCode::kInvalidArgument));
  std::string kind = good;
  Put<uint16_t>(kind, 16, 7);
  EXPECT_THAT(ParseFatbin(kind),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has kind 7")));
}

struct FitCase {
  int major, minor;
  FatbinFit fit;
};

class FatbinFitTest : public ::testing::TestWithParam<FitCase> {};

TEST_P(FatbinFitTest, FollowsCudaCompatibilityRules) {
  // What the build embeds by default: SASS for 80, 86, 89, 90, 100, 120; PTX for 120.
  std::vector<FatbinImage> images;
  for (int arch : {80, 86, 89, 90, 100, 120}) images.push_back({FatbinImage::Kind::kElf, arch});
  images.push_back({FatbinImage::Kind::kPtx, 120});
  const FitCase& c = GetParam();
  EXPECT_EQ(FatbinRunsOn(images, c.major, c.minor), c.fit) << "sm_" << c.major << c.minor;
}

INSTANTIATE_TEST_SUITE_P(
    Gpus, FatbinFitTest,
    ::testing::Values(FitCase{8, 0, FatbinFit::kSass},    // A100
                      FitCase{8, 7, FatbinFit::kSass},    // Orin: sm_86's SASS
                      FitCase{9, 0, FatbinFit::kSass},    // H100
                      FitCase{10, 3, FatbinFit::kSass},   // B300: sm_100's SASS
                      FitCase{12, 1, FatbinFit::kSass},   // sm_120's SASS
                      FitCase{11, 0, FatbinFit::kNone},   // Thor: no SASS, PTX is newer
                      FitCase{13, 0, FatbinFit::kPtx},    // a later GPU JITs the PTX
                      FitCase{7, 5, FatbinFit::kNone}));  // Turing

TEST(FatbinFitTest, PtxAloneRunsOnlyOnItsArchitectureAndLater) {
  const std::vector<FatbinImage> ptx = {{FatbinImage::Kind::kPtx, 90}};
  EXPECT_EQ(FatbinRunsOn(ptx, 9, 0), FatbinFit::kPtx);
  EXPECT_EQ(FatbinRunsOn(ptx, 8, 9), FatbinFit::kNone);
  EXPECT_EQ(FatbinRunsOn({}, 9, 0), FatbinFit::kNone);
}

// The build's own fatbins: every built-in module has one, and each holds exactly what
// GPUKIT_KERNEL_ARCHS asked for.
TEST(EmbeddedFatbinsTest, EveryBuiltinModuleHoldsSassForEachArchAndPtxForTheNewest) {
  const kernels::PrecompiledTargets targets = kernels::PrecompiledKernelTargets();
  if (targets.sass_archs.empty()) {
    for (const kernels::EmbeddedKernelSource& module : kernels::EmbeddedKernelSources()) {
      EXPECT_TRUE(module.fatbin.empty()) << module.name;
    }
    GTEST_SKIP() << "built without precompiled kernels (GPUKIT_PRECOMPILE_KERNELS=OFF or no nvcc)";
  }
  const std::set<int> wanted(targets.sass_archs.begin(), targets.sass_archs.end());
  EXPECT_EQ(targets.ptx_arch, *wanted.rbegin());
  int modules = 0;
  for (const kernels::EmbeddedKernelSource& module : kernels::EmbeddedKernelSources()) {
    SCOPED_TRACE(module.name);
    ++modules;
    ASSERT_FALSE(module.fatbin.empty());
    // Where the loader expects it: the assembler's .balign 16.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(module.fatbin.data()) % 16, 0u);
    absl::StatusOr<std::vector<FatbinImage>> images = ParseFatbin(module.fatbin);
    ASSERT_TRUE(images.ok()) << images.status();
    std::set<int> sass;
    std::vector<int> ptx;
    for (const FatbinImage& image : *images) {
      if (image.kind == FatbinImage::Kind::kElf) sass.insert(image.arch);
      if (image.kind == FatbinImage::Kind::kPtx) ptx.push_back(image.arch);
    }
    EXPECT_EQ(sass, wanted);
    EXPECT_EQ(ptx, std::vector<int>{targets.ptx_arch});
  }
  EXPECT_EQ(modules, 7);
}

}  // namespace
}  // namespace gpukit
