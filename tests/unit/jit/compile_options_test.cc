// The option allow-list and request bounds (runtime/jit/compile_options.h).
#include "runtime/jit/compile_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

struct AcceptCase {
  std::vector<std::string> options;
  std::vector<std::string> normalized;
};

class AcceptedOptionsTest : public ::testing::TestWithParam<AcceptCase> {};

TEST_P(AcceptedOptionsTest, NormalisesToOneSortedSpelling) {
  EXPECT_THAT(NormalizeCompileOptions(GetParam().options, CompileLimits{}),
              IsOkAndHolds(GetParam().normalized));
}

INSTANTIATE_TEST_SUITE_P(
    Table, AcceptedOptionsTest,
    ::testing::Values(
        AcceptCase{{}, {}}, AcceptCase{{"-DN=4"}, {"-DN=4"}}, AcceptCase{{"-DDEBUG"}, {"-DDEBUG"}},
        AcceptCase{{"-D", "N=4"}, {"-DN=4"}},
        AcceptCase{{"--define-macro=T=unsigned int"}, {"-DT=unsigned int"}},
        AcceptCase{{"-DEMPTY="}, {"-DEMPTY="}}, AcceptCase{{"-use_fast_math"}, {"--use_fast_math"}},
        AcceptCase{{"--use_fast_math", "-use_fast_math"}, {"--use_fast_math"}},
        AcceptCase{{"-std=c++20"}, {"--std=c++20"}}, AcceptCase{{"--std=c++17"}, {"--std=c++17"}},
        AcceptCase{{"--fmad=false", "-ftz=true", "--prec-div=false", "-prec-sqrt=true"},
                   {"--fmad=false", "--ftz=true", "--prec-div=false", "--prec-sqrt=true"}},
        AcceptCase{{"-lineinfo"}, {"--generate-line-info"}},
        AcceptCase{{"-restrict", "--extra-device-vectorization"},
                   {"--extra-device-vectorization", "--restrict"}},
        AcceptCase{{"-default-device"}, {"--device-as-default-execution-space"}},
        AcceptCase{{"-DB=2", "--use_fast_math", "-DA=1"}, {"--use_fast_math", "-DA=1", "-DB=2"}},
        AcceptCase{{"-DN=4", "-D", "N=4"}, {"-DN=4"}}));

struct RefuseCase {
  std::vector<std::string> options;
  std::string message;
};

class RefusedOptionsTest : public ::testing::TestWithParam<RefuseCase> {};

