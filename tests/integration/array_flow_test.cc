// The happy paths of the array and compute services, end to end through the real gpukitd:
// the README's quick-start flow, transfers that span several 4 MiB chunks, and ListOps.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int64_t kMiB = int64_t{1} << 20;
// The largest data chunk: 4 MiB - 64 KiB, so that every message fits gRPC's default 4 MiB.
constexpr int64_t kChunkBytes = 4 * kMiB - 64 * 1024;

// Sizes of the chunks that carry `bytes` in chunks of at most `chunk_bytes`.
std::vector<int64_t> ChunkSizes(int64_t bytes, int64_t chunk_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t offset = 0; offset < bytes; offset += chunk_bytes) {
    sizes.push_back(std::min(chunk_bytes, bytes - offset));
  }
  return sizes;
}

// `bytes` pseudo-random bytes from `seed`, every value of a byte equally likely.
std::string RandomBytes(int64_t bytes, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string data(static_cast<size_t>(bytes), '\0');
  for (int64_t i = 0; i < bytes; i += 8) {
    const uint64_t word = random();
    std::memcpy(data.data() + i, &word, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
  return data;
}

// Index of the first byte where a and b differ, for a readable failure on megabytes.
int64_t FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

class ArrayFlowTest : public DaemonTest {};

TEST_F(ArrayFlowTest, QuickStartUploadsAddsWithBroadcastingMultipliesSumsAndDownloads) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("quick-start"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->FromVector<float>({10, 20, 30}, {3}));

  GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Add(a, b));
  EXPECT_THAT(sum.shape(), ElementsAre(2, 3));
  EXPECT_EQ(sum.dtype(), DType::kFloat32);
  EXPECT_THAT(sum.ToVector<float>(), IsOkAndHolds(ElementsAre(11, 22, 33, 14, 25, 36)));

  GPUKIT_ASSERT_OK_AND_ASSIGN(Array product, client->Mul(sum, a));
  EXPECT_THAT(product.ToVector<float>(), IsOkAndHolds(ElementsAre(11, 44, 99, 56, 125, 216)));

  GPUKIT_ASSERT_OK_AND_ASSIGN(Array total, client->Sum(product));
  EXPECT_THAT(total.shape(), IsEmpty());  // a 0-d array
  EXPECT_THAT(total.ToVector<float>(), IsOkAndHolds(ElementsAre(551)));

  // The arrays live in the daemon until the session closes, which frees all of them.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
  EXPECT_EQ(status.sessions(), 1);
  EXPECT_EQ(status.arrays(), 5);
  GPUKIT_EXPECT_OK(client->Close());
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(5)));
}

// Plain transfers in gRPC messages (ClientOptions::use_shared_memory off), and through the
// session's staging region (the default on a unix socket).
class TransferTest : public ArrayFlowTest, public ::testing::WithParamInterface<bool> {};

TEST_P(TransferTest, MultiChunkTransfersRoundTripBitForBit) {
  ClientOptions options = ClientOptionsFor("transfers");
  options.use_shared_memory = GetParam();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));

  // 12 MiB + 3 bytes of uint8: four chunks in gRPC messages, the last one short.
  const int64_t odd_bytes = 12 * kMiB + 3;
  const std::string odd = RandomBytes(odd_bytes, /*seed=*/1);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array bytes_array,
                              client->FromBytes(odd.data(), odd_bytes, {odd_bytes}, DType::kUInt8));
  std::string odd_back(odd.size(), '\0');
  GPUKIT_ASSERT_OK(bytes_array.Read(odd_back.data(), odd_bytes));
  EXPECT_EQ(FirstDifference(odd, odd_back), -1);

  // 5 MiB of float32 holding arbitrary bit patterns (NaNs, infinities, denormals
  // included): transfers must not touch the bits.
  const int64_t float_bytes = 5 * kMiB;
  const std::string floats = RandomBytes(float_bytes, /*seed=*/2);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array float_array, client->FromBytes(floats.data(), float_bytes,
                                                                   {1280, 1024}, DType::kFloat32));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> float_values, float_array.ToVector<float>());
  ASSERT_EQ(static_cast<int64_t>(float_values.size() * sizeof(float)), float_bytes);
  EXPECT_EQ(std::memcmp(float_values.data(), floats.data(), float_bytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Ways, TransferTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ThroughSharedMemory" : "InGrpcMessages";
                         });

