// The daemon's core API (daemon/core/core.h) over a CPU device and a FakeClock: sessions and
// ownership, array creation and admission, reads and writes, and every built-in op against
// hand-computed values and against a float64 reference on seeded random inputs.
#include "daemon/core/core.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/half.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>

namespace gpukit {

// The half types are test-side C++ spellings of float16 and bfloat16.
template <>
constexpr DType DTypeOf<kernels::Float16>() {
  return DType::kFloat16;
}
template <>
constexpr DType DTypeOf<kernels::BFloat16>() {
  return DType::kBFloat16;
}

namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::gpukit::testing::TestSeed;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kDeviceBytes = int64_t{1} << 20;
constexpr absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
constexpr absl::StatusCode kInvalidArgument = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kResourceExhausted = absl::StatusCode::kResourceExhausted;

// ---- Host-side helpers ----

int64_t NumElements(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return index;
}

int64_t Ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + index[i];
  return flat;
}

// The element of an array of `in` shape that output element `out_index` (of the broadcast
// `out` shape) reads.
int64_t BroadcastSource(const std::vector<int64_t>& out_index, const Shape& in) {
  const size_t offset = out_index.size() - in.size();
  std::vector<int64_t> index(in.size());
  for (size_t i = 0; i < in.size(); ++i) index[i] = in[i] == 1 ? 0 : out_index[offset + i];
  return Ravel(index, in);
}

Shape BroadcastShape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Random float32 values with magnitude in [0.5, 2] and a random sign: never zero.
std::vector<float> RandomNonZero(std::mt19937& rng, int64_t count) {
  std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = negative(rng) ? -magnitude(rng) : magnitude(rng);
  return values;
}

std::vector<int32_t> RandomNonZeroInts(std::mt19937& rng, int64_t count) {
  std::uniform_int_distribution<int32_t> value(1, 1000);
  std::bernoulli_distribution negative(0.5);
  std::vector<int32_t> values(static_cast<size_t>(count));
  for (int32_t& v : values) v = negative(rng) ? -value(rng) : value(rng);
  return values;
}

double Apply(absl::string_view op, double a, double b) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  return a / b;
}

// |got - want| within `relative` of |want| plus an absolute floor for sums that cancel.
::testing::AssertionResult Near(double got, double want, double relative, double absolute) {
  if (std::abs(got - want) <= relative * std::abs(want) + absolute) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "got " << got << ", want " << want << " (difference " << got - want << ")";
}

OpInput In(const std::string& handle) {
  OpInput in;
  in.handle = handle;
  return in;
}
OpInput IntScalar(int64_t value) {
  OpInput in;
  in.is_scalar = true;
  in.scalar.int_value = value;
  return in;
}
OpInput FloatScalar(double value) {
  OpInput in;
  in.is_scalar = true;
  in.scalar.is_float = true;
  in.scalar.float_value = value;
  return in;
}

// ---- Fixture ----

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    options_.limits.max_array_bytes = kDeviceBytes;  // the device is the only limit by default
    options_.limits.max_arrays_per_session = 64;
    options_.streams_per_partition = 2;
  }

  // Made on first use, so tests may change options_ first. With `hooked`, the CPU device is
  // wrapped in a ForwardingDevice reachable through hooks().
  Core& core(bool hooked = false) {
    if (core_ == nullptr) {
      CpuDeviceOptions device_options;
      device_options.memory_bytes = kDeviceBytes;
      std::unique_ptr<Device> device = *CpuDevice::Create(device_options);
      if (hooked) {
        auto forwarding = std::make_unique<ForwardingDevice>(std::move(device));
        hooks_ = forwarding.get();
        device = std::move(forwarding);
      }
      std::vector<std::unique_ptr<Device>> devices;
      devices.push_back(std::move(device));
      absl::StatusOr<std::unique_ptr<Core>> core =
          Core::Create(clock_, std::move(devices), options_);
      EXPECT_THAT(core, IsOk());
      core_ = *std::move(core);
    }
    return *core_;
  }
  ForwardingDevice& hooks() { return *hooks_; }

  absl::StatusOr<std::string> Open(std::string tenant = "tenant-a") {
    OpenSessionParams params;
    params.tenant = std::move(tenant);
    GPUKIT_ASSIGN_OR_RETURN(SessionGrant grant, core().OpenSession(params));
    return grant.session_id;
  }

  template <typename T>
  absl::StatusOr<std::string> Upload(const std::string& session, const Shape& shape,
                                     const std::vector<T>& values) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core().CreateArray(session, {DTypeOf<T>(), shape}));
    if (static_cast<int64_t>(values.size()) != NumElements(shape)) {
      return absl::InvalidArgumentError("test bug: values do not fill the shape");
    }
    GPUKIT_RETURN_IF_ERROR(
        core().WriteArray(session, view.handle, 0,
                          absl::MakeConstSpan(reinterpret_cast<const char*>(values.data()),
                                              values.size() * sizeof(T))));
    return view.handle;
  }

  template <typename T>
  absl::StatusOr<std::vector<T>> Download(const std::string& session, const std::string& handle) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core().DescribeArray(session, handle));
    if (view.desc.dtype != DTypeOf<T>()) {
      return absl::InvalidArgumentError(
          absl::StrCat("array is ", DTypeName(view.desc.dtype), ", not ", DTypeName(DTypeOf<T>())));
    }
    std::vector<T> values(static_cast<size_t>(view.bytes / sizeof(T)));
    GPUKIT_RETURN_IF_ERROR(core().ReadArray(
        session, handle, 0,
        absl::MakeSpan(reinterpret_cast<char*>(values.data()), values.size() * sizeof(T))));
    return values;
  }

  // Runs `op` and reads its result back as T, checking the result's shape.
  template <typename T>
  absl::StatusOr<std::vector<T>> RunAndRead(const std::string& session, absl::string_view op,
                                            std::vector<OpInput> inputs, const AttrMap& attrs,
                                            const Shape& expected_shape) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView out, core().RunOp(session, op, inputs, attrs));
    if (out.desc.shape != expected_shape) {
      return absl::InternalError(absl::StrCat("result shape ", ShapeToString(out.desc.shape),
                                              ", expected ", ShapeToString(expected_shape)));
    }
    return Download<T>(session, out.handle);
  }

  int64_t DeviceMemoryUsed() const { return core_->ListDevices()[0].memory_used_bytes; }

  FakeClock clock_;
  CoreOptions options_;
  std::unique_ptr<Core> core_;
  ForwardingDevice* hooks_ = nullptr;
};

// ---- Creation ----

TEST(CoreCreateTest, NeedsAtLeastOneDevice) {
  FakeClock clock;
  EXPECT_THAT(Core::Create(clock, {}, CoreOptions{}),
              StatusIs(kInvalidArgument, HasSubstr("at least one device")));
}

TEST(CoreCreateTest, NeedsAtLeastOneStreamPerPartition) {
  FakeClock clock;
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(*CpuDevice::Create({}));
  CoreOptions options;
  options.streams_per_partition = 0;
  EXPECT_THAT(Core::Create(clock, std::move(devices), options),
              StatusIs(kInvalidArgument, HasSubstr("streams_per_partition = 0 must be >= 1")));
}

TEST_F(CoreTest, DescribesItsCpuDevice) {
  EXPECT_EQ(core().backend(), "cpu");
  EXPECT_EQ(core().device_count(), 1);
  EXPECT_EQ(core().device(0).properties().memory_total_bytes, kDeviceBytes);
  const std::vector<DeviceSummary> devices = core().ListDevices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].properties.backend, BackendKind::kCpu);
  EXPECT_EQ(devices[0].memory_used_bytes, 0);
  EXPECT_EQ(&core().ops(), &OpRegistry::Builtin());
}

// ---- Sessions ----

TEST_F(CoreTest, OpenSessionGrantsTheDefaultPartitionAndLease) {
  OpenSessionParams params;
  params.tenant = "t";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant grant, core().OpenSession(params));
  EXPECT_THAT(grant.session_id, StartsWith("s-"));
  EXPECT_EQ(grant.partition, "default");
  EXPECT_EQ(grant.lease, absl::Seconds(30));
  EXPECT_EQ(core().session_count(), 1);
}

TEST_F(CoreTest, OpenSessionValidatesTheTenant) {
  OpenSessionParams params;
  params.tenant = "no spaces";
  EXPECT_THAT(core().OpenSession(params), StatusIs(kInvalidArgument, HasSubstr("tenant")));
  EXPECT_EQ(core().session_count(), 0);
}

