// The service edge's string rule: which values pass, what the refusal says, and that the walk
// reaches nested, repeated and map fields and leaves the kernel source alone.
#include "daemon/service/request_strings.h"

#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpukit/v1/admin.pb.h"
#include "gpukit/v1/array.pb.h"
#include "gpukit/v1/compute.pb.h"
#include "gpukit/v1/session.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::service {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct StringCase {
  std::string name;
  std::string value;
  std::string error;  // empty: accepted
};

class ValidateRequestStringTest : public ::testing::TestWithParam<StringCase> {};

TEST_P(ValidateRequestStringTest, AcceptsPrintableUtf8UpTo256BytesOnly) {
  const absl::Status status = ValidateRequestString("f", GetParam().value);
  if (GetParam().error.empty()) {
    EXPECT_THAT(status, IsOk());
  } else {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().error)));
    // The refusal never carries the value itself.
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr(GetParam().value)));
  }
}

// The walk over a request decides as the check of one value does (it takes a shortcut for
// printable ASCII), and names the field by its path.
TEST_P(ValidateRequestStringTest, TheRequestWalkDecidesTheSame) {
  v1::SubmitRequest submit;
  submit.add_ops()->set_free("a-0.1");
  submit.add_ops()->set_free(GetParam().value);
  const absl::Status status = ValidateRequestStrings(submit);
  if (GetParam().error.empty()) {
    EXPECT_THAT(status, IsOk());
    return;
  }
  std::string error = GetParam().error;
  if (error.rfind("f ", 0) == 0) error.replace(0, 1, "ops[1].free");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(error)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ValidateRequestStringTest,
    ::testing::Values(
        StringCase{"Empty", "", ""}, StringCase{"Name", "inference-worker_1.2/v3 (x)", ""},
        StringCase{"Latin1", "caf\xc3\xa9", ""}, StringCase{"Cjk", "\xe6\x97\xa5\xe6\x9c\xac", ""},
        StringCase{"Emoji", "\xf0\x9f\x9a\x80", ""},
        StringCase{"NoBreakSpaceAboveC1",
                   "a\xc2\xa0"
                   "b",
                   ""},
        StringCase{"Exactly256", std::string(256, 'a'), ""},
        StringCase{"Over256", std::string(257, 'a'), "f is 257 bytes long; at most 256"},
        StringCase{"OneMiB", std::string(size_t{1} << 20, 'a'), "f is 1048576 bytes long"},
        StringCase{"Esc", "ab\x1b[2J", "f holds control character U+001B at byte 2"},
        StringCase{"Nul", std::string("\0", 1), "U+0000 at byte 0"},
        StringCase{"Tab", "a\tb", "U+0009"}, StringCase{"Newline", "a\n", "U+000A"},
        StringCase{"CarriageReturn", "a\r", "U+000D"}, StringCase{"Del", "\x7f", "U+007F"},
        StringCase{"C1Csi", "x\xc2\x9b", "U+009B at byte 1"},
        StringCase{"C1Nel", "\xc2\x85", "U+0085"},
        StringCase{"LeftToRightMark", "\xe2\x80\x8e", "U+200E"},
        StringCase{"RightToLeftOverride", "\xe2\x80\xae", "U+202E"},
        StringCase{"Isolate", "\xe2\x81\xa6", "U+2066"},
        StringCase{"LineSeparator", "\xe2\x80\xa8", "U+2028"},
        StringCase{"LoneCsiByte", "a\x9b", "f is not valid UTF-8 (byte 1 is 0x9b)"},
        StringCase{"Overlong", "\xc0\xaf", "not valid UTF-8 (byte 0 is 0xc0)"},
        StringCase{"Truncated", "\xe2\x80", "not valid UTF-8"},
        StringCase{"Surrogate", "\xed\xa0\x80", "not valid UTF-8"},
        StringCase{"AboveUnicode", "\xf4\x90\x80\x80", "not valid UTF-8"}),
    [](const ::testing::TestParamInfo<StringCase>& info) { return info.param.name; });

TEST(ValidateRequestStringsTest, NamesNestedFieldsByTheirPath) {
  v1::OpenSessionRequest open;
  open.set_tenant("t");
  open.mutable_client()->set_name("x\x1b");
  EXPECT_THAT(ValidateRequestStrings(open),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client.name holds")));

  v1::RunOpRequest run;
  run.set_op("add");
  run.add_inputs()->set_handle("a-1");
  run.add_inputs()->set_handle(std::string(300, 'h'));
  EXPECT_THAT(ValidateRequestStrings(run),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inputs[1].handle is 300")));

  v1::UploadRequest upload;
  upload.mutable_header()->set_handle("\a");
  EXPECT_THAT(ValidateRequestStrings(upload),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("header.handle holds")));

  v1::UpdatePartitionRequest update;
  update.add_update_mask("memory_quota_bytes");
  update.add_update_mask("x\n");
  EXPECT_THAT(ValidateRequestStrings(update),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("update_mask[1] holds")));
}

TEST(ValidateRequestStringsTest, WalksPipelinedOpsAndReportsTheFirstFieldByNumber) {
  v1::SubmitRequest submit;
  submit.set_session_id("s-1");
  v1::PipelinedRunOp& run = *submit.add_ops()->mutable_run();
  run.set_op("add");
  run.add_inputs()->set_handle("a-0.0");
  run.add_inputs()->mutable_scalar()->set_float_value(1.0);
  submit.add_ops()->mutable_run()->set_op("mul");
  EXPECT_THAT(ValidateRequestStrings(submit), IsOk());
  submit.mutable_ops(1)->mutable_run()->add_inputs()->set_handle("a\x1b");
  EXPECT_THAT(ValidateRequestStrings(submit),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ops[1].run.inputs[0].handle holds control character U+001B")));
  // session_id (field 1) is looked at before ops (field 2).
  submit.set_session_id("s\n");
  EXPECT_THAT(ValidateRequestStrings(submit),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("session_id holds")));
}