TEST_F(ArrayFlowTest, DownloadStreamsInOrderedChunksOfAtMostFourMiBLess64KiB) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("chunks"));
  const int64_t bytes = 12 * kMiB + 3;
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                              api().CreateArray(session, {bytes}, v1::DTYPE_UINT8));
  EXPECT_EQ(array.size_bytes(), bytes);
  // Uploading in odd-sized chunks is as good as in 4 MiB ones.
  const std::string data = RandomBytes(bytes, /*seed=*/3);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::UploadResponse uploaded,
                              api().UploadBytes(session, array.handle(), data, 1'000'003));
  EXPECT_EQ(uploaded.bytes_written(), bytes);

  struct Case {
    int64_t chunk_bytes;
    std::vector<int64_t> expected_sizes;
  };
  // 0 and anything above the maximum mean the maximum.
  const std::vector<int64_t> full_chunks = ChunkSizes(bytes, kChunkBytes);
  ASSERT_EQ(full_chunks.size(), 4u);
  for (const Case& c : {Case{0, full_chunks}, Case{64 * kMiB, full_chunks},
                        Case{4 * kMiB, full_chunks}, Case{kChunkBytes, full_chunks},
                        Case{3 * kMiB, {3 * kMiB, 3 * kMiB, 3 * kMiB, 3 * kMiB, 3}}}) {
    SCOPED_TRACE(::testing::Message() << "chunk_bytes = " << c.chunk_bytes);
    v1::DownloadRequest request;
    request.set_session_id(session);
    request.set_handle(array.handle());
    request.set_chunk_bytes(c.chunk_bytes);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<v1::DownloadResponse> messages,
                                api().Download(request));
    ASSERT_FALSE(messages.empty());
    EXPECT_EQ(messages[0].array().handle(), array.handle());
    EXPECT_EQ(messages[0].array().size_bytes(), bytes);
    std::vector<int64_t> sizes;
    std::string received;
    for (const v1::DownloadResponse& message : messages) {
      EXPECT_EQ(message.chunk().offset(), static_cast<int64_t>(received.size()));
      sizes.push_back(static_cast<int64_t>(message.chunk().data().size()));
      received += message.chunk().data();
    }
    EXPECT_EQ(sizes, c.expected_sizes);
    EXPECT_EQ(FirstDifference(received, data), -1);
  }
}

// The daemon's memory pool hands a freed block to the next allocation, whoever makes it: a
// new array (zeroed through the executor's Fill) must not show another tenant's bytes.
TEST_F(ArrayFlowTest, AnotherTenantsFreedBytesNeverShowInANewArray) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> victim, Connect("tenant-a"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> reader, Connect("tenant-b"));
  // A slab block (small) and an exact large block, each of a size that is not round.
  for (const int64_t kCount : {int64_t{4093}, 3 * kMiB / 4 + 5}) {
    SCOPED_TRACE(::testing::Message() << kCount << " elements");
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        Array secret,
        victim->FromVector<int32_t>(std::vector<int32_t>(kCount, 0x5eC7e7), {kCount}));
    GPUKIT_ASSERT_OK(secret.ToVector<int32_t>().status());  // written, and no work in flight
    GPUKIT_ASSERT_OK(secret.Free());
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array fresh, reader->Empty({kCount}, DType::kInt32));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> values, fresh.ToVector<int32_t>());
    EXPECT_EQ(std::count(values.begin(), values.end(), 0), kCount);
    GPUKIT_ASSERT_OK(fresh.Free());
  }
}

