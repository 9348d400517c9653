// Bad input, end to end: every refusal comes back with its gRPC code and a message that
// names the field or value (and the admission reason where there is one), and afterwards
// the daemon still serves another client: TearDown opens a fresh client and runs an op
// after every test of this file.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Lt;
using ::testing::SizeIs;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr absl::StatusCode kInvalidArgument = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
constexpr absl::StatusCode kResourceExhausted = absl::StatusCode::kResourceExhausted;

// A session id of the right form that no daemon issued.
constexpr char kUnknownSession[] = "s-00000000000000000000000000000000";

class BadInputTest : public DaemonTest {
 protected:
  // A small device and a small array limit, so that both refusals are cheap to provoke.
  std::string DaemonConfigJson() const override {
    return R"({"limits": {"maxArraySize": "1MiB"}, "cpu": {"memory": "8MiB"}})";
  }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(DaemonTest::SetUp());
    GPUKIT_ASSERT_OK_AND_ASSIGN(session_, api().OpenSession("bad-input"));
  }

  void TearDown() override {
    if (!HasFatalFailure()) ExpectDaemonServesAnotherClient();
    DaemonTest::TearDown();
  }

  // A float32 array of `shape` in this test's session, uploaded with 1, 2, 3, ...
  std::string NewArray(const std::vector<int64_t>& shape) {
    absl::StatusOr<v1::ArrayInfo> array = api().CreateArray(session_, shape, v1::DTYPE_FLOAT32);
    EXPECT_TRUE(array.ok()) << array.status();
    if (!array.ok()) return "";
    std::vector<float> values(array->size_bytes() / sizeof(float));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i + 1);
    std::string bytes(reinterpret_cast<const char*>(values.data()), array->size_bytes());
    GPUKIT_EXPECT_OK(api().UploadBytes(session_, array->handle(), bytes));
    return array->handle();
  }

  v1::CreateArrayRequest CreateRequest(const std::vector<int64_t>& shape,
                                       v1::DType dtype = v1::DTYPE_FLOAT32) const {
    v1::CreateArrayRequest request;
    request.set_session_id(session_);
    request.mutable_shape()->Assign(shape.begin(), shape.end());
    request.set_dtype(dtype);
    return request;
  }

  v1::RunOpRequest OpRequest(const std::string& op, const std::vector<std::string>& handles) const {
    v1::RunOpRequest request;
    request.set_session_id(session_);
    request.set_op(op);
    for (const std::string& handle : handles) *request.add_inputs() = HandleOperand(handle);
    return request;
  }

  std::string session_;
};

// ---- Create: dtype and shape --------------------------------------------------------

TEST_F(BadInputTest, CreateRejectsUnspecifiedDtype) {
  EXPECT_THAT(api().Create(CreateRequest({4}, v1::DTYPE_UNSPECIFIED)),
              StatusIs(kInvalidArgument, HasSubstr("dtype is unspecified")));
}

TEST_F(BadInputTest, CreateRejectsUnknownDtypeNumber) {
  EXPECT_THAT(api().Create(CreateRequest({4}, static_cast<v1::DType>(42))),
              StatusIs(kInvalidArgument, HasSubstr("dtype = 42 is not a known dtype")));
}

TEST_F(BadInputTest, CreateRejectsNegativeDimension) {
  EXPECT_THAT(api().Create(CreateRequest({2, -3})),
              StatusIs(kInvalidArgument, HasSubstr("shape[1] = -3 must be >= 0")));
}

TEST_F(BadInputTest, CreateRejectsRankAboveEight) {
  EXPECT_THAT(api().Create(CreateRequest(std::vector<int64_t>(9, 1))),
              StatusIs(kInvalidArgument, HasSubstr("shape has 9 dimensions; at most 8")));
}

TEST_F(BadInputTest, CreateRejectsElementCountOverflow) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THAT(api().Create(CreateRequest({big, big})),
              StatusIs(kInvalidArgument, AllOf(HasSubstr("shape = [1099511627776, 1099511627776]"),
                                               HasSubstr("element count overflows int64"))));
}

TEST_F(BadInputTest, CreateRejectsByteSizeOverflow) {
  EXPECT_THAT(api().Create(CreateRequest({int64_t{1} << 62})),
              StatusIs(kInvalidArgument,
                       HasSubstr("size of [4611686018427387904] float32 overflows int64 bytes")));
}

// ---- Create: admission ----------------------------------------------------------------