TEST_F(CoreTest, KeepAliveRenewsTheLeaseAndReturnsIt) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  clock_.Advance(absl::Seconds(20));
  EXPECT_THAT(core().KeepAlive(s), IsOkAndHolds(absl::Seconds(30)));
  clock_.Advance(absl::Seconds(20));  // 40 s after opening, 20 after the keep-alive
  EXPECT_EQ(core().ExpireLeases(), 0);
  EXPECT_THAT(core().KeepAlive(s), IsOk());
  clock_.Advance(absl::Seconds(31));
  EXPECT_THAT(core().KeepAlive(s), StatusIs(kNotFound));
}

TEST_F(CoreTest, EveryArrayRequestRenewsTheLease) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {2}, {1, 2}));
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(25));
    GPUKIT_ASSERT_OK(core().DescribeArray(s, a));
  }
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(25));
    GPUKIT_ASSERT_OK(core().RunOp(s, "add", {In(a), In(a)}, {}));
  }
  clock_.Advance(absl::Seconds(25));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> values, Download<float>(s, a));
  EXPECT_THAT(values, ElementsAre(1, 2));
  EXPECT_EQ(core().ExpireLeases(), 0);
}

TEST_F(CoreTest, CloseSessionFreesItsArraysAndForgetsIt) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK(core().CreateArray(s, {DType::kFloat32, {16}}));
  GPUKIT_ASSERT_OK(core().CreateArray(s, {DType::kInt64, {4}}));
  EXPECT_EQ(DeviceMemoryUsed(), 96);
  GPUKIT_ASSERT_OK_AND_ASSIGN(CloseStats stats, core().CloseSession(s));
  EXPECT_EQ(stats.arrays_freed, 2);
  EXPECT_EQ(stats.bytes_freed, 96);
  EXPECT_EQ(DeviceMemoryUsed(), 0);
  EXPECT_EQ(core().session_count(), 0);
  EXPECT_THAT(core().CreateArray(s, {DType::kFloat32, {1}}), StatusIs(kNotFound));
  EXPECT_THAT(core().CloseSession(s), StatusIs(kNotFound));
}

TEST_F(CoreTest, UnknownSessionIsNotFoundForEveryCall) {
  const std::string s = "s-00000000000000000000000000000000";
  char buffer[4] = {};
  EXPECT_THAT(core().KeepAlive(s), StatusIs(kNotFound));
  EXPECT_THAT(core().CreateArray(s, {DType::kFloat32, {1}}), StatusIs(kNotFound));
  EXPECT_THAT(core().DescribeArray(s, "a-1"), StatusIs(kNotFound));
  EXPECT_THAT(core().FreeArray(s, "a-1"), StatusIs(kNotFound));
  EXPECT_THAT(core().WriteArray(s, "a-1", 0, absl::MakeConstSpan(buffer)), StatusIs(kNotFound));
  EXPECT_THAT(core().ReadArray(s, "a-1", 0, absl::MakeSpan(buffer)), StatusIs(kNotFound));
  EXPECT_THAT(core().RunOp(s, "add", {IntScalar(1), IntScalar(2)}, {}), StatusIs(kNotFound));
}

TEST_F(CoreTest, ListSessionsSummarisesEachSession) {
  OpenSessionParams params;
  params.tenant = "listed";
  params.client.name = "core_test";
  params.client.pid = 77;
  params.lease = absl::Seconds(60);
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant grant, core().OpenSession(params));
  GPUKIT_ASSERT_OK(core().CreateArray(grant.session_id, {DType::kFloat32, {10}}));
  GPUKIT_ASSERT_OK(core().CreateArray(grant.session_id, {DType::kUInt8, {3}}));
  clock_.Advance(absl::Seconds(15));
  const std::vector<SessionSummary> sessions = core().ListSessions();
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].session_id, grant.session_id);
  EXPECT_EQ(sessions[0].tenant, "listed");
  EXPECT_EQ(sessions[0].partition, "default");
  EXPECT_EQ(sessions[0].client.name, "core_test");
  EXPECT_EQ(sessions[0].client.pid, 77);
  EXPECT_EQ(sessions[0].arrays, 2);
  EXPECT_EQ(sessions[0].memory_bytes, 43);
  EXPECT_EQ(sessions[0].age, absl::Seconds(15));
  EXPECT_EQ(sessions[0].lease_remaining, absl::Seconds(45));
  EXPECT_EQ(core().array_count(), 2);
  clock_.Advance(absl::Seconds(100));  // expired, not yet reaped: nothing remains, not less
  EXPECT_EQ(core().ListSessions()[0].lease_remaining, absl::ZeroDuration());
}

// ---- Ownership ----

TEST_F(CoreTest, AnotherSessionsHandleIsNotFoundForEveryCall) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string owner, Open("owner"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string thief, Open("thief"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(owner, {4}, {1, 2, 3, 4}));
  const char zeros[16] = {};
  char out[16] = {};
  EXPECT_THAT(core().DescribeArray(thief, a), StatusIs(kNotFound, HasSubstr("not found")));
  EXPECT_THAT(core().FreeArray(thief, a), StatusIs(kNotFound));
  EXPECT_THAT(core().WriteArray(thief, a, 0, absl::MakeConstSpan(zeros)), StatusIs(kNotFound));
  EXPECT_THAT(core().ReadArray(thief, a, 0, absl::MakeSpan(out)), StatusIs(kNotFound));
  EXPECT_THAT(core().RunOp(thief, "add", {In(a), FloatScalar(1)}, {}),
              StatusIs(kNotFound, HasSubstr("inputs[0]")));
  EXPECT_THAT(core().RunOp(thief, "add", {FloatScalar(1), In(a)}, {}),
              StatusIs(kNotFound, HasSubstr("inputs[1]")));
  // The owner's array is untouched and the thief owns nothing.
  EXPECT_THAT(Download<float>(owner, a), IsOkAndHolds(ElementsAre(1, 2, 3, 4)));
  EXPECT_EQ(core().ListSessions().size(), 2u);
  for (const SessionSummary& s : core().ListSessions()) {
    EXPECT_EQ(s.arrays, s.session_id == owner ? 1 : 0) << s.tenant;
  }
}

TEST_F(CoreTest, ForeignAndUnknownHandlesGetTheSameMessage) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string owner, Open("owner"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string other, Open("other"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView a, core().CreateArray(owner, {DType::kFloat32, {1}}));
  absl::StatusOr<ArrayView> foreign = core().DescribeArray(other, a.handle);
  GPUKIT_ASSERT_OK(core().FreeArray(owner, a.handle));
  absl::StatusOr<ArrayView> freed = core().DescribeArray(owner, a.handle);
  ASSERT_THAT(foreign, StatusIs(kNotFound));
  EXPECT_EQ(foreign.status(), freed.status());
}

// ---- CreateArray: validation and admission ----

struct BadShapeCase {
  std::string name;
  DType dtype;
  Shape shape;
  std::string message;
};

class CreateArrayValidationTest : public CoreTest,
                                  public ::testing::WithParamInterface<BadShapeCase> {};

TEST_P(CreateArrayValidationTest, IsInvalidArgumentNamingTheProblem) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  EXPECT_THAT(core().CreateArray(s, {GetParam().dtype, GetParam().shape}),
              StatusIs(kInvalidArgument, HasSubstr(GetParam().message)));
  EXPECT_EQ(DeviceMemoryUsed(), 0);
  EXPECT_EQ(core().array_count(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Table, CreateArrayValidationTest,
    ::testing::Values(
        BadShapeCase{"NegativeDimension", DType::kFloat32, {2, -3}, "shape[1] = -3 must be >= 0"},
        BadShapeCase{"NegativeOnly", DType::kUInt8, {-1}, "shape[0] = -1 must be >= 0"},
        BadShapeCase{"RankAboveEight", DType::kFloat32, Shape(9, 1),
                     "shape has 9 dimensions; at most 8"},
        BadShapeCase{"ElementCountOverflow",
                     DType::kUInt8,
                     {int64_t{1} << 32, int64_t{1} << 32},
                     "overflows int64"},
        BadShapeCase{
            "ByteSizeOverflow", DType::kFloat32, {int64_t{1} << 62}, "overflows int64 bytes"}),
    [](const ::testing::TestParamInfo<BadShapeCase>& info) { return info.param.name; });

TEST_F(CoreTest, CreateArrayDescribesTheNewArray) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView view, core().CreateArray(s, {DType::kBFloat16, {3, 5}}));
  EXPECT_THAT(view.handle, StartsWith("a-"));
  EXPECT_EQ(view.desc.dtype, DType::kBFloat16);
  EXPECT_THAT(view.desc.shape, ElementsAre(3, 5));
  EXPECT_EQ(view.bytes, 30);
  EXPECT_EQ(view.device_index, 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView described, core().DescribeArray(s, view.handle));
  EXPECT_EQ(described.handle, view.handle);
  EXPECT_THAT(described.desc.shape, ElementsAre(3, 5));
  EXPECT_EQ(described.bytes, 30);
  EXPECT_EQ(DeviceMemoryUsed(), 30);
}