TEST_P(RefusedOptionsTest, IsInvalidArgumentNamingTheOption) {
  EXPECT_THAT(NormalizeCompileOptions(GetParam().options, CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, RefusedOptionsTest,
    ::testing::Values(
        RefuseCase{{"-I/usr/include"}, "-I is not allowed: kernels are compiled from source alone"},
        RefuseCase{{"-I"}, "-I is not allowed"},
        RefuseCase{{"--include-path=/etc"}, "-I is not allowed"},
        RefuseCase{{"-arch=sm_90"}, "\"-arch=sm_90\" is not allowed: the daemon sets the arch"},
        RefuseCase{{"--gpu-architecture=compute_90"}, "\"--gpu-architecture=compute_90\""},
        RefuseCase{{"-include", "/etc/passwd"}, "\"-include\" is not allowed"},
        RefuseCase{{"--pre-include=/etc/passwd"}, "\"--pre-include=/etc/passwd\" is not allowed"},
        RefuseCase{{"-G"}, "\"-G\" is not allowed; allowed options are"},
        RefuseCase{{"--time=/tmp/x"}, "\"--time=/tmp/x\" is not allowed"},
        RefuseCase{{"-std=c++11"}, "needs the value c++17 or c++20"},
        RefuseCase{{"--fmad=maybe"}, "needs the value true or false"},
        RefuseCase{{"--fmad"}, "needs the value true or false"},
        RefuseCase{{"--use_fast_math=true"}, "takes no value"},
        RefuseCase{{"-D"}, "needs a macro after it"},
        RefuseCase{{"-D1X=2"}, "which is not a macro name"},
        RefuseCase{{"-D=2"}, "which is not a macro name"},
        RefuseCase{{"-DX=a\nb"}, "control character"},
        RefuseCase{{"--fmad=true", "--fmad=false"},
                   "\"--fmad=true\" and \"--fmad=false\" conflict"},
        RefuseCase{{"-DN=1", "-DN=2"}, "\"-DN=1\" and \"-DN=2\" conflict"},
        RefuseCase{{"-DN", "-DN=1"}, "conflict"},
        RefuseCase{{"", "--use_fast_math"}, "\"\" is not allowed"}));

TEST(CompileOptionsTest, RefusesMoreOptionsThanTheLimit) {
  std::vector<std::string> options;
  options.reserve(65);
  for (int i = 0; i < 65; ++i) options.push_back("-DM" + std::to_string(i));
  EXPECT_THAT(NormalizeCompileOptions(options, CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("65 compile options; the limit is 64")));
  options.pop_back();
  EXPECT_THAT(NormalizeCompileOptions(options, CompileLimits{}), IsOk());
}

TEST(CompileOptionsTest, RefusesAnOverlongOption) {
  EXPECT_THAT(NormalizeCompileOptions({"-DX=" + std::string(5000, 'a')}, CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the limit is 4096")));
}

TEST(KernelSourceTest, DefaultLimitIsOneMiB) {
  EXPECT_EQ(CompileLimits{}.max_source_bytes, 1 << 20);
  EXPECT_THAT(ValidateKernelSource(std::string(1 << 20, ' '), CompileLimits{}), IsOk());
  EXPECT_THAT(ValidateKernelSource(std::string((1 << 20) + 1, ' '), CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("kernel source is 1048577 bytes; the limit is 1048576")));
}

TEST(KernelSourceTest, RefusesEmptySourceAndNulBytes) {
  EXPECT_THAT(ValidateKernelSource("", CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ValidateKernelSource(std::string("int x;\0int y;", 13), CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NUL byte at offset 6")));
}

class AcceptedEntryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AcceptedEntryTest, IsAKernelNameOrNameExpression) {
  EXPECT_THAT(ValidateEntryNames({GetParam()}, CompileLimits{}), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Table, AcceptedEntryTest,
                         ::testing::Values("add", "_k1", "scale<float>", "ops::scale<float>",
                                           "::top", "tile<float, 16>", "f<unsigned int, -1>",
                                           "g<float*, const int&>", "h<decltype(1)>",
                                           "outer<inner<int>>"));

class RefusedEntryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RefusedEntryTest, IsInvalidArgument) {
  EXPECT_THAT(ValidateEntryNames({GetParam()}, CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entries[0]")));
}

INSTANTIATE_TEST_SUITE_P(Table, RefusedEntryTest,
                         ::testing::Values("", "1add", "a b", "add;", "add\n#pragma x", "k<int",
                                           "k>int<", "a,b", "k<int>)", "{x}", "\"s\"",
                                           std::string(1025, 'a')));

TEST(EntryNamesTest, NeedsOneToSixtyFourDistinctNames) {
  EXPECT_THAT(ValidateEntryNames({}, CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entries is empty")));
  std::vector<std::string> many;
  many.reserve(65);
  for (int i = 0; i < 65; ++i) many.push_back("k" + std::to_string(i));
  EXPECT_THAT(
      ValidateEntryNames(many, CompileLimits{}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("65 entries; the limit is 64")));
  many.pop_back();
  EXPECT_THAT(ValidateEntryNames(many, CompileLimits{}), IsOk());
  EXPECT_THAT(ValidateEntryNames({"a", "b", "a"}, CompileLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("entries[2] = \"a\" repeats entries[0]")));
}

}  // namespace
}  // namespace gpukit