TEST_F(BadInputTest, CreateRejectsArrayAboveMaxArraySizeWithReason) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("too-large"));
  absl::StatusOr<Array> array = client->Empty({2 * kMiB}, DType::kUInt8);
  EXPECT_THAT(array,
              StatusIs(kResourceExhausted, AllOf(HasSubstr("array of 2097152 bytes"),
                                                 HasSubstr("limits.maxArraySize = 1048576"))));
  EXPECT_EQ(RejectReason(array.status()), "REASON_ARRAY_TOO_LARGE");
  // Exactly the limit is fine.
  GPUKIT_EXPECT_OK(client->Empty({kMiB}, DType::kUInt8));
}

TEST_F(BadInputTest, CreateAndRunOpRejectArraysBeyondDeviceMemoryWithReason) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("memory-hog"));
  std::vector<Array> arrays;
  for (int i = 0; i < 8; ++i) {  // 8 x 1 MiB fill the 8 MiB device
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->Empty({kMiB / 4}, DType::kFloat32));
    arrays.push_back(std::move(array));
  }
  absl::StatusOr<Array> refused = client->Empty({16}, DType::kUInt8);
  EXPECT_THAT(refused, StatusIs(kResourceExhausted, HasSubstr("16 bytes")));
  EXPECT_EQ(RejectReason(refused.status()), "REASON_DEVICE_MEMORY_EXHAUSTED");
  // An op's result is admitted like any array.
  absl::StatusOr<Array> result = client->Add(arrays[0], 1.0);
  EXPECT_THAT(result, StatusIs(kResourceExhausted));
  EXPECT_EQ(RejectReason(result.status()), "REASON_DEVICE_MEMORY_EXHAUSTED");
  // Freeing makes room again.
  GPUKIT_ASSERT_OK(arrays.back().Free());
  GPUKIT_EXPECT_OK(client->Add(arrays[0], 1.0));
}

// ---- Upload framing ---------------------------------------------------------------------

TEST_F(BadInputTest, UploadRejectsTooFewBytes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session_, {16}, v1::DTYPE_UINT8));
  EXPECT_THAT(
      api().Upload({UploadHeader(session_, array.handle()), UploadChunk(0, std::string(8, 'x'))}),
      StatusIs(kInvalidArgument,
               HasSubstr("upload wrote 8 bytes but array " + array.handle() + " has 16")));
  EXPECT_THAT(api().Upload({UploadHeader(session_, array.handle())}),
              StatusIs(kInvalidArgument, HasSubstr("upload wrote 0 bytes")));
}

TEST_F(BadInputTest, UploadRejectsTooManyBytes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session_, {16}, v1::DTYPE_UINT8));
  EXPECT_THAT(
      api().Upload({UploadHeader(session_, array.handle()), UploadChunk(0, std::string(20, 'x'))}),
      StatusIs(kInvalidArgument, AllOf(HasSubstr("upload exceeds the array"),
                                       HasSubstr("[0, 0 + 20)"), HasSubstr("of 16 bytes"))));
  EXPECT_THAT(api().Upload({UploadHeader(session_, array.handle()),
                            UploadChunk(0, std::string(16, 'x')), UploadChunk(16, "y")}),
              StatusIs(kInvalidArgument, HasSubstr("[16, 16 + 1)")));
}

TEST_F(BadInputTest, UploadRejectsOutOfOrderChunkOffsets) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session_, {16}, v1::DTYPE_UINT8));
  EXPECT_THAT(
      api().Upload({UploadHeader(session_, array.handle()), UploadChunk(8, std::string(8, 'x')),
                    UploadChunk(0, std::string(8, 'x'))}),
      StatusIs(kInvalidArgument, HasSubstr("chunk.offset = 8 but 0 bytes were written so far")));
  EXPECT_THAT(
      api().Upload({UploadHeader(session_, array.handle()), UploadChunk(0, std::string(8, 'x')),
                    UploadChunk(0, std::string(8, 'x'))}),
      StatusIs(kInvalidArgument, HasSubstr("chunk.offset = 0 but 8 bytes were written so far")));
}

TEST_F(BadInputTest, UploadRejectsChunkAboveTheMaximumChunkSize) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session_, {16}, v1::DTYPE_UINT8));
  // One byte over the largest chunk, in a message that still fits gRPC's 4 MiB.
  EXPECT_THAT(api().Upload({UploadHeader(session_, array.handle()),
                            UploadChunk(0, std::string(kMaxChunkBytes + 1, 'x'))}),
              StatusIs(kInvalidArgument,
                       HasSubstr("chunk.data has 4128769 bytes; at most 4128768 per chunk")));
}