TEST_F(CoreTest, CreatesZeroDimAndEmptyArrays) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView scalar, core().CreateArray(s, {DType::kInt64, {}}));
  EXPECT_EQ(scalar.bytes, 8);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView empty, core().CreateArray(s, {DType::kFloat32, {0, 7}}));
  EXPECT_EQ(empty.bytes, 0);
  // An empty array with huge other extents has no bytes and is not an overflow.
  GPUKIT_EXPECT_OK(core().CreateArray(s, {DType::kFloat32, {0, int64_t{1} << 62}}));
}

TEST_F(CoreTest, RejectsArrayAboveMaxArrayBytes) {
  options_.limits.max_array_bytes = 4096;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_EXPECT_OK(core().CreateArray(s, {DType::kFloat32, {1024}}));  // exactly 4096 bytes
  absl::StatusOr<ArrayView> big = core().CreateArray(s, {DType::kFloat32, {1025}});
  EXPECT_THAT(big, StatusIs(kResourceExhausted, HasSubstr("exceeds limits.maxArraySize = 4096")));
  EXPECT_EQ(ReasonOf(big.status()), RejectReason::kArrayTooLarge);
  EXPECT_EQ(DeviceMemoryUsed(), 4096);
}

TEST_F(CoreTest, RejectsArrayWhenDeviceMemoryIsExhausted) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView first,
                              core().CreateArray(s, {DType::kUInt8, {kDeviceBytes * 3 / 4}}));
  absl::StatusOr<ArrayView> second = core().CreateArray(s, {DType::kUInt8, {kDeviceBytes / 2}});
  EXPECT_THAT(second, StatusIs(kResourceExhausted));
  EXPECT_EQ(ReasonOf(second.status()), RejectReason::kDeviceMemoryExhausted);
  GPUKIT_ASSERT_OK(core().FreeArray(s, first.handle));
  GPUKIT_EXPECT_OK(core().CreateArray(s, {DType::kUInt8, {kDeviceBytes / 2}}));
}

TEST_F(CoreTest, DeviceRefusingAnAdmittedArrayIsDeviceMemoryExhausted) {
  core(/*hooked=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  // Memory taken behind the core's back: its ledger admits, the device refuses.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId stolen, hooks().inner().Allocate(kDeviceBytes - 10));
  absl::StatusOr<ArrayView> array = core().CreateArray(s, {DType::kUInt8, {100}});
  EXPECT_THAT(array, StatusIs(kResourceExhausted));
  EXPECT_EQ(ReasonOf(array.status()), RejectReason::kDeviceMemoryExhausted);
  GPUKIT_ASSERT_OK(hooks().inner().Free(stolen));
  GPUKIT_EXPECT_OK(core().CreateArray(s, {DType::kUInt8, {kDeviceBytes}}));  // nothing leaked
}

TEST_F(CoreTest, RejectsArraysBeyondMaxArraysPerSession) {
  options_.limits.max_arrays_per_session = 2;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {1}, {1}));
  GPUKIT_ASSERT_OK(core().CreateArray(s, {DType::kFloat32, {1}}));
  absl::StatusOr<ArrayView> third = core().CreateArray(s, {DType::kFloat32, {1}});
  EXPECT_THAT(third, StatusIs(kResourceExhausted));
  EXPECT_EQ(ReasonOf(third.status()), RejectReason::kTooManyArrays);
  absl::StatusOr<ArrayView> result = core().RunOp(s, "add", {In(a), In(a)}, {});
  EXPECT_EQ(ReasonOf(result.status()), RejectReason::kTooManyArrays);
  // The limit is per session.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string other, Open("other"));
  GPUKIT_EXPECT_OK(core().CreateArray(other, {DType::kFloat32, {1}}));
}

TEST_F(CoreTest, FreeArrayReturnsItsBytesOnce) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView view, core().CreateArray(s, {DType::kInt32, {25}}));
  EXPECT_THAT(core().FreeArray(s, view.handle), IsOkAndHolds(100));
  EXPECT_EQ(DeviceMemoryUsed(), 0);
  EXPECT_THAT(core().FreeArray(s, view.handle), StatusIs(kNotFound));
  EXPECT_THAT(core().DescribeArray(s, view.handle), StatusIs(kNotFound));
}

// Memory a session can read without having written it never holds another session's bytes.
// The device here recycles a freed buffer into the next allocation of its size, as the
// daemon's memory pool (runtime/memory_pool.cc) hands freed blocks on whoever frees them.
TEST_F(CoreTest, NewArrayReadsAsZerosNotAnotherTenantsFreedBytes) {
  core(/*hooked=*/true);
  std::mutex mu;
  std::vector<BufferId> recycled;
  hooks().free_buffer = [&](BufferId buffer) {
    std::lock_guard<std::mutex> lock(mu);
    recycled.push_back(buffer);
    return absl::OkStatus();
  };
  hooks().allocate = [&](int64_t bytes) -> absl::StatusOr<BufferId> {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = recycled.begin(); it != recycled.end(); ++it) {
      if (hooks().inner().BufferBytes(*it).value_or(-1) == bytes) {
        const BufferId buffer = *it;
        recycled.erase(it);
        return buffer;
      }
    }
    return hooks().inner().Allocate(bytes);
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Open("a"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Open("b"));
  constexpr int64_t kCount = 4096;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string secret,
                              Upload<int32_t>(a, {kCount}, std::vector<int32_t>(kCount, 0x5eC7e7)));
  GPUKIT_ASSERT_OK(core().FreeArray(a, secret).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView view, core().CreateArray(b, {DType::kInt32, {kCount}}));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_THAT(recycled, ::testing::IsEmpty()) << "b's array did not get a's freed buffer";
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> values, Download<int32_t>(b, view.handle));
  EXPECT_EQ(std::count(values.begin(), values.end(), 0), kCount) << "a's bytes show in b's array";
  // An Upload that stops part way leaves the rest as zeros, not a's bytes either.
  GPUKIT_ASSERT_OK(core().FreeArray(b, view.handle).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(secret,
                              Upload<int32_t>(a, {kCount}, std::vector<int32_t>(kCount, -1)));
  GPUKIT_ASSERT_OK(core().FreeArray(a, secret).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(view, core().CreateArray(b, {DType::kInt32, {kCount}}));
  const int32_t head = 7;
  GPUKIT_ASSERT_OK(core().WriteArray(
      b, view.handle, 0, absl::MakeConstSpan(reinterpret_cast<const char*>(&head), sizeof(head))));
  GPUKIT_ASSERT_OK_AND_ASSIGN(values, Download<int32_t>(b, view.handle));
  EXPECT_EQ(values[0], head);
  EXPECT_EQ(std::count(values.begin() + 1, values.end(), 0), kCount - 1)
      << "a's bytes show past b's partial write";
  // The recycling ends with the test; what it kept goes back to the device.
  hooks().allocate = nullptr;
  hooks().free_buffer = nullptr;
  for (BufferId buffer : recycled) GPUKIT_EXPECT_OK(hooks().inner().Free(buffer));
}

// ---- WriteArray / ReadArray ----

TEST_F(CoreTest, WriteThenReadRoundTripsTheBytes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const std::vector<int32_t> values = {7, -1, 1 << 30, 0, 42};
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<int32_t>(s, {5}, values));
  EXPECT_THAT(Download<int32_t>(s, a), IsOkAndHolds(ElementsAreArray(values)));
}

TEST_F(CoreTest, WritesAndReadsAtOffsets) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<uint8_t>(s, {8}, {0, 1, 2, 3, 4, 5, 6, 7}));
  const char patch[3] = {'\x70', '\x71', '\x72'};
  GPUKIT_ASSERT_OK(core().WriteArray(s, a, 5, absl::MakeConstSpan(patch)));
  char middle[4] = {};
  GPUKIT_ASSERT_OK(core().ReadArray(s, a, 3, absl::MakeSpan(middle)));
  EXPECT_THAT(middle, ElementsAre(3, 4, 0x70, 0x71));
  EXPECT_THAT(Download<uint8_t>(s, a), IsOkAndHolds(ElementsAre(0, 1, 2, 3, 4, 0x70, 0x71, 0x72)));
}

struct RangeCase {
  std::string name;
  int64_t offset;
  size_t bytes;
};

