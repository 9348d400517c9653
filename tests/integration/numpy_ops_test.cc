// NumPy's meaning through the C++ client, end to end against the real gpukitd: reductions
// over a list of axes (adjacent or not, negative, keepdims, none) and matmul of 1-d and
// batched operands, each one op: one task of the daemon (counted in ListTenants) and the
// values NumPy gives (computed here by hand).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class NumpyOpsTest : public DaemonTest {
 protected:
  // Tasks the tenant's sessions have finished, as the daemon counts them.
  int64_t TasksFinished(const std::string& tenant) {
    absl::StatusOr<v1::ListTenantsResponse> tenants = api().ListTenants();
    EXPECT_TRUE(tenants.ok()) << tenants.status();
    if (!tenants.ok()) return -1;
    for (const v1::TenantUsage& usage : tenants->tenants()) {
      if (usage.tenant() == tenant) return usage.tasks_finished();
    }
    return 0;
  }

  // in[i][j][k] = 12 i + 4 j + k, shape [2, 3, 4].
  std::vector<float> Iota24() {
    std::vector<float> values(24);
    for (int i = 0; i < 24; ++i) values[i] = static_cast<float>(i);
    return values;
  }
};

TEST_F(NumpyOpsTest, ReductionsOverSeveralAxesAreOneOpEach) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("axes"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<float>(Iota24(), {2, 3, 4}));
  GPUKIT_ASSERT_OK(client->Sync());
  const int64_t before = TasksFinished("axes");

  // Axes apart: sum over i and k of 12 i + 4 j + k is 60 + 32 j.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Sum(x, {0, 2}));
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_TRUE(PollUntil([&] { return TasksFinished("axes") >= before + 1; }, absl::Seconds(10)));
  EXPECT_EQ(TasksFinished("axes"), before + 1) << "a reduction over two axes is one task";
  EXPECT_THAT(sum.shape(), ElementsAre(3));
  EXPECT_THAT(sum.ToVector<float>(), IsOkAndHolds(ElementsAre(60, 92, 124)));

  // Negative axes, in any order, keepdims.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array mean, client->Mean(x, {-1, -3}, /*keepdims=*/true));
  EXPECT_THAT(mean.shape(), ElementsAre(1, 3, 1));
  EXPECT_THAT(mean.ToVector<float>(), IsOkAndHolds(ElementsAre(7.5, 11.5, 15.5)));
  // Adjacent axes.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array max, client->Max(x, {1, 2}));
  EXPECT_THAT(max.ToVector<float>(), IsOkAndHolds(ElementsAre(11, 23)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array min, client->Min(x, {0, 1}));
  EXPECT_THAT(min.ToVector<float>(), IsOkAndHolds(ElementsAre(0, 1, 2, 3)));
  // Every axis named is everything; no axis (NumPy's axis=()) is each element.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array all, client->Sum(x, {0, 1, 2}));
  EXPECT_THAT(all.shape(), IsEmpty());
  EXPECT_THAT(all.ToVector<float>(), IsOkAndHolds(ElementsAre(276)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array none, client->Max(x, std::vector<int64_t>{}));
  EXPECT_THAT(none.shape(), ElementsAre(2, 3, 4));
  EXPECT_THAT(none.ToVector<float>(), IsOkAndHolds(Iota24()));
}

TEST_F(NumpyOpsTest, IntegerReductionsOverSeveralAxesKeepNumpysDtypes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x,
                              client->FromVector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Sum(x, {0, 2}));
  EXPECT_EQ(sum.dtype(), DType::kInt64);
  EXPECT_THAT(sum.ToVector<int64_t>(), IsOkAndHolds(ElementsAre(14, 22)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array mean, client->Mean(x, {0, 1}));
  EXPECT_EQ(mean.dtype(), DType::kFloat32);
  EXPECT_THAT(mean.ToVector<float>(), IsOkAndHolds(ElementsAre(4, 5)));
}

TEST_F(NumpyOpsTest, RefusesARepeatedAxisAsNumpyDoes) {
  ClientOptions options = ClientOptionsFor("refusals");
  options.pipeline = false;  // the refusal comes with the call
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<float>(Iota24(), {2, 3, 4}));
  EXPECT_THAT(client->Sum(x, {0, -3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("repeats axis 0")));
  EXPECT_THAT(client->Mean(x, {1, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("attribute \"axis\"[1] = 3")));
}

TEST_F(NumpyOpsTest, MatmulTakesVectorsAndBatchesAsOneOp) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("matmul"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array row, client->FromVector<float>({1, 2, 3}, {3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array matrix,
                              client->FromVector<float>({7, 8, 9, 10, 11, 12}, {3, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array wide, client->FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array batch,
                              client->FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array pair, client->FromVector<float>({1, 2}, {2}));
  GPUKIT_ASSERT_OK(client->Sync());
  const int64_t before = TasksFinished("matmul");

  GPUKIT_ASSERT_OK_AND_ASSIGN(Array vm, client->Matmul(row, matrix));  // [3] x [3, 2] -> [2]
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_TRUE(PollUntil([&] { return TasksFinished("matmul") >= before + 1; }, absl::Seconds(10)));
  EXPECT_EQ(TasksFinished("matmul"), before + 1) << "a 1-d matmul is one task";
  EXPECT_THAT(vm.shape(), ElementsAre(2));
  EXPECT_THAT(vm.ToVector<float>(), IsOkAndHolds(ElementsAre(58, 64)));

  GPUKIT_ASSERT_OK_AND_ASSIGN(Array mv, client->Matmul(wide, row));  // [2, 3] x [3] -> [2]
  EXPECT_THAT(mv.ToVector<float>(), IsOkAndHolds(ElementsAre(14, 32)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array dot, client->Matmul(row, row));  // [3] x [3] -> []
  EXPECT_THAT(dot.shape(), IsEmpty());
  EXPECT_THAT(dot.ToVector<float>(), IsOkAndHolds(ElementsAre(14)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array vb, client->Matmul(pair, batch));  // [2] x [2, 2, 2]
  EXPECT_THAT(vb.shape(), ElementsAre(2, 2));
  EXPECT_THAT(vb.ToVector<float>(), IsOkAndHolds(ElementsAre(7, 10, 19, 22)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array bv, client->Matmul(batch, pair));  // [2, 2, 2] x [2]
  EXPECT_THAT(bv.shape(), ElementsAre(2, 2));
  EXPECT_THAT(bv.ToVector<float>(), IsOkAndHolds(ElementsAre(5, 11, 17, 23)));
}

TEST_F(NumpyOpsTest, MatmulRefusesZeroDimOperandsWithNumpysMessage) {
  ClientOptions options = ClientOptionsFor("refusals");
  options.pipeline = false;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array scalar, client->FromVector<float>({2}, {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array vector, client->FromVector<float>({1, 2}, {2}));
  EXPECT_THAT(client->Matmul(scalar, vector),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("matmul: Input operand 0 does not have enough dimensions")));
}

}  // namespace
}  // namespace gpukit::testing