TEST_F(BadInputTest, UploadRejectsMessageAboveGrpcMessageLimit) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session_, {16}, v1::DTYPE_UINT8));
  // A 5 MiB chunk: gRPC refuses the message before the daemon sees it, with no reason.
  absl::StatusOr<v1::UploadResponse> response = api().Upload(
      {UploadHeader(session_, array.handle()), UploadChunk(0, std::string(5 * kMiB, 'x'))});
  EXPECT_THAT(response,
              StatusIs(kResourceExhausted,
                       AllOf(HasSubstr("Received message larger than max"), HasSubstr("4194304"))));
  EXPECT_EQ(RejectReason(response.status()), "");
}

TEST_F(BadInputTest, UploadRejectsMissingOrRepeatedHeader) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session_, {16}, v1::DTYPE_UINT8));
  EXPECT_THAT(
      api().Upload({UploadChunk(0, std::string(16, 'x'))}),
      StatusIs(kInvalidArgument, HasSubstr("the first upload message must carry the header")));
  EXPECT_THAT(api().Upload({}), StatusIs(kInvalidArgument, HasSubstr("upload stream is empty")));
  EXPECT_THAT(
      api().Upload(
          {UploadHeader(session_, array.handle()), UploadHeader(session_, array.handle())}),
      StatusIs(kInvalidArgument, HasSubstr("upload messages after the first must carry a chunk")));
}

TEST_F(BadInputTest, DownloadRejectsNegativeChunkBytes) {
  const std::string handle = NewArray({4});
  v1::DownloadRequest request;
  request.set_session_id(session_);
  request.set_handle(handle);
  request.set_chunk_bytes(-1);
  EXPECT_THAT(api().Download(request),
              StatusIs(kInvalidArgument, HasSubstr("chunk_bytes = -1 must be >= 0")));
}

// ---- Handles and sessions --------------------------------------------------------------

TEST_F(BadInputTest, AnotherSessionsHandleIsNotFoundEverywhere) {
  const std::string theirs = NewArray({4});
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string mine, api().OpenSession("intruder"));
  const auto not_found =
      StatusIs(kNotFound, HasSubstr("array handle \"" + theirs + "\" not found in this session"));
  EXPECT_THAT(api().Describe(mine, theirs), not_found);
  EXPECT_THAT(api().Free(mine, theirs), not_found);
  v1::DownloadRequest download;
  download.set_session_id(mine);
  download.set_handle(theirs);
  EXPECT_THAT(api().Download(download), not_found);
  EXPECT_THAT(api().Upload({UploadHeader(mine, theirs), UploadChunk(0, std::string(16, 'x'))}),
              not_found);
  v1::RunOpRequest op = OpRequest("add", {theirs, theirs});
  op.set_session_id(mine);
  EXPECT_THAT(api().RunOp(op), StatusIs(kNotFound, HasSubstr("inputs[0]: array handle \"" + theirs +
                                                             "\" not found")));
  // The owner's array is untouched by all of that.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo info, api().Describe(session_, theirs));
  EXPECT_EQ(info.size_bytes(), 16);
}

TEST_F(BadInputTest, FreedHandleIsNotFound) {
  const std::string handle = NewArray({4});
  EXPECT_THAT(api().Free(session_, handle), IsOkAndHolds(16));
  const auto not_found = StatusIs(kNotFound, HasSubstr("array handle \"" + handle + "\""));
  EXPECT_THAT(api().Describe(session_, handle), not_found);
  EXPECT_THAT(api().Free(session_, handle), not_found);
  EXPECT_THAT(api().RunOp(OpRequest("sum", {handle})), not_found);
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t used_bytes, api().MemoryUsedBytes());
  EXPECT_EQ(used_bytes, 0);
}