class ArrayRangeTest : public CoreTest, public ::testing::WithParamInterface<RangeCase> {};

TEST_P(ArrayRangeTest, RangesOutsideTheArrayAreOutOfRange) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<uint8_t>(s, {16}, std::vector<uint8_t>(16, 9)));
  std::vector<char> buffer(GetParam().bytes, 'x');
  EXPECT_THAT(core().WriteArray(s, a, GetParam().offset, absl::MakeConstSpan(buffer)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outside array")));
  EXPECT_THAT(core().ReadArray(s, a, GetParam().offset, absl::MakeSpan(buffer)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("of 16 bytes")));
  EXPECT_THAT(Download<uint8_t>(s, a), IsOkAndHolds(std::vector<uint8_t>(16, 9)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ArrayRangeTest,
    ::testing::Values(RangeCase{"OneBytePastTheEnd", 0, 17}, RangeCase{"StraddlesTheEnd", 12, 8},
                      RangeCase{"StartsAtTheEnd", 16, 1}, RangeCase{"StartsPastTheEnd", 17, 0},
                      RangeCase{"NegativeOffset", -1, 1},
                      RangeCase{"HugeOffset", std::numeric_limits<int64_t>::max(), 1}),
    [](const ::testing::TestParamInfo<RangeCase>& info) { return info.param.name; });

TEST_F(CoreTest, EmptyReadsAndWritesUpToTheEndAreAllowed) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<uint8_t>(s, {4}, {1, 2, 3, 4}));
  GPUKIT_EXPECT_OK(core().WriteArray(s, a, 4, {}));
  GPUKIT_EXPECT_OK(core().ReadArray(s, a, 4, {}));
  GPUKIT_EXPECT_OK(core().WriteArray(s, a, 0, {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView empty, core().CreateArray(s, {DType::kFloat32, {0}}));
  GPUKIT_EXPECT_OK(core().ReadArray(s, empty.handle, 0, {}));
}

// ---- RunOp: hand-computed values ----

TEST_F(CoreTest, AddBroadcastsARowOverAMatrix) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {2, 3}, {1, 2, 3, 4, 5, 6}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Upload<float>(s, {3}, {10, 20, 30}));
  EXPECT_THAT(RunAndRead<float>(s, "add", {In(a), In(b)}, {}, {2, 3}),
              IsOkAndHolds(ElementsAre(11, 22, 33, 14, 25, 36)));
}

TEST_F(CoreTest, AddBroadcastsAColumnAgainstARow) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string col, Upload<float>(s, {3, 1}, {1, 2, 3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string row, Upload<float>(s, {1, 2}, {10, 20}));
  EXPECT_THAT(RunAndRead<float>(s, "add", {In(col), In(row)}, {}, {3, 2}),
              IsOkAndHolds(ElementsAre(11, 21, 12, 22, 13, 23)));
}

TEST_F(CoreTest, ArithmeticWithScalarsOnEitherSide) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {3}, {1, 2, 4}));
  EXPECT_THAT(RunAndRead<float>(s, "sub", {FloatScalar(10), In(a)}, {}, {3}),
              IsOkAndHolds(ElementsAre(9, 8, 6)));
  EXPECT_THAT(RunAndRead<float>(s, "sub", {In(a), IntScalar(1)}, {}, {3}),
              IsOkAndHolds(ElementsAre(0, 1, 3)));
  EXPECT_THAT(RunAndRead<float>(s, "mul", {In(a), FloatScalar(0.5)}, {}, {3}),
              IsOkAndHolds(ElementsAre(0.5, 1, 2)));
  EXPECT_THAT(RunAndRead<float>(s, "div", {IntScalar(8), In(a)}, {}, {3}),
              IsOkAndHolds(ElementsAre(8, 4, 2)));
}

TEST_F(CoreTest, ArithmeticOnAZeroDimArray) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string scalar, Upload<float>(s, {}, {3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string v, Upload<float>(s, {2}, {1, 2}));
  EXPECT_THAT(RunAndRead<float>(s, "mul", {In(scalar), In(v)}, {}, {2}),
              IsOkAndHolds(ElementsAre(3, 6)));
  EXPECT_THAT(RunAndRead<float>(s, "add", {In(scalar), IntScalar(4)}, {}, {}),
              IsOkAndHolds(ElementsAre(7)));
}

TEST_F(CoreTest, IntegerArithmeticPromotesAndWraps) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string small, Upload<uint8_t>(s, {3}, {200, 255, 1}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string wide, Upload<int32_t>(s, {3}, {100, 1, -2}));
  // uint8 with int32 computes in int32: no uint8 wrap.
  EXPECT_THAT(RunAndRead<int32_t>(s, "add", {In(small), In(wide)}, {}, {3}),
              IsOkAndHolds(ElementsAre(300, 256, -1)));
  // Integer arithmetic wraps modulo 2^32, as NumPy's does.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string max,
                              Upload<int32_t>(s, {2}, {std::numeric_limits<int32_t>::max(), -7}));
  EXPECT_THAT(RunAndRead<int32_t>(s, "add", {In(max), IntScalar(1)}, {}, {2}),
              IsOkAndHolds(ElementsAre(std::numeric_limits<int32_t>::min(), -6)));
  EXPECT_THAT(RunAndRead<int32_t>(s, "mul", {In(wide), IntScalar(-3)}, {}, {3}),
              IsOkAndHolds(ElementsAre(-300, -3, 6)));
}

TEST_F(CoreTest, DivisionOfIntegersIsTrueDivisionInFloat32) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<int32_t>(s, {4}, {7, -7, 1, 0}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Upload<int32_t>(s, {4}, {2, 2, 0, 0}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> q,
                              RunAndRead<float>(s, "div", {In(a), In(b)}, {}, {4}));
  EXPECT_EQ(q[0], 3.5f);
  EXPECT_EQ(q[1], -3.5f);
  EXPECT_EQ(q[2], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(q[3]));
}

TEST_F(CoreTest, IntegerArrayWithAFloatScalarComputesInFloat32) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<int32_t>(s, {3}, {1, 2, 3}));
  EXPECT_THAT(RunAndRead<float>(s, "add", {In(a), FloatScalar(0.25)}, {}, {3}),
              IsOkAndHolds(ElementsAre(1.25, 2.25, 3.25)));
}

TEST_F(CoreTest, HalfPrecisionArithmeticRoundsToHalf) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  // float16 1.5 = 0x3e00, 2.0 = 0x4000; 1.5 * 2.0 = 3.0 = 0x4200; 1/3 rounds to 0x3555.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::string a,
      Upload<kernels::Float16>(s, {2}, {kernels::Float16{0x3e00}, kernels::Float16{0x3c00}}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<kernels::Float16> product,
      RunAndRead<kernels::Float16>(s, "mul", {In(a), FloatScalar(2)}, {}, {2}));
  EXPECT_EQ(product[0].bits, 0x4200);
  EXPECT_EQ(product[1].bits, 0x4000);
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<kernels::Float16> third,
      RunAndRead<kernels::Float16>(s, "div", {In(a), IntScalar(3)}, {}, {2}));
  EXPECT_EQ(third[1].bits, 0x3555);
  // float16 with bfloat16 computes in float32: 1.5 + 1.0 (bf16 0x3f80) = 2.5 exactly.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b,
                              Upload<kernels::BFloat16>(s, {1}, {kernels::BFloat16{0x3f80}}));
  EXPECT_THAT(RunAndRead<float>(s, "add", {In(a), In(b)}, {}, {2}),
              IsOkAndHolds(ElementsAre(2.5f, 2.0f)));
}

TEST_F(CoreTest, MatmulOfTwoMatrices) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {2, 3}, {1, 2, 3, 4, 5, 6}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Upload<float>(s, {3, 2}, {7, 8, 9, 10, 11, 12}));
  EXPECT_THAT(RunAndRead<float>(s, "matmul", {In(a), In(b)}, {}, {2, 2}),
              IsOkAndHolds(ElementsAre(58, 64, 139, 154)));
}

TEST_F(CoreTest, BatchedMatmulBroadcastsTheRightOperand) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  // Two 2x2 matrices times one 2x2 matrix: [[1,2],[3,4]] and [[0,1],[1,0]] times [[5,6],[7,8]].
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {2, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Upload<float>(s, {2, 2}, {5, 6, 7, 8}));
  EXPECT_THAT(RunAndRead<float>(s, "matmul", {In(a), In(b)}, {}, {2, 2, 2}),
              IsOkAndHolds(ElementsAre(19, 22, 43, 50, 7, 8, 5, 6)));
}