TEST(ValidateRequestStringsTest, ChecksMapKeysAndValues) {
  v1::RunOpRequest run;
  (*run.mutable_attrs())["axis"].set_int_value(1);
  EXPECT_THAT(ValidateRequestStrings(run), IsOk());
  (*run.mutable_attrs())["mode"].set_string_value("\x1b]0;title\a");
  EXPECT_THAT(ValidateRequestStrings(run),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attrs[\"mode\"].string_value holds control character U+001B")));
  v1::RunOpRequest bad_key;
  (*bad_key.mutable_attrs())["a\rb"].set_int_value(1);
  EXPECT_THAT(ValidateRequestStrings(bad_key),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("attrs key holds"), Not(HasSubstr("a\rb")))));
}

TEST(ValidateRequestStringsTest, LeavesTheKernelSourceToTheCompiler) {
  v1::CompileKernelRequest compile;
  compile.set_source(std::string("extern \"C\" __global__ void k() {}\n\t// ") +
                     std::string(size_t{1} << 20, 'x'));
  compile.add_entries("k");
  EXPECT_THAT(ValidateRequestStrings(compile), IsOk());
  compile.add_entries("k\x1b");
  EXPECT_THAT(ValidateRequestStrings(compile),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entries[1] holds")));
}

TEST(ValidateRequestStringsTest, LeavesBytesFieldsAlone) {
  v1::UploadRequest chunk;
  chunk.mutable_chunk()->set_data(std::string(size_t{1} << 20, '\x1b'));
  EXPECT_THAT(ValidateRequestStrings(chunk), IsOk());
}

// Every string field under SubmitRequest, by its full name: the ones
// ValidateSubmitRequestStrings reads itself, and those under attrs, which it sends through the
// reflective walk.
TEST(ValidateSubmitRequestStringsTest, KnowsEveryStringFieldUnderSubmitRequest) {
  std::set<std::string> found;
  std::set<const google::protobuf::Descriptor*> seen;
  std::function<void(const google::protobuf::Descriptor*)> visit =
      [&](const google::protobuf::Descriptor* type) {
        if (!seen.insert(type).second) return;
        for (int i = 0; i < type->field_count(); ++i) {
          const google::protobuf::FieldDescriptor* field = type->field(i);
          if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
            found.insert(field->full_name());
          } else if (field->message_type() != nullptr) {
            visit(field->message_type());
          }
        }
      };
  visit(v1::SubmitRequest::descriptor());
  EXPECT_EQ(found,
            (std::set<std::string>{
                "gpukit.v1.SubmitRequest.session_id", "gpukit.v1.PipelinedOp.free",
                "gpukit.v1.PipelinedRunOp.op", "gpukit.v1.Operand.handle",
                "gpukit.v1.PipelinedRunOp.AttrsEntry.key", "gpukit.v1.AttrValue.string_value"}))
      << "a string field under SubmitRequest changed: ValidateSubmitRequestStrings must read "
         "it (or leave it to the reflective walk, as it does attrs)";
}

// Random requests with good and bad strings anywhere: the direct check answers as the
// reflective walk does, to the message.
TEST(ValidateSubmitRequestStringsTest, AnswersAsTheReflectiveWalk) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  const std::vector<std::string> values = {"",
                                           "a-0123456789abcdef0123456789abcdef.17",
                                           "add",
                                           "caf\xc3\xa9",
                                           std::string(257, 'a'),
                                           "x\x1b",
                                           "a\tb",
                                           "\x7f",
                                           "a\x9b",
                                           "\xe2\x80\xae"};
  auto value = [&] {
    // Mostly good values, so that an error often sits deep in the request.
    const size_t i = rng() % 4 == 0 ? rng() % values.size() : rng() % 4;
    return values[i];
  };
  int refused = 0;
  for (int round = 0; round < 2000; ++round) {
    v1::SubmitRequest request;
    if (rng() % 2 == 0) request.set_session_id(value());
    const int ops = static_cast<int>(rng() % 5);
    for (int i = 0; i < ops; ++i) {
      v1::PipelinedOp& op = *request.add_ops();
      switch (rng() % 3) {
        case 0:
          op.set_free(value());
          break;
        case 1: {
          v1::PipelinedRunOp& run = *op.mutable_run();
          run.set_op(value());
          const int inputs = static_cast<int>(rng() % 3);
          for (int j = 0; j < inputs; ++j) {
            if (rng() % 3 == 0) {
              run.add_inputs()->mutable_scalar()->set_float_value(1.0);
            } else {
              run.add_inputs()->set_handle(value());
            }
          }
          if (rng() % 4 == 0) (*run.mutable_attrs())[value()].set_string_value(value());
          if (rng() % 4 == 0) run.mutable_task()->set_priority(1);
          break;
        }
        default:
          break;  // an op of no kind
      }
    }
    const absl::Status walked = ValidateRequestStrings(request);
    const absl::Status direct = ValidateSubmitRequestStrings(request);
    ASSERT_EQ(direct, walked) << request.ShortDebugString();
    if (!walked.ok()) ++refused;
  }
  // Both outcomes were seen many times.
  EXPECT_GT(refused, 200);
  EXPECT_LT(refused, 1800);
}

}  // namespace
}  // namespace gpukit::service