TEST_F(BadInputTest, UnknownSessionIdIsNotFoundEverywhere) {
  const auto not_found =
      StatusIs(kNotFound, HasSubstr(std::string("session \"") + kUnknownSession + "\" not found"));
  v1::CreateArrayRequest create = CreateRequest({4});
  create.set_session_id(kUnknownSession);
  EXPECT_THAT(api().Create(create), not_found);
  EXPECT_THAT(api().KeepAlive(kUnknownSession), not_found);
  EXPECT_THAT(api().Close(kUnknownSession), not_found);
  EXPECT_THAT(api().Describe(kUnknownSession, "a-1"), not_found);
  EXPECT_THAT(api().Upload({UploadHeader(kUnknownSession, "a-1")}), not_found);
  v1::RunOpRequest op = OpRequest("sum", {"a-1"});
  op.set_session_id(kUnknownSession);
  EXPECT_THAT(api().RunOp(op), not_found);
  // An id of any printable shape is quoted, but only its first 80 characters; one above the
  // 256 bytes that any request string may hold is refused as such.
  EXPECT_THAT(api().KeepAlive(std::string(250, 'z')),
              StatusIs(kNotFound,
                       AllOf(HasSubstr(std::string(80, 'z') + "\" not found"), SizeIs(Lt(200)))));
  EXPECT_THAT(api().KeepAlive(std::string(10 * 1024, 'z')),
              StatusIs(kInvalidArgument,
                       AllOf(HasSubstr("session_id is 10240 bytes long"), SizeIs(Lt(200)))));
}

// ---- Open ------------------------------------------------------------------------------

// An empty tenant is no longer refused: it is the caller's own (docs/security.md, "Tenants and
// roles"), here uid-<this test's uid>.
TEST_F(BadInputTest, OpenWithAnEmptyTenantActsAsTheCallersOwn) {
  ClientOptions options;
  options.address = daemon().address();
  options.tenant = "";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, api().ListSessions());
  bool found = false;
  for (const v1::SessionInfo& session : listed.sessions()) {
    if (session.session_id() != client->session_id()) continue;
    found = true;
    EXPECT_EQ(session.tenant(), absl::StrCat("uid-", geteuid()));
  }
  EXPECT_TRUE(found);
}

TEST_F(BadInputTest, OpenRejectsTenantOfTenKiBWithoutEchoingIt) {
  absl::StatusOr<std::string> session = api().OpenSession(std::string(10 * 1024, 't'));
  EXPECT_THAT(session,
              StatusIs(kInvalidArgument, HasSubstr("tenant is 10240 bytes long; at most 256")));
  EXPECT_LT(session.status().message().size(), 200u);
}

TEST_F(BadInputTest, OpenRejectsTenantWithCharactersOutsideTheAllowedSet) {
  EXPECT_THAT(api().OpenSession("bad name"),
              StatusIs(kInvalidArgument,
                       HasSubstr("tenant \"bad name\" may contain only letters, digits")));
}

TEST_F(BadInputTest, OpenRejectsUnknownPartition) {
  v1::OpenSessionRequest request;
  request.set_tenant("partitioned");
  request.set_partition("gold");
  EXPECT_THAT(api().Open(request), StatusIs(absl::StatusCode::kNotFound,
                                            HasSubstr("partition \"gold\" does not exist")));
}

TEST_F(BadInputTest, OpenRejectsNegativeLease) {
  EXPECT_THAT(api().OpenSession("leasing", -5),
              StatusIs(kInvalidArgument, HasSubstr("lease_ms = -5 must be >= 0")));
}

// ---- RunOp -----------------------------------------------------------------------------

TEST_F(BadInputTest, RunOpRejectsUnknownOp) {
  const std::string a = NewArray({4});
  EXPECT_THAT(
      api().RunOp(OpRequest("frobnicate", {a})),
      StatusIs(kInvalidArgument, AllOf(HasSubstr("unknown op \"frobnicate\""),
                                       HasSubstr("known ops: add, sub, mul, div, matmul"))));
}

TEST_F(BadInputTest, RunOpRejectsUnknownOpOfTenKiBWithAShortMessage) {
  const std::string a = NewArray({4});
  absl::StatusOr<v1::ArrayInfo> result = api().RunOp(OpRequest(std::string(10 * 1024, 'o'), {a}));
  EXPECT_THAT(result, StatusIs(kInvalidArgument, HasSubstr("op is 10240 bytes long")));
  EXPECT_LT(result.status().message().size(), 1024u);
}

TEST_F(BadInputTest, RunOpRejectsUnknownAttributeOfTenKiBWithAShortMessage) {
  const std::string a = NewArray({4});
  v1::RunOpRequest request = OpRequest("sum", {a});
  (*request.mutable_attrs())[std::string(10 * 1024, 'x')].set_int_value(0);
  absl::StatusOr<v1::ArrayInfo> result = api().RunOp(request);
  EXPECT_THAT(result, StatusIs(kInvalidArgument, HasSubstr("attrs key is 10240 bytes long")));
  EXPECT_LT(result.status().message().size(), 1024u);
}