TEST_F(CoreTest, IntegerMatmulIsExact) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<int32_t>(s, {1, 3}, {1, -2, 3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Upload<int32_t>(s, {3, 1}, {100000, 10, 1}));
  EXPECT_THAT(RunAndRead<int32_t>(s, "matmul", {In(a), In(b)}, {}, {1, 1}),
              IsOkAndHolds(ElementsAre(99983)));
}

TEST_F(CoreTest, ReductionsOverEverythingAndAlongEachAxis) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x, Upload<float>(s, {2, 3}, {1, -2, 3, 4, 5, -6}));
  EXPECT_THAT(RunAndRead<float>(s, "sum", {In(x)}, {}, {}), IsOkAndHolds(ElementsAre(5)));
  EXPECT_THAT(RunAndRead<float>(s, "sum", {In(x)}, {{"keepdims", true}}, {1, 1}),
              IsOkAndHolds(ElementsAre(5)));
  EXPECT_THAT(RunAndRead<float>(s, "sum", {In(x)}, {{"axis", int64_t{0}}}, {3}),
              IsOkAndHolds(ElementsAre(5, 3, -3)));
  EXPECT_THAT(
      RunAndRead<float>(s, "sum", {In(x)}, {{"axis", int64_t{1}}, {"keepdims", true}}, {2, 1}),
      IsOkAndHolds(ElementsAre(2, 3)));
  EXPECT_THAT(RunAndRead<float>(s, "mean", {In(x)}, {{"axis", int64_t{-1}}}, {2}),
              IsOkAndHolds(ElementsAre(::testing::FloatEq(2.0f / 3), 1)));
  EXPECT_THAT(
      RunAndRead<float>(s, "max", {In(x)}, {{"axis", int64_t{0}}, {"keepdims", true}}, {1, 3}),
      IsOkAndHolds(ElementsAre(4, 5, 3)));
  EXPECT_THAT(RunAndRead<float>(s, "min", {In(x)}, {{"axis", int64_t{1}}}, {2}),
              IsOkAndHolds(ElementsAre(-2, -6)));
  EXPECT_THAT(RunAndRead<float>(s, "max", {In(x)}, {}, {}), IsOkAndHolds(ElementsAre(5)));
  EXPECT_THAT(RunAndRead<float>(s, "min", {In(x)}, {}, {}), IsOkAndHolds(ElementsAre(-6)));
}

TEST_F(CoreTest, IntegerSumsIntoInt64AndMeanIntoFloat32) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x, Upload<int32_t>(s, {3}, {2000000000, 2000000000, 1}));
  EXPECT_THAT(RunAndRead<int64_t>(s, "sum", {In(x)}, {}, {}),
              IsOkAndHolds(ElementsAre(int64_t{4000000001})));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload<uint8_t>(s, {2, 2}, {1, 2, 255, 255}));
  EXPECT_THAT(RunAndRead<float>(s, "mean", {In(y)}, {{"axis", int64_t{1}}}, {2}),
              IsOkAndHolds(ElementsAre(1.5f, 255.0f)));
  EXPECT_THAT(RunAndRead<int64_t>(s, "sum", {In(y)}, {{"axis", int64_t{0}}}, {2}),
              IsOkAndHolds(ElementsAre(256, 257)));
  EXPECT_THAT(RunAndRead<uint8_t>(s, "max", {In(y)}, {}, {}), IsOkAndHolds(ElementsAre(255)));
}

TEST_F(CoreTest, MaxAndMinPropagateNaN) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x, Upload<float>(s, {2, 2}, {1, nan, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> hi,
                              RunAndRead<float>(s, "max", {In(x)}, {{"axis", int64_t{1}}}, {2}));
  EXPECT_TRUE(std::isnan(hi[0]));
  EXPECT_EQ(hi[1], 4);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> lo, RunAndRead<float>(s, "min", {In(x)}, {}, {}));
  EXPECT_TRUE(std::isnan(lo[0]));
}

TEST_F(CoreTest, AstypeTruncatesSaturatesAndRounds) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x,
                              Upload<float>(s, {6}, {1.9f, -1.9f, 300.0f, -5.5f, 3e9f, nan}));
  EXPECT_THAT(RunAndRead<int32_t>(s, "astype", {In(x)}, {{"dtype", DType::kInt32}}, {6}),
              IsOkAndHolds(ElementsAre(1, -1, 300, -5, std::numeric_limits<int32_t>::max(), 0)));
  EXPECT_THAT(RunAndRead<uint8_t>(s, "astype", {In(x)}, {{"dtype", DType::kUInt8}}, {6}),
              IsOkAndHolds(ElementsAre(1, 0, 255, 0, 255, 0)));
  // float16: 1.0 = 0x3c00, 0.1 rounds to 0x2e66, 65504 is the largest finite, 1e6 is inf.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string h, Upload<float>(s, {4}, {1.0f, 0.1f, 65504.0f, 1e6f}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<kernels::Float16> half,
      RunAndRead<kernels::Float16>(s, "astype", {In(h)}, {{"dtype", DType::kFloat16}}, {4}));
  EXPECT_EQ(half[0].bits, 0x3c00);
  EXPECT_EQ(half[1].bits, 0x2e66);
  EXPECT_EQ(half[2].bits, 0x7bff);
  EXPECT_EQ(half[3].bits, 0x7c00);
  // Integers to float and between integer widths.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string i, Upload<int32_t>(s, {3}, {-1, 256, 16777217}));
  EXPECT_THAT(RunAndRead<float>(s, "astype", {In(i)}, {{"dtype", DType::kFloat32}}, {3}),
              IsOkAndHolds(ElementsAre(-1.0f, 256.0f, 16777216.0f)));
  EXPECT_THAT(RunAndRead<int64_t>(s, "astype", {In(i)}, {{"dtype", DType::kInt64}}, {3}),
              IsOkAndHolds(ElementsAre(-1, 256, 16777217)));
  EXPECT_THAT(RunAndRead<uint8_t>(s, "astype", {In(i)}, {{"dtype", DType::kUInt8}}, {3}),
              IsOkAndHolds(ElementsAre(255, 0, 1)));  // integer to integer wraps
}

TEST_F(CoreTest, ReshapeKeepsTheElementsAndInfersMinusOne) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x, Upload<int64_t>(s, {2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_THAT(
      RunAndRead<int64_t>(s, "reshape", {In(x)}, {{"shape", std::vector<int64_t>{3, -1}}}, {3, 2}),
      IsOkAndHolds(ElementsAre(1, 2, 3, 4, 5, 6)));
  EXPECT_THAT(
      RunAndRead<int64_t>(s, "reshape", {In(x)}, {{"shape", std::vector<int64_t>{-1}}}, {6}),
      IsOkAndHolds(ElementsAre(1, 2, 3, 4, 5, 6)));
  EXPECT_THAT(core().RunOp(s, "reshape", {In(x)}, {{"shape", std::vector<int64_t>{4, -1}}}),
              StatusIs(kInvalidArgument, HasSubstr("cannot reshape [2, 3]")));
}

TEST_F(CoreTest, TransposeReversesAxesOrFollowsPerm) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string x, Upload<float>(s, {2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_THAT(RunAndRead<float>(s, "transpose", {In(x)}, {}, {3, 2}),
              IsOkAndHolds(ElementsAre(1, 4, 2, 5, 3, 6)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string y, Upload<float>(s, {1, 2, 2}, {1, 2, 3, 4}));
  EXPECT_THAT(RunAndRead<float>(s, "transpose", {In(y)}, {{"perm", std::vector<int64_t>{2, 0, 1}}},
                                {2, 1, 2}),
              IsOkAndHolds(ElementsAre(1, 3, 2, 4)));
}

TEST_F(CoreTest, OpResultsAreArraysOfTheSession) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {4}, {1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out, core().RunOp(s, "add", {In(a), In(a)}, {}));
  EXPECT_THAT(out.handle, StartsWith("a-"));
  EXPECT_EQ(out.bytes, 16);
  EXPECT_EQ(core().array_count(), 2);
  EXPECT_EQ(DeviceMemoryUsed(), 32);
  // Results feed further ops and are freed like any array.
  EXPECT_THAT(RunAndRead<float>(s, "sum", {In(out.handle)}, {}, {}), IsOkAndHolds(ElementsAre(20)));
  GPUKIT_EXPECT_OK(core().FreeArray(s, out.handle));
}

// ---- RunOp: errors ----

TEST_F(CoreTest, RunOpErrorsAreInvalidArgumentAndAllocateNothing) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {2, 3}, {1, 2, 3, 4, 5, 6}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string b, Upload<float>(s, {2}, {1, 2}));
  const int64_t used = DeviceMemoryUsed();
  EXPECT_THAT(core().RunOp(s, "frobnicate", {In(a)}, {}),
              StatusIs(kInvalidArgument, HasSubstr("unknown op \"frobnicate\"")));
  EXPECT_THAT(core().RunOp(s, "add", {In(a)}, {}),
              StatusIs(kInvalidArgument, HasSubstr("takes 2 inputs, got 1")));
  EXPECT_THAT(core().RunOp(s, "add", {In(a), In(b)}, {}),
              StatusIs(kInvalidArgument, HasSubstr("cannot be broadcast")));
  EXPECT_THAT(core().RunOp(s, "matmul", {In(a), In(a)}, {}),
              StatusIs(kInvalidArgument, HasSubstr("inner dimensions differ")));
  EXPECT_THAT(core().RunOp(s, "sum", {In(a)}, {{"axis", int64_t{2}}}),
              StatusIs(kInvalidArgument, HasSubstr("out of range")));
  EXPECT_THAT(core().RunOp(s, "sum", {In(a)}, {{"axes", int64_t{0}}}),
              StatusIs(kInvalidArgument, HasSubstr("no attribute \"axes\"")));
  EXPECT_THAT(core().RunOp(s, "add", {IntScalar(1), IntScalar(2)}, {}),
              StatusIs(kInvalidArgument, HasSubstr("two scalars")));
  EXPECT_THAT(core().RunOp(s, "add", {In(a), In("a-nope")}, {}),
              StatusIs(kNotFound, HasSubstr("inputs[1]: array handle \"a-nope\" not found")));
  EXPECT_EQ(DeviceMemoryUsed(), used);
  EXPECT_EQ(core().array_count(), 2);
}