TEST_F(ArrayFlowTest, ListOpsListsTheTwelveBuiltinOpsOnTheCpuBackend) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListOpsResponse response, api().ListOps());
  std::vector<std::string> names;
  for (const v1::OpInfo& op : response.ops()) {
    // Builds with GPUKIT_FAULT_INJECTION (tests/run_all.sh's) list the fault-injection ops too.
    if (absl::StartsWith(op.name(), "_test_")) continue;
    names.push_back(op.name());
    EXPECT_THAT(op.backends(), ElementsAre("cpu")) << op.name();
    EXPECT_FALSE(op.summary().empty()) << op.name();
    EXPECT_LE(op.min_inputs(), op.max_inputs()) << op.name();
    if (op.name() == "add" || op.name() == "matmul") {
      EXPECT_EQ(op.min_inputs(), 2);
      EXPECT_EQ(op.max_inputs(), 2);
    }
    if (op.name() == "sum") {
      EXPECT_THAT(op.attrs(), UnorderedElementsAre("axis", "keepdims"));
    }
    if (op.name() == "astype") {
      EXPECT_THAT(op.attrs(), ElementsAre("dtype"));
      ASSERT_EQ(op.attr_info_size(), 1);
      EXPECT_EQ(op.attr_info(0).type(), v1::ATTR_TYPE_DTYPE);
      EXPECT_TRUE(op.attr_info(0).required());
    }
    // Each attribute's spec, and each input's dtypes, as the op table has them.
    ASSERT_EQ(op.attr_info_size(), op.attrs_size()) << op.name();
    for (int i = 0; i < op.attr_info_size(); ++i) {
      EXPECT_EQ(op.attr_info(i).name(), op.attrs(i)) << op.name();
      EXPECT_NE(op.attr_info(i).type(), v1::ATTR_TYPE_UNSPECIFIED) << op.name();
      EXPECT_FALSE(op.attr_info(i).doc().empty()) << op.name();
    }
    ASSERT_GE(op.inputs_size(), 1) << op.name();
    if (op.name() == "sum") {
      EXPECT_EQ(op.attr_info(0).type(), v1::ATTR_TYPE_AXES);
      EXPECT_EQ(op.attr_info(0).default_value(), "all axes");
      EXPECT_EQ(op.attr_info(1).type(), v1::ATTR_TYPE_BOOL);
      EXPECT_EQ(op.attr_info(1).default_value(), "false");
    }
    if (op.name() == "add") {
      EXPECT_TRUE(op.inputs(1).scalar_ok());
      EXPECT_EQ(op.inputs(0).dtypes_size(), 6);
    }
    if (op.name() == "embedding") {
      ASSERT_EQ(op.inputs_size(), 2);
      EXPECT_FALSE(op.inputs(1).scalar_ok());
      EXPECT_THAT(op.inputs(1).dtypes(), ElementsAre(v1::DTYPE_INT32, v1::DTYPE_INT64));
    }
  }
  EXPECT_THAT(names,
              ::testing::UnorderedElementsAreArray(
                  {"add",     "sub",   "mul",     "div",     "matmul",    "sum",       "mean",
                   "max",     "min",   "astype",  "reshape", "transpose", "exp",       "log",
                   "sqrt",    "rsqrt", "abs",     "neg",     "relu",      "gelu",      "silu",
                   "sigmoid", "tanh",  "clamp",   "where",   "argmax",    "softmax",   "layernorm",
                   "rmsnorm", "rope",  "attention", "embedding", "concat"}));
}

TEST_F(ArrayFlowTest, StatusReportsTheCpuBackendAndTheListenAddress) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
  EXPECT_EQ(status.version(), GPUKIT_VERSION_STRING);
  EXPECT_EQ(status.backend(), "cpu");
  EXPECT_EQ(status.device_count(), 1);
  EXPECT_EQ(status.sessions(), 0);
  EXPECT_THAT(status.listen_addresses(), ElementsAre(daemon().address()));
}

// The C++ client's helpers (Client::Add, ..., Transpose) run the ops of op_names::kAll: the
// daemon lists each, so a renamed op cannot leave a helper behind that always fails.
TEST_F(ArrayFlowTest, ListOpsListsEveryOpTheCppClientsHelpersRun) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListOpsResponse response, api().ListOps());
  std::vector<std::string> listed;
  for (const v1::OpInfo& op : response.ops()) listed.push_back(op.name());
  for (absl::string_view name : op_names::kAll) {
    EXPECT_THAT(listed, ::testing::Contains(std::string(name)));
  }
}

}  // namespace
}  // namespace gpukit::testing