TEST_F(BadInputTest, RunOpRejectsWrongOperandCount) {
  const std::string a = NewArray({4});
  EXPECT_THAT(api().RunOp(OpRequest("add", {a})),
              StatusIs(kInvalidArgument, HasSubstr("op \"add\" takes 2 inputs, got 1")));
  EXPECT_THAT(api().RunOp(OpRequest("sum", {a, a})),
              StatusIs(kInvalidArgument, HasSubstr("op \"sum\" takes 1 input, got 2")));
}

TEST_F(BadInputTest, RunOpRejectsShapesThatDoNotBroadcast) {
  const std::string a = NewArray({2, 3});
  const std::string b = NewArray({4});
  EXPECT_THAT(
      api().RunOp(OpRequest("add", {a, b})),
      StatusIs(kInvalidArgument, HasSubstr("shapes [2, 3] and [4] cannot be broadcast together")));
}

TEST_F(BadInputTest, RunOpRejectsMatmulInnerDimensionMismatch) {
  const std::string a = NewArray({2, 3});
  EXPECT_THAT(api().RunOp(OpRequest("matmul", {a, a})),
              StatusIs(kInvalidArgument, AllOf(HasSubstr("matmul inner dimensions differ"),
                                               HasSubstr("inputs[0] [2, 3] has 3 columns"),
                                               HasSubstr("inputs[1] [2, 3] has 2 rows"))));
}

TEST_F(BadInputTest, RunOpRejectsUnknownAttribute) {
  const std::string a = NewArray({2, 3});
  v1::RunOpRequest request = OpRequest("sum", {a});
  (*request.mutable_attrs())["axes"].set_int_value(1);
  EXPECT_THAT(
      api().RunOp(request),
      StatusIs(kInvalidArgument, HasSubstr("op \"sum\" has no attribute \"axes\"; it accepts axis, "
                                           "keepdims")));
}

TEST_F(BadInputTest, RunOpRejectsAttributeOfWrongType) {
  const std::string a = NewArray({2, 3});
  v1::RunOpRequest axis = OpRequest("sum", {a});
  (*axis.mutable_attrs())["axis"].set_string_value("1");
  EXPECT_THAT(api().RunOp(axis),
              StatusIs(kInvalidArgument, HasSubstr("attribute \"axis\" must be an integer")));
  v1::RunOpRequest keepdims = OpRequest("sum", {a});
  (*keepdims.mutable_attrs())["keepdims"].set_int_value(1);
  EXPECT_THAT(api().RunOp(keepdims),
              StatusIs(kInvalidArgument, HasSubstr("attribute \"keepdims\" must be a bool")));
  v1::RunOpRequest dtype = OpRequest("astype", {a});
  (*dtype.mutable_attrs())["dtype"].set_dtype_value(static_cast<v1::DType>(42));
  EXPECT_THAT(api().RunOp(dtype),
              StatusIs(kInvalidArgument, HasSubstr("attrs[\"dtype\"] = 42 is not a known dtype")));
  v1::RunOpRequest empty = OpRequest("sum", {a});
  (*empty.mutable_attrs())["axis"];  // no value set
  EXPECT_THAT(api().RunOp(empty),
              StatusIs(kInvalidArgument, HasSubstr("attrs[\"axis\"] has no value")));
}

TEST_F(BadInputTest, RunOpRejectsOperandWithNeitherHandleNorScalar) {
  const std::string a = NewArray({4});
  v1::RunOpRequest request = OpRequest("add", {a});
  request.add_inputs();  // nothing set
  EXPECT_THAT(api().RunOp(request),
              StatusIs(kInvalidArgument, HasSubstr("inputs[1] is neither a handle nor a scalar")));
  v1::RunOpRequest empty_scalar = OpRequest("add", {a});
  empty_scalar.add_inputs()->mutable_scalar();  // a scalar with no value
  EXPECT_THAT(api().RunOp(empty_scalar),
              StatusIs(kInvalidArgument, HasSubstr("inputs[1].scalar has no value")));
}

TEST_F(BadInputTest, RunOpRejectsScalarWhereAnArrayIsNeeded) {
  const std::string a = NewArray({2, 2});
  v1::RunOpRequest request = OpRequest("matmul", {a});
  request.add_inputs()->mutable_scalar()->set_int_value(2);
  EXPECT_THAT(api().RunOp(request),
              StatusIs(kInvalidArgument,
                       HasSubstr("inputs[1] of \"matmul\" must be an array, not a scalar")));
}

}  // namespace
}  // namespace gpukit::testing