TEST_F(CoreTest, OpResultAboveMaxArrayBytesIsRefusedWithTheReason) {
  options_.limits.max_array_bytes = 64 * 64 * 4;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string col,
                              Upload<float>(s, {65, 1}, std::vector<float>(65, 1)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string row,
                              Upload<float>(s, {1, 64}, std::vector<float>(64, 1)));
  absl::StatusOr<ArrayView> outer = core().RunOp(s, "matmul", {In(col), In(row)}, {});
  EXPECT_THAT(outer, StatusIs(kResourceExhausted));
  EXPECT_EQ(ReasonOf(outer.status()), RejectReason::kArrayTooLarge);
  EXPECT_EQ(core().array_count(), 2);
}

TEST_F(CoreTest, OpOnAFreedInputIsNotFound) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {2}, {1, 2}));
  GPUKIT_ASSERT_OK(core().FreeArray(s, a));
  EXPECT_THAT(core().RunOp(s, "add", {FloatScalar(1), In(a)}, {}),
              StatusIs(kNotFound, HasSubstr("inputs[1]")));
  EXPECT_EQ(DeviceMemoryUsed(), 0);
}

TEST_F(CoreTest, InputFreedWhileItsOpIsLaunchedStaysValidUntilTheOpHasRun) {
  core(/*hooked=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {4}, {1, 2, 3, 4}));
  absl::StatusOr<int64_t> freed = absl::UnknownError("hook did not run");
  hooks().before_run_op = [&](const OpLaunch&) {
    freed = core().FreeArray(s, a);  // the client frees the input mid-request
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out, core().RunOp(s, "mul", {In(a), In(a)}, {}));
  hooks().before_run_op = nullptr;
  EXPECT_THAT(freed, IsOkAndHolds(16));
  EXPECT_THAT(Download<float>(s, out.handle), IsOkAndHolds(ElementsAre(1, 4, 9, 16)));
  EXPECT_THAT(core().DescribeArray(s, a), StatusIs(kNotFound));
  EXPECT_EQ(DeviceMemoryUsed(), 16);  // only the result: the input went once the op let go
}

TEST_F(CoreTest, OpTheDeviceHasNoKernelsForIsRefusedBeforeItAllocatesOrQueues) {
  core(/*hooked=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {4}, {1, 2, 3, 4}));
  hooks().supports_op = [](absl::string_view op) { return op != "sum"; };
  const int64_t before = DeviceMemoryUsed();
  EXPECT_THAT(core().RunOp(s, "sum", {In(a)}, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no kernels for it")));
  EXPECT_EQ(DeviceMemoryUsed(), before);
  EXPECT_EQ(core().scheduler().ListTasks({}).size(), 2u) << "only the zeroing and the upload";
  GPUKIT_EXPECT_OK(core().RunOp(s, "add", {In(a), In(a)}, {}).status());
  hooks().supports_op = nullptr;
}

TEST_F(CoreTest, SessionClosedWhileItsOpRunsLeavesNothingBehind) {
  core(/*hooked=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {4}, {1, 2, 3, 4}));
  hooks().before_run_op = [&](const OpLaunch&) { EXPECT_THAT(core().CloseSession(s), IsOk()); };
  EXPECT_THAT(core().RunOp(s, "add", {In(a), FloatScalar(1)}, {}), StatusIs(kNotFound));
  hooks().before_run_op = nullptr;
  EXPECT_EQ(DeviceMemoryUsed(), 0);
  EXPECT_EQ(core().session_count(), 0);
}

TEST_F(CoreTest, LeaseLapsingWhileAnOpRunsLeavesNothingBehind) {
  core(/*hooked=*/true);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {4}, {1, 2, 3, 4}));
  hooks().before_run_op = [&](const OpLaunch&) {
    clock_.Advance(absl::Minutes(1));
    EXPECT_EQ(core().ExpireLeases(), 1);
  };
  EXPECT_THAT(core().RunOp(s, "sum", {In(a)}, {}), StatusIs(kNotFound));
  hooks().before_run_op = nullptr;
  EXPECT_EQ(DeviceMemoryUsed(), 0);
}

// ---- Lease expiry ----

TEST_F(CoreTest, ExpiredButNotReapedSessionIsNotFound) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {1}, {1}));
  clock_.Advance(absl::Seconds(31));
  EXPECT_THAT(core().DescribeArray(s, a), StatusIs(kNotFound));
  EXPECT_THAT(core().KeepAlive(s), StatusIs(kNotFound));
  EXPECT_EQ(core().session_count(), 1);  // not reaped yet
}

TEST_F(CoreTest, LeaseExpiryFreesEverythingTheSessionsHeld) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string first, Open("first"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string second, Open("second"));
  for (const std::string& s : {first, second}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {8, 8}, std::vector<float>(64, 2)));
    GPUKIT_ASSERT_OK(core().RunOp(s, "matmul", {In(a), In(a)}, {}));
    GPUKIT_ASSERT_OK(core().RunOp(s, "sum", {In(a)}, {{"axis", int64_t{0}}}));
    GPUKIT_ASSERT_OK(core().CreateArray(s, {DType::kUInt8, {1000}}));
  }
  ASSERT_GT(DeviceMemoryUsed(), 0);
  EXPECT_EQ(core().array_count(), 8);

  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(core().ExpireLeases(), 0);  // exactly at the deadline: not yet
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(core().ExpireLeases(), 2);

  EXPECT_EQ(core().session_count(), 0);
  EXPECT_EQ(core().array_count(), 0);
  EXPECT_EQ(core().ListDevices()[0].memory_used_bytes, 0);
  // The ledger's reservations are back to zero too: a new session may take the whole device.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string fresh, Open("fresh"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView all,
                              core().CreateArray(fresh, {DType::kUInt8, {kDeviceBytes}}));
  EXPECT_EQ(all.bytes, kDeviceBytes);
  EXPECT_THAT(core().CreateArray(fresh, {DType::kUInt8, {1}}), StatusIs(kResourceExhausted));
}

TEST_F(CoreTest, CloseAllSessionsFreesEverything) {
  for (const char* tenant : {"a", "b"}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open(tenant));
    GPUKIT_ASSERT_OK(core().CreateArray(s, {DType::kFloat32, {100}}));
  }
  core().CloseAllSessions();
  EXPECT_EQ(core().session_count(), 0);
  EXPECT_EQ(DeviceMemoryUsed(), 0);
}

TEST_F(CoreTest, DestroyingTheCoreWithOpenSessionsFreesTheirArrays) {
  // Checked by the leak checker under GPUKIT_SANITIZE; must not crash without it.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Upload<float>(s, {3}, {1, 2, 3}));
  GPUKIT_ASSERT_OK(core().RunOp(s, "add", {In(a), In(a)}, {}));
  core_.reset();
}

// ---- Concurrency ----

TEST_F(CoreTest, ConcurrentRequestsGetTheirOwnResults) {
  // Threads 0-1 share one session, threads 2-3 have one each; sessions share the 2 streams.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string shared, Open("shared"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string own2, Open("own-2"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string own3, Open("own-3"));
  const std::string sessions[4] = {shared, shared, own2, own3};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 25; ++round) {
        std::vector<float> values(64);
        for (int i = 0; i < 64; ++i) values[i] = static_cast<float>(t * 1000 + round * 64 + i);
        absl::StatusOr<std::string> a = Upload<float>(sessions[t], {64}, values);
        if (!a.ok()) {
          failures.fetch_add(1);
          continue;
        }
        absl::StatusOr<ArrayView> doubled =
            core().RunOp(sessions[t], "mul", {In(*a), IntScalar(2)}, {});
        absl::StatusOr<std::vector<float>> out =
            doubled.ok() ? Download<float>(sessions[t], doubled->handle)
                         : absl::StatusOr<std::vector<float>>(doubled.status());
        bool ok = out.ok();
        for (int i = 0; ok && i < 64; ++i) ok = (*out)[i] == 2 * values[i];
        ok = ok && core().FreeArray(sessions[t], *a).ok() &&
             core().FreeArray(sessions[t], doubled->handle).ok();
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(core().array_count(), 0);
  EXPECT_EQ(DeviceMemoryUsed(), 0);
}

// ---- RunOp against a float64 reference on seeded random inputs ----

struct BinaryRefCase {
  std::string name;
  std::string op;
  std::optional<Shape> a;  // nullopt: a scalar operand
  std::optional<Shape> b;
};

class BinaryReferenceTest : public CoreTest, public ::testing::WithParamInterface<BinaryRefCase> {};

TEST_P(BinaryReferenceTest, MatchesFloat64Reference) {
  const BinaryRefCase& c = GetParam();
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const Shape a_shape = c.a.value_or(Shape{}), b_shape = c.b.value_or(Shape{});
  const std::vector<float> a = RandomNonZero(rng, NumElements(a_shape));
  const std::vector<float> b = RandomNonZero(rng, NumElements(b_shape));
  OpInput a_in, b_in;
  if (c.a.has_value()) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string h, Upload<float>(s, a_shape, a));
    a_in = In(h);
  } else {
    a_in = FloatScalar(a[0]);
  }
  if (c.b.has_value()) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string h, Upload<float>(s, b_shape, b));
    b_in = In(h);
  } else {
    b_in = FloatScalar(b[0]);
  }
  const Shape out_shape = BroadcastShape(a_shape, b_shape);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                              RunAndRead<float>(s, c.op, {a_in, b_in}, {}, out_shape));
  ASSERT_EQ(static_cast<int64_t>(got.size()), NumElements(out_shape));
  for (int64_t i = 0; i < NumElements(out_shape); ++i) {
    const std::vector<int64_t> index = Unravel(i, out_shape);
    const double want =
        Apply(c.op, a[BroadcastSource(index, a_shape)], b[BroadcastSource(index, b_shape)]);
    ASSERT_TRUE(Near(got[i], want, 1e-6, 1e-30)) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BinaryReferenceTest,
    ::testing::Values(BinaryRefCase{"AddSameShape", "add", Shape{4, 5}, Shape{4, 5}},
                      BinaryRefCase{"SubRowBroadcast", "sub", Shape{6, 7}, Shape{7}},
                      BinaryRefCase{"MulColumnTimesRow", "mul", Shape{5, 1}, Shape{1, 6}},
                      BinaryRefCase{"DivRank3Broadcast", "div", Shape{2, 1, 4}, Shape{3, 1}},
                      BinaryRefCase{"AddLeadingOnes", "add", Shape{1, 1, 3}, Shape{2, 4, 3}},
                      BinaryRefCase{"SubScalarRight", "sub", Shape{3, 4}, std::nullopt},
                      BinaryRefCase{"DivScalarLeft", "div", std::nullopt, Shape{9}},
                      BinaryRefCase{"MulZeroDimArray", "mul", Shape{}, Shape{2, 3}},
                      BinaryRefCase{"DivBothBroadcast", "div", Shape{4, 1, 5}, Shape{1, 3, 1}}),
    [](const ::testing::TestParamInfo<BinaryRefCase>& info) { return info.param.name; });

TEST_F(CoreTest, IntegerArithmeticMatchesInt64ReferenceOnRandomInputs) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const Shape a_shape = {3, 4}, b_shape = {4};
  const std::vector<int32_t> a = RandomNonZeroInts(rng, 12), b = RandomNonZeroInts(rng, 4);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string ha, Upload<int32_t>(s, a_shape, a));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hb, Upload<int32_t>(s, b_shape, b));
  for (absl::string_view op : {"add", "sub", "mul"}) {
    SCOPED_TRACE(op);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> got,
                                RunAndRead<int32_t>(s, op, {In(ha), In(hb)}, {}, a_shape));
    for (int64_t i = 0; i < 12; ++i) {
      const int64_t x = a[i], y = b[i % 4];
      const int64_t want = op == "add" ? x + y : op == "sub" ? x - y : x * y;
      ASSERT_EQ(got[i], want) << "element " << i;
    }
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> quotient,
                              RunAndRead<float>(s, "div", {In(ha), In(hb)}, {}, a_shape));
  for (int64_t i = 0; i < 12; ++i) {
    ASSERT_TRUE(Near(quotient[i], static_cast<double>(a[i]) / b[i % 4], 1e-6, 0)) << i;
  }
}

struct MatmulRefCase {
  std::string name;
  Shape a;
  Shape b;
};

class MatmulReferenceTest : public CoreTest, public ::testing::WithParamInterface<MatmulRefCase> {};

TEST_P(MatmulReferenceTest, MatchesFloat64Reference) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  const Shape& a_shape = GetParam().a;
  const Shape& b_shape = GetParam().b;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const std::vector<float> a = RandomNonZero(rng, NumElements(a_shape));
  const std::vector<float> b = RandomNonZero(rng, NumElements(b_shape));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string ha, Upload<float>(s, a_shape, a));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hb, Upload<float>(s, b_shape, b));

  const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2);
  const Shape b_batch(b_shape.begin(), b_shape.end() - 2);
  const Shape batch = BroadcastShape(a_batch, b_batch);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                              RunAndRead<float>(s, "matmul", {In(ha), In(hb)}, {}, out_shape));
  for (int64_t t = 0; t < NumElements(batch); ++t) {
    const std::vector<int64_t> index = Unravel(t, batch);
    const int64_t ta = BroadcastSource(index, a_batch), tb = BroadcastSource(index, b_batch);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0, magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double term =
              static_cast<double>(a[(ta * m + i) * k + p]) * b[(tb * k + p) * n + j];
          want += term;
          magnitude += std::abs(term);
        }
        ASSERT_TRUE(Near(got[(t * m + i) * n + j], want, 1e-6, 1e-12 * magnitude))
            << "batch " << t << " row " << i << " column " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, MatmulReferenceTest,
    ::testing::Values(MatmulRefCase{"Square", {8, 8}, {8, 8}},
                      MatmulRefCase{"Rectangular", {5, 17}, {17, 3}},
                      MatmulRefCase{"OuterProduct", {6, 1}, {1, 7}},
                      MatmulRefCase{"Batched", {3, 4, 5}, {3, 5, 2}},
                      MatmulRefCase{"BatchOnLeftOnly", {2, 3, 4}, {4, 6}},
                      MatmulRefCase{"BatchOnRightOnly", {4, 6}, {2, 6, 3}},
                      MatmulRefCase{"BroadcastBatches", {2, 1, 3, 4}, {5, 4, 2}}),
    [](const ::testing::TestParamInfo<MatmulRefCase>& info) { return info.param.name; });

// (op, axis or kAllAxes, keepdims) over a random [3, 4, 5] array.
constexpr int64_t kAllAxes = 99;
using ReduceParam = std::tuple<std::string, int64_t, bool>;

class ReduceReferenceTest : public CoreTest, public ::testing::WithParamInterface<ReduceParam> {};

TEST_P(ReduceReferenceTest, MatchesFloat64Reference) {
  const auto& [op, axis, keepdims] = GetParam();
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  const Shape in_shape = {3, 4, 5};
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const std::vector<float> x = RandomNonZero(rng, 60);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hx, Upload<float>(s, in_shape, x));

  AttrMap attrs;
  if (keepdims) attrs["keepdims"] = true;
  std::optional<int> ax;
  if (axis != kAllAxes) {
    attrs["axis"] = axis;
    ax = static_cast<int>(axis < 0 ? axis + 3 : axis);
  }
  Shape out_shape;
  for (int i = 0; i < 3; ++i) {
    const bool reduced = !ax.has_value() || *ax == i;
    if (!reduced) out_shape.push_back(in_shape[i]);
    if (reduced && keepdims) out_shape.push_back(1);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                              RunAndRead<float>(s, op, {In(hx)}, attrs, out_shape));

  // Reference: group every input element by the output element it reduces into.
  const int64_t out_count = NumElements(out_shape);
  std::vector<std::vector<double>> groups(static_cast<size_t>(out_count));
  for (int64_t i = 0; i < 60; ++i) {
    std::vector<int64_t> index = Unravel(i, in_shape);
    int64_t o = 0;
    if (ax.has_value()) {
      index.erase(index.begin() + *ax);
      o = Ravel(index, Shape{in_shape[*ax == 0 ? 1 : 0], in_shape[*ax == 2 ? 1 : 2]});
    }
    groups[o].push_back(x[i]);
  }
  for (int64_t o = 0; o < out_count; ++o) {
    const std::vector<double>& g = groups[o];
    double want = 0, magnitude = 0;
    for (double v : g) magnitude += std::abs(v);
    if (op == "sum" || op == "mean") {
      want = std::accumulate(g.begin(), g.end(), 0.0);
      if (op == "mean") want /= static_cast<double>(g.size());
      ASSERT_TRUE(Near(got[o], want, 1e-6, 1e-12 * magnitude)) << "output " << o;
    } else {
      want = op == "max" ? *std::max_element(g.begin(), g.end())
                         : *std::min_element(g.begin(), g.end());
      ASSERT_EQ(got[o], want) << "output " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllAxes, ReduceReferenceTest,
                         ::testing::Combine(::testing::Values("sum", "mean", "max", "min"),
                                            ::testing::Values(kAllAxes, 0, 1, 2, -1),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<ReduceParam>& info) {
                           const int64_t axis = std::get<1>(info.param);
                           return absl::StrCat(
                               std::get<0>(info.param), "_",
                               axis == kAllAxes
                                   ? std::string("AllAxes")
                                   : absl::StrCat("Axis", axis < 0 ? "Minus" : "", std::abs(axis)),
                               std::get<2>(info.param) ? "_Keepdims" : "");
                         });

class TransposeReferenceTest : public CoreTest,
                               public ::testing::WithParamInterface<std::vector<int64_t>> {};

TEST_P(TransposeReferenceTest, MovesEveryElementWherePermSays) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  const Shape in_shape = {2, 3, 4};
  const std::vector<int64_t>& perm = GetParam();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const std::vector<float> x = RandomNonZero(rng, 24);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hx, Upload<float>(s, in_shape, x));
  Shape out_shape(3);
  for (int j = 0; j < 3; ++j) out_shape[j] = in_shape[(perm[j] + 3) % 3];
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<float> got,
      RunAndRead<float>(s, "transpose", {In(hx)}, {{"perm", perm}}, out_shape));
  for (int64_t o = 0; o < 24; ++o) {
    const std::vector<int64_t> out_index = Unravel(o, out_shape);
    std::vector<int64_t> in_index(3);
    for (int j = 0; j < 3; ++j) in_index[(perm[j] + 3) % 3] = out_index[j];
    ASSERT_EQ(got[o], x[Ravel(in_index, in_shape)]) << "output " << o;
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryPermutation, TransposeReferenceTest,
    ::testing::Values(std::vector<int64_t>{0, 1, 2}, std::vector<int64_t>{0, 2, 1},
                      std::vector<int64_t>{1, 0, 2}, std::vector<int64_t>{1, 2, 0},
                      std::vector<int64_t>{2, 0, 1}, std::vector<int64_t>{2, 1, 0},
                      std::vector<int64_t>{-1, 0, -2}));

TEST_F(CoreTest, ReshapeWithMinusOneKeepsRandomDataInOrder) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const std::vector<float> x = RandomNonZero(rng, 24);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hx, Upload<float>(s, {2, 3, 4}, x));
  for (const auto& [attr, shape] : std::vector<std::pair<std::vector<int64_t>, Shape>>{
           {{4, -1}, {4, 6}}, {{-1, 2, 3}, {4, 2, 3}}, {{24}, {24}}, {{1, -1, 1}, {1, 24, 1}}}) {
    SCOPED_TRACE(ShapeToString(attr));
    EXPECT_THAT(RunAndRead<float>(s, "reshape", {In(hx)}, {{"shape", attr}}, shape),
                IsOkAndHolds(ElementsAreArray(x)));
  }
}

TEST_F(CoreTest, AstypeToFloat32MatchesTheRandomIntegers) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open());
  const std::vector<int32_t> x = RandomNonZeroInts(rng, 32);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hx, Upload<int32_t>(s, {32}, x));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<float> got,
      RunAndRead<float>(s, "astype", {In(hx)}, {{"dtype", DType::kFloat32}}, {32}));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(x[i])) << i;
  // And back: float32 to int32 truncates toward zero, exact for these values.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> halves,
                              RunAndRead<float>(s, "div", {In(hx), IntScalar(2)}, {}, {32}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string hh, Upload<float>(s, {32}, halves));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<int32_t> truncated,
      RunAndRead<int32_t>(s, "astype", {In(hh)}, {{"dtype", DType::kInt32}}, {32}));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(truncated[i], x[i] / 2) << i;
}

// ---- Host shared memory ----

TEST_F(CoreTest, HostMemoryTokensAreSingleUseAndLapse) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostRegionGrant lapsing, core().RegisterHostMemory(session, 4096));
  EXPECT_EQ(lapsing.token.size(), 32u);
  clock_.Advance(options_.host_memory_token_ttl + absl::Milliseconds(1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd memory, CreateSharedMemory("core-test", 4096));
  EXPECT_THAT(core().DeliverDescriptor(lapsing.token, std::move(memory)),
              StatusIs(kNotFound, HasSubstr("lapsed")));

  GPUKIT_ASSERT_OK_AND_ASSIGN(HostRegionGrant grant, core().RegisterHostMemory(session, 4096));
  EXPECT_NE(grant.token, lapsing.token);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd first, CreateSharedMemory("core-test", 4096));
  GPUKIT_EXPECT_OK(core().DeliverDescriptor(grant.token, std::move(first)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd second, CreateSharedMemory("core-test", 4096));
  EXPECT_THAT(core().DeliverDescriptor(grant.token, std::move(second)), StatusIs(kNotFound));
}

TEST_F(CoreTest, HostMemoryCopiesMoveExactlyTheBytesAskedFor) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, Open());
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostRegionGrant grant, core().RegisterHostMemory(session, 64));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd fd, CreateSharedMemory("core-test", 64));
  void* mapping = ::mmap(nullptr, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(mapping, MAP_FAILED);
  float* shared = static_cast<float*>(mapping);
  for (int i = 0; i < 16; ++i) shared[i] = 1.5f * static_cast<float>(i + 1);
  GPUKIT_ASSERT_OK(core().DeliverDescriptor(grant.token, std::move(fd)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a,
                              Upload<float>(session, {4}, {-1.0f, -2.0f, -3.0f, -4.0f}));
  // Elements 2..5 of the shared memory into the array, then the array into elements 10..13.
  GPUKIT_ASSERT_OK(core().CopyFromHostMemory(session, a, 0, grant.handle, 8, 16));
  EXPECT_THAT(Download<float>(session, a),
              IsOkAndHolds(::testing::ElementsAre(4.5f, 6.0f, 7.5f, 9.0f)));
  GPUKIT_ASSERT_OK(core().CopyToHostMemory(session, a, 0, grant.handle, 40, 16));
  EXPECT_EQ(shared[9], 15.0f);
  EXPECT_EQ(shared[10], 4.5f);
  EXPECT_EQ(shared[13], 9.0f);
  EXPECT_EQ(shared[14], 22.5f);
  EXPECT_THAT(core().CopyToHostMemory(session, a, 0, grant.handle, 56, 16),
              StatusIs(absl::StatusCode::kOutOfRange));
  GPUKIT_EXPECT_OK(core().UnregisterHostMemory(session, grant.handle));
  EXPECT_THAT(core().CopyToHostMemory(session, a, 0, grant.handle, 0, 16), StatusIs(kNotFound));
  ::munmap(mapping, 64);
}

TEST_F(CoreTest, HostMemoryRegionsPerSessionAreLimited) {
  options_.max_host_regions_per_session = 2;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, Open());
  GPUKIT_EXPECT_OK(core().RegisterHostMemory(session, 64).status());
  GPUKIT_EXPECT_OK(core().RegisterHostMemory(session, 64).status());
  EXPECT_THAT(core().RegisterHostMemory(session, 64).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2 host memory regions")));
}

}  // namespace
}  // namespace gpukit
