// A gpukit client process for the integration tests, which spawn it (tests never fork a
// process that has initialised gRPC).
//
//   worker --addr ADDR --mode compute --seed N
//       Connects, runs ops on random non-zero data, checks every result against values
//       computed here, closes its session. Exit 0 on success, 1 with a message otherwise.
//   worker --addr ADDR --mode upload-forever [--lease-ms MS]
//       Opens a session (asking for the lease given), creates a 64 MiB array and uploads
//       it over and over; prints "uploading" once the first upload has finished, so the
//       test knows an upload is under way from then on. Runs until killed.
//   worker --addr ADDR --mode hold --bytes SIZE
//       Opens a session and creates an array of SIZE bytes (e.g. 48MiB); prints "holding"
//       and then waits, renewing its lease, until killed.
//   worker --addr ADDR --mode hold-mapped --bytes SIZE
//       The same, with the array mapped into this process first (Array::Map: needs a GPU).
//   worker --addr ADDR --mode hammer --ops N
//       Uploads a 1 MiB float32 array and runs N "add" ops on it back to back. A call
//       refused with RESOURCE_EXHAUSTED and reason REASON_QUEUE_FULL is counted (an op is
//       not retried; the upload and the final download are); any other error fails.
//       Prints "hammer ok=<ops that succeeded> queue_full=<refusals>".
//   worker --addr ADDR --mode gpu-compute --seed N [--rounds R] [--wait-for PATH]
//       The compute mode sized for a GPU (tests/gpu/multi_client_test.cc). Prints
//       "gpu-compute seed N", opens a session and uploads a random 16 MiB float32 array that
//       stays there; prints "ready" (flushed); with --wait-for, waits until the file PATH
//       exists (at most 2 minutes), so that a test can see several sessions open at once.
//       Then runs R rounds (default 3; 0: until killed), each on fresh random non-zero data
//       seeded by N and the round: float32 matrices of 64 to 384 per side and a vector of 1 to
//       4 Mi elements, int32 matrices; it checks add (same shape, broadcast, the vector), a
//       matmul of an add's result, an int32 matmul, sums over all and along an axis, a max and
//       an int32 sum against values computed here, within bounds the accumulation order
//       allows. Prints each round's shapes, and "computing" once the first round checked out.
//       Finally it reads the resident array back (it must be unchanged), closes its session
//       and prints "gpu-compute ok".
//   worker --addr ADDR --mode gpu-map --seed N [--rounds R]
//       Zero-copy device memory (Array::Map) against gpukitd on a GPU: uploads random data
//       through gRPC, maps the array into this process and reads it through the mapping
//       (cuMemcpyDtoH), writes new data through the mapping (cuMemcpyHtoD) and reads it back
//       through gRPC; both must match. Then times R (default 200) first maps of fresh 1 MiB
//       and 4 MiB arrays (export + descriptor + import) and R cached maps, and prints
//       "map N MiB arrays: first p50 X p99 Y us; cached p50 X p99 Y us" for each size, then
//       "gpu-map ok".
//   worker --addr ADDR --mode gpu-import --seed N [--rounds R]
//       The other way (Client::ImportDeviceMemory): this process's own device memory becomes
//       an array of its session. For cuMemAlloc memory (a legacy IPC handle) and for a VMM
//       allocation made with the POSIX descriptor handle type, it fills the memory here and
//       checks what gpukitd reads (Download, an add), that Map() gives its own pointer, that
//       gpukitd's writes (Upload) land in its memory, and that the memory is still its own
//       after the array is freed. It checks that host memory, a range past an allocation's
//       end and a VMM allocation without a shareable handle are refused. Then it times R
//       (default 200) imports of fresh 4 MiB allocations of each kind and prints
//       "import 4 MiB <kind>: p50 X p99 Y us", then "gpu-import ok".
//   worker --addr ADDR --mode hold-imported --bytes SIZE
//       Imports SIZE bytes of its own cuMemAlloc memory as an array, prints "holding" and
//       sleeps until killed.
//   worker --addr ADDR --mode pipeline-exit --ops N [--lease-ms MS]
//       Opens a session with pipelined submission (ClientOptions::pipeline), uploads two
//       256 x 256 float32 matrices and writes a chain of N matmuls on them to the Submit
//       stream without waiting, prints "submitted N" and _exits with status 0 at once:
//       the stream, the session and the queued ops are left to the daemon.
//
// Every mode also takes --partition NAME, --memory-request SIZE, --memory-limit SIZE,
// --compute-request SHARE and --compute-limit SHARE for the session it opens,
// --tenant NAME (default worker-<seed>), and --shared-memory 0 to turn off
// ClientOptions::use_shared_memory (plain transfers then always go in gRPC messages).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cpp/channel.h"
#include "client/cpp/device_import.h"
#include "gpukit/client.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"
#include "runtime/cuda/cuda_driver.h"

namespace {

struct Flags {
  std::string addr;
  std::string mode;
  uint64_t seed = 1;
  int64_t lease_ms = 0;
  std::string tenant;
  std::string partition;
  gpukit::ResourceRequirements resources;
  int64_t bytes = 0;
  int64_t ops = 0;
  int64_t rounds = 3;  // gpu-compute
  bool rounds_given = false;
  std::string wait_for;  // gpu-compute
  bool use_shared_memory = true;
};

// The worker reports the first failure and exits 1.
int Fail(const std::string& what) {
  std::cerr << "worker: " << what << "\n";
  return 1;
}

int Fail(const std::string& what, const absl::Status& status) {
  return Fail(absl::StrCat(what, ": ", status.ToString()));
}

// Non-zero values in [0.5, 2] with a random sign, so products and quotients stay tame.
std::vector<float> RandomFloats(std::mt19937_64& random, size_t count) {
  std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> values(count);
  for (float& v : values) v = negative(random) ? -magnitude(random) : magnitude(random);
  return values;
}

// Non-zero integers in [-1000, 1000].
std::vector<int32_t> RandomInts(std::mt19937_64& random, size_t count) {
  std::uniform_int_distribution<int32_t> value(1, 1000);
  std::bernoulli_distribution negative(0.5);
  std::vector<int32_t> values(count);
  for (int32_t& v : values) v = negative(random) ? -value(random) : value(random);
  return values;
}

bool Near(double expected, double actual, double relative) {
  return std::abs(expected - actual) <= relative * std::max(1.0, std::abs(expected));
}

// Compares element by element; describes the first mismatch.
template <typename T>
absl::Status Check(absl::string_view op, const std::vector<T>& expected,
                   const absl::StatusOr<std::vector<T>>& actual, double relative = 0) {
  if (!actual.ok())
    return absl::Status(actual.status().code(), absl::StrCat(op, ": ", actual.status().message()));
  if (actual->size() != expected.size()) {
    return absl::InternalError(
        absl::StrCat(op, ": ", actual->size(), " elements, expected ", expected.size()));
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const bool equal =
        relative == 0 ? (*actual)[i] == expected[i] : Near(expected[i], (*actual)[i], relative);
    if (!equal) {
      return absl::InternalError(
          absl::StrCat(op, ": element ", i, " is ", (*actual)[i], ", expected ", expected[i]));
    }
  }
  return absl::OkStatus();
}

// Checks a float32 op's result; `relative` 0 asks for exact equality.
absl::Status CheckFloat(absl::string_view op, absl::StatusOr<gpukit::Array> result,
                        const std::vector<float>& expected, double relative) {
  if (!result.ok()) {
    return absl::Status(result.status().code(), absl::StrCat(op, ": ", result.status().message()));
  }
  return Check<float>(op, expected, result->ToVector<float>(), relative);
}

absl::Status RunCompute(gpukit::Client& client, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> extent(1, 48);
  const int64_t rows = extent(random), cols = extent(random), inner = extent(random);
  const size_t n = static_cast<size_t>(rows * cols);

  // float32: elementwise ops with broadcasting are exact in IEEE arithmetic; reductions
  // and matmul may add in another order, so they get a tolerance.
  const std::vector<float> a = RandomFloats(random, n);
  const std::vector<float> row = RandomFloats(random, static_cast<size_t>(cols));
  const std::vector<float> w = RandomFloats(random, static_cast<size_t>(cols * inner));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array a_arr, client.FromVector<float>(a, {rows, cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array row_arr, client.FromVector<float>(row, {cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array w_arr, client.FromVector<float>(w, {cols, inner}));

  std::vector<float> sum(n), product(n), quotient(n), scaled(n), transposed(n);
  std::vector<float> row_sums(static_cast<size_t>(rows), 0.0f);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      sum[i] = a[i] + row[c];
      product[i] = a[i] * row[c];
      quotient[i] = a[i] / row[c];
      scaled[i] = a[i] * 2.5f;
      transposed[c * rows + r] = a[i];
      row_sums[r] += a[i];
      total += a[i];
    }
  }
  std::vector<float> matmul(static_cast<size_t>(rows * inner));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < inner; ++k) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += double{a[r * cols + c]} * w[c * inner + k];
      matmul[static_cast<size_t>(r * inner + k)] = static_cast<float>(acc);
    }
  }
  GPUKIT_RETURN_IF_ERROR(CheckFloat("add", client.Add(a_arr, row_arr), sum, 0));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("mul", client.Mul(a_arr, row_arr), product, 0));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("div", client.Div(a_arr, row_arr), quotient, 0));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("mul by scalar", client.Mul(a_arr, 2.5), scaled, 0));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("transpose", client.Transpose(a_arr), transposed, 0));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("sum axis 1", client.Sum(a_arr, 1), row_sums, 1e-4));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("sum", client.Sum(a_arr), {static_cast<float>(total)}, 1e-3));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("matmul", client.Matmul(a_arr, w_arr), matmul, 1e-4));

  // int32: exact, and sums widen to int64.
  const std::vector<int32_t> x = RandomInts(random, n);
  const std::vector<int32_t> y = RandomInts(random, n);
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array x_arr, client.FromVector<int32_t>(x, {rows, cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array y_arr, client.FromVector<int32_t>(y, {rows, cols}));
  std::vector<int32_t> difference(n), int_product(n);
  int64_t int_total = 0;
  for (size_t i = 0; i < n; ++i) {
    difference[i] = x[i] - y[i];
    int_product[i] = x[i] * y[i];
    int_total += x[i];
  }
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array sub, client.Sub(x_arr, y_arr));
  GPUKIT_RETURN_IF_ERROR(Check<int32_t>("sub int32", difference, sub.ToVector<int32_t>()));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array mul, client.Mul(x_arr, y_arr));
  GPUKIT_RETURN_IF_ERROR(Check<int32_t>("mul int32", int_product, mul.ToVector<int32_t>()));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array int_sum, client.Sum(x_arr));
  return Check<int64_t>("sum int32", {int_total}, int_sum.ToVector<int64_t>());
}

int Compute(const gpukit::ClientOptions& options, uint64_t seed) {
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  // Several rounds, so that the workers of one test overlap in the daemon.
  for (int round = 0; round < 3; ++round) {
    absl::Status status = RunCompute(**client, seed * 1000 + round);
    if (!status.ok()) return Fail(absl::StrCat("seed ", seed, " round ", round), status);
  }
  absl::Status closed = (*client)->Close();
  if (!closed.ok()) return Fail("close", closed);
  std::cout << "compute ok\n";
  return 0;
}

int UploadForever(const gpukit::ClientOptions& options) {
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  constexpr int64_t kBytes = int64_t{64} << 20;
  auto array = (*client)->Empty({kBytes}, gpukit::DType::kUInt8);
  if (!array.ok()) return Fail("create", array.status());
  const std::vector<char> data(kBytes, '\x5a');
  for (bool first = true;; first = false) {
    absl::Status status = array->Write(data.data(), kBytes);
    if (!status.ok()) return Fail("upload", status);
    if (first) {
      std::cout << "uploading" << std::endl;  // flushed: the test is waiting for it
    }
  }
}

int Hold(const gpukit::ClientOptions& options, int64_t bytes, bool mapped) {
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  auto array = (*client)->Empty({bytes}, gpukit::DType::kUInt8);
  if (!array.ok()) return Fail("create", array.status());
  if (mapped) {
    absl::StatusOr<gpukit::DeviceMapping> mapping = array->Map();
    if (!mapping.ok()) return Fail("map", mapping.status());
  }
  std::cout << "holding" << std::endl;  // flushed: the test is waiting for it
  while (true) absl::SleepFor(absl::Seconds(1));
}

template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

bool IsQueueFull(const absl::Status& status) {
  return absl::IsResourceExhausted(status) && gpukit::RejectReason(status) == "REASON_QUEUE_FULL";
}

// Calls `call` until it is not refused with QUEUE_FULL, counting the refusals.
template <typename Call>
auto UntilNotQueueFull(Call call, int64_t* queue_full) -> decltype(call()) {
  while (true) {
    auto result = call();
    if (!IsQueueFull(StatusOf(result))) return result;
    ++*queue_full;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

int Hammer(const gpukit::ClientOptions& options, int64_t ops) {
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  constexpr int64_t kElements = 256 * 1024;  // 1 MiB of float32
  const std::vector<float> values(kElements, 1.5f);
  int64_t queue_full = 0;
  absl::StatusOr<gpukit::Array> input = UntilNotQueueFull(
      [&] { return (*client)->FromVector<float>(values, {kElements}); }, &queue_full);
  if (!input.ok()) return Fail("upload", input.status());
  int64_t succeeded = 0;
  std::optional<gpukit::Array> last;
  for (int64_t i = 0; i < ops; ++i) {
    absl::StatusOr<gpukit::Array> sum = (*client)->Add(*input, 1.0);
    if (IsQueueFull(sum.status())) {
      ++queue_full;
      continue;
    }
    if (!sum.ok()) return Fail(absl::StrCat("op ", i), sum.status());
    ++succeeded;
    last = *std::move(sum);
  }
  if (last.has_value()) {
    absl::StatusOr<std::vector<float>> result =
        UntilNotQueueFull([&] { return last->ToVector<float>(); }, &queue_full);
    absl::Status checked = Check<float>("add", std::vector<float>(kElements, 2.5f), result);
    if (!checked.ok()) return Fail("download", checked);
  }
  last.reset();
  input->Free().IgnoreError();
  absl::Status closed = (*client)->Close();
  if (!closed.ok()) return Fail("close", closed);
  std::cout << "hammer ok=" << succeeded << " queue_full=" << queue_full << std::endl;
  return 0;
}

// ---- pipeline-exit ----

int PipelineExit(gpukit::ClientOptions options, int64_t ops) {
  options.pipeline = true;
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  constexpr int64_t kSide = 256;
  // 1/256: every product of the chain stays 1/256, nothing overflows.
  const std::vector<float> values(kSide * kSide, 1.0f / kSide);
  auto a = (*client)->FromVector<float>(values, {kSide, kSide});
  if (!a.ok()) return Fail("upload", a.status());
  std::vector<gpukit::Array> chain;
  for (int64_t i = 0; i < ops; ++i) {
    auto next = (*client)->Matmul(chain.empty() ? *a : chain.back(), *a);
    if (!next.ok()) return Fail(absl::StrCat("op ", i), next.status());
    chain.push_back(*std::move(next));
  }
  std::cout << "submitted " << ops << std::endl;
  _exit(0);  // no destructor runs: the stream and the session are left open
}

// ---- gpu-compute ----

// Compares float32 results with a reference computed in double: element i may differ by at
// most bound[i] (0: must be equal). Describes the first element out of bounds.
absl::Status CheckWithin(absl::string_view op, const std::vector<double>& expected,
                         const std::vector<double>& bound,
                         const absl::StatusOr<std::vector<float>>& actual) {
  if (!actual.ok())
    return absl::Status(actual.status().code(), absl::StrCat(op, ": ", actual.status().message()));
  if (actual->size() != expected.size()) {
    return absl::InternalError(
        absl::StrCat(op, ": ", actual->size(), " elements, expected ", expected.size()));
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const double error = std::abs(double{(*actual)[i]} - expected[i]);
    if (!(error <= bound[i])) {  // NaN fails too
      return absl::InternalError(absl::StrCat(op, ": element ", i, " is ", (*actual)[i],
                                              ", expected ", expected[i], " within ", bound[i]));
    }
  }
  return absl::OkStatus();
}

// The bound on a float32 sum of `count` terms whose magnitudes add up to `magnitude`, as the
// reductions compute it (a double accumulator, in any order, rounded to float32 at the end):
// the final rounding plus the double additions' error (count * 2^-53 of the magnitudes at
// most), doubled for the reference's own additions.
double SumBound(double expected, double magnitude, int64_t count) {
  return 2 * (std::ldexp(std::abs(expected), -24) +
              static_cast<double>(count) * std::ldexp(magnitude, -53));
}

// The bound on a float32 matmul element whose k products have magnitudes adding up to
// `magnitude`: float32 accumulation in any order (cuBLASLt without TF32, or gpukit's kernel)
// errs by at most about k * 2^-24 of that, under 1e-4 for k up to about 1600; for the k of at
// most 384 here the bound stays well below a typical product (about 2), so a wrong, missing
// or doubled term shows.
double MatmulBound(double magnitude) { return 1e-4 * magnitude; }

// Non-zero integers in [-100, 100]: int32 matmuls of them stay far from overflow.
std::vector<int32_t> SmallRandomInts(std::mt19937_64& random, size_t count) {
  std::uniform_int_distribution<int32_t> value(1, 100);
  std::bernoulli_distribution negative(0.5);
  std::vector<int32_t> values(count);
  for (int32_t& v : values) v = negative(random) ? -value(random) : value(random);
  return values;
}

absl::Status RunGpuRound(gpukit::Client& client, uint64_t seed, int64_t round) {
  std::mt19937_64 random(seed * 1000 + static_cast<uint64_t>(round));
  std::uniform_int_distribution<int64_t> extent(64, 384);
  std::uniform_int_distribution<int64_t> vector_extent(int64_t{1} << 20, int64_t{4} << 20);
  const int64_t rows = extent(random), cols = extent(random), inner = extent(random);
  const int64_t length = vector_extent(random);
  std::cout << "round " << round << ": [" << rows << " x " << cols << "] @ [" << cols << " x "
            << inner << "], vector of " << length << std::endl;
  const size_t n = static_cast<size_t>(rows * cols);

  const std::vector<float> a = RandomFloats(random, n);
  const std::vector<float> b = RandomFloats(random, n);
  const std::vector<float> row = RandomFloats(random, static_cast<size_t>(cols));
  const std::vector<float> w = RandomFloats(random, static_cast<size_t>(cols * inner));
  const std::vector<float> v = RandomFloats(random, static_cast<size_t>(length));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array a_arr, client.FromVector<float>(a, {rows, cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array b_arr, client.FromVector<float>(b, {rows, cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array row_arr, client.FromVector<float>(row, {cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array w_arr, client.FromVector<float>(w, {cols, inner}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array v_arr, client.FromVector<float>(v, {length}));

  // Elementwise float32 adds are exact in IEEE arithmetic, on any device.
  std::vector<float> sum(n), broadcast(n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      sum[i] = a[i] + b[i];
      broadcast[i] = a[i] + row[c];
    }
  }
  std::vector<float> doubled(v.size());
  for (size_t i = 0; i < v.size(); ++i) doubled[i] = v[i] + v[i];
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array sum_arr, client.Add(a_arr, b_arr));
  GPUKIT_RETURN_IF_ERROR(Check<float>("add", sum, sum_arr.ToVector<float>()));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("add broadcast", client.Add(a_arr, row_arr), broadcast, 0));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("add vector", client.Add(v_arr, v_arr), doubled, 0));

  // The matmul takes the add's result where it lies on the device.
  std::vector<double> product(static_cast<size_t>(rows * inner));
  std::vector<double> product_bound(product.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < inner; ++k) {
      double acc = 0, magnitude = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double term = double{sum[r * cols + c]} * w[c * inner + k];
        acc += term;
        magnitude += std::abs(term);
      }
      product[static_cast<size_t>(r * inner + k)] = acc;
      product_bound[static_cast<size_t>(r * inner + k)] = MatmulBound(magnitude);
    }
  }
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array product_arr, client.Matmul(sum_arr, w_arr));
  GPUKIT_RETURN_IF_ERROR(
      CheckWithin("matmul of add", product, product_bound, product_arr.ToVector<float>()));

  // Reductions: sums along axis 1 and over the whole vector, a max along axis 0 (exact).
  std::vector<double> row_sums(static_cast<size_t>(rows)), row_bounds(row_sums.size());
  std::vector<float> column_max(static_cast<size_t>(cols), -INFINITY);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0, magnitude = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float value = a[r * cols + c];
      acc += value;
      magnitude += std::abs(value);
      column_max[c] = std::max(column_max[c], value);
    }
    row_sums[r] = acc;
    row_bounds[r] = SumBound(acc, magnitude, cols);
  }
  double total = 0, total_magnitude = 0;
  for (float value : v) {
    total += value;
    total_magnitude += std::abs(value);
  }
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array row_sums_arr, client.Sum(a_arr, 1));
  GPUKIT_RETURN_IF_ERROR(
      CheckWithin("sum axis 1", row_sums, row_bounds, row_sums_arr.ToVector<float>()));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array total_arr, client.Sum(v_arr));
  GPUKIT_RETURN_IF_ERROR(CheckWithin("sum of the vector", {total},
                                     {SumBound(total, total_magnitude, length)},
                                     total_arr.ToVector<float>()));
  GPUKIT_RETURN_IF_ERROR(CheckFloat("max axis 0", client.Max(a_arr, 0), column_max, 0));

  // int32: a matmul and a sum, exact (the sum widens to int64).
  const std::vector<int32_t> x = SmallRandomInts(random, n);
  const std::vector<int32_t> y = SmallRandomInts(random, static_cast<size_t>(cols * inner));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array x_arr, client.FromVector<int32_t>(x, {rows, cols}));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array y_arr, client.FromVector<int32_t>(y, {cols, inner}));
  std::vector<int32_t> int_product(static_cast<size_t>(rows * inner));
  int64_t int_total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < inner; ++k) {
      int64_t acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += int64_t{x[r * cols + c]} * y[c * inner + k];
      int_product[static_cast<size_t>(r * inner + k)] = static_cast<int32_t>(acc);
    }
  }
  for (int32_t value : x) int_total += value;
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array int_product_arr, client.Matmul(x_arr, y_arr));
  GPUKIT_RETURN_IF_ERROR(
      Check<int32_t>("matmul int32", int_product, int_product_arr.ToVector<int32_t>()));
  GPUKIT_ASSIGN_OR_RETURN(gpukit::Array int_total_arr, client.Sum(x_arr));
  return Check<int64_t>("sum int32", {int_total}, int_total_arr.ToVector<int64_t>());
}

int GpuCompute(const gpukit::ClientOptions& options, uint64_t seed, int64_t rounds,
               const std::string& wait_for) {
  std::cout << "gpu-compute seed " << seed << std::endl;
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  // Data that stays in the session while the rounds (and the other clients) run.
  std::mt19937_64 random(seed);
  const std::vector<float> resident = RandomFloats(random, size_t{4} << 20);  // 16 MiB
  auto resident_arr =
      (*client)->FromVector<float>(resident, {static_cast<int64_t>(resident.size())});
  if (!resident_arr.ok()) return Fail("upload the resident array", resident_arr.status());
  std::cout << "ready" << std::endl;  // flushed: the test is waiting for it
  if (!wait_for.empty()) {
    const absl::Time deadline = absl::Now() + absl::Minutes(2);
    while (!std::filesystem::exists(wait_for)) {
      if (absl::Now() >= deadline) return Fail(absl::StrCat(wait_for, " did not appear"));
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  for (int64_t round = 0; rounds == 0 || round < rounds; ++round) {
    absl::Status status = RunGpuRound(**client, seed, round);
    if (!status.ok()) return Fail(absl::StrCat("seed ", seed, " round ", round), status);
    if (round == 0) std::cout << "computing" << std::endl;
  }
  absl::Status unchanged =
      Check<float>("the resident array", resident, resident_arr->ToVector<float>());
  if (!unchanged.ok()) return Fail(absl::StrCat("seed ", seed), unchanged);
  absl::Status freed = resident_arr->Free();
  if (!freed.ok()) return Fail("free the resident array", freed);
  absl::Status closed = (*client)->Close();
  if (!closed.ok()) return Fail("close", closed);
  std::cout << "gpu-compute ok" << std::endl;
  return 0;
}

double PercentileUs(std::vector<double> us, int percent) {
  std::sort(us.begin(), us.end());
  return us[std::min(us.size() - 1, us.size() * percent / 100)];
}

absl::StatusOr<const gpukit::CudaDriver*> BindPrimaryContext();

int GpuMap(const gpukit::ClientOptions& options, uint64_t seed, int rounds) {
  std::cout << "gpu-map seed " << seed << std::endl;
  // This thread's own CUDA work (the copies through the mappings) runs in the primary
  // context; Array::Map leaves the thread's current context as it found it.
  absl::StatusOr<const gpukit::CudaDriver*> cu = BindPrimaryContext();
  if (!cu.ok()) return Fail("CUDA", cu.status());
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> value(-100, 100);
  constexpr int64_t kCount = 3 << 20;  // 12 MiB: a segment of its own, as any exported array
  std::vector<float> data(kCount);
  for (float& v : data) v = value(rng);
  auto array = (*client)->FromVector(data, {kCount});
  if (!array.ok()) return Fail("upload", array.status());
  absl::StatusOr<gpukit::DeviceMapping> mapping = array->Map();
  if (!mapping.ok()) return Fail("map", mapping.status());
  if (mapping->size_bytes != kCount * 4) return Fail("the mapping has the wrong size");
  std::vector<float> seen(kCount);
  if (CUresult r = (*cu)->cuMemcpyDtoH(seen.data(), mapping->device_pointer, kCount * 4);
      r != CUDA_SUCCESS) {
    return Fail(absl::StrCat("cuMemcpyDtoH from the mapping: ", gpukit::CuErrorName(r)));
  }
  if (seen != data) return Fail("the mapping does not show the uploaded data");
  for (float& v : data) v = value(rng);
  if (CUresult r = (*cu)->cuMemcpyHtoD(mapping->device_pointer, data.data(), kCount * 4);
      r != CUDA_SUCCESS) {
    return Fail(absl::StrCat("cuMemcpyHtoD into the mapping: ", gpukit::CuErrorName(r)));
  }
  absl::Status same =
      Check<float>("the array after a write through the mapping", data, array->ToVector<float>());
  if (!same.ok()) return Fail(absl::StrCat("seed ", seed), same);
  // A small array lives in a slab; exporting moves it to a segment of its own, unchanged.
  auto small = (*client)->FromVector<float>({1.5f, -2.5f, 3.5f}, {3});
  if (!small.ok()) return Fail("small upload", small.status());
  absl::StatusOr<gpukit::DeviceMapping> small_map = small->Map();
  if (!small_map.ok()) return Fail("map the small array", small_map.status());
  float three[3] = {};
  if ((*cu)->cuMemcpyDtoH(three, small_map->device_pointer, sizeof(three)) != CUDA_SUCCESS ||
      three[0] != 1.5f || three[1] != -2.5f || three[2] != 3.5f) {
    return Fail("the small array's mapping does not show its data");
  }

  // 1 MiB arrays live in slabs, so their export also moves them to a segment of their own;
  // 4 MiB arrays have one from the start: the two sizes tell the move from the rest.
  for (const int64_t floats : {int64_t{1} << 18, int64_t{1} << 20}) {
    std::vector<double> first_us, cached_us;
    for (int i = 0; i < std::max(rounds, 1); ++i) {
      auto fresh = (*client)->Empty({floats}, gpukit::DType::kFloat32);
      if (!fresh.ok()) return Fail("create", fresh.status());
      auto start = std::chrono::steady_clock::now();
      absl::StatusOr<gpukit::DeviceMapping> first = fresh->Map();
      first_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      if (!first.ok()) return Fail("map a fresh array", first.status());
      start = std::chrono::steady_clock::now();
      absl::StatusOr<gpukit::DeviceMapping> again = fresh->Map();
      cached_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      if (!again.ok() || again->device_pointer != first->device_pointer) {
        return Fail("a cached map gave another pointer");
      }
    }
    std::printf("map %lld MiB arrays: first p50 %.1f p99 %.1f us; cached p50 %.2f p99 %.2f us\n",
                static_cast<long long>(floats * 4 >> 20), PercentileUs(first_us, 50),
                PercentileUs(first_us, 99), PercentileUs(cached_us, 50),
                PercentileUs(cached_us, 99));
  }
  // Where a first map's time goes: the same steps as Array::Map, one by one, on 4 MiB arrays.
  auto channel = gpukit::ConnectChannel(options.address, absl::Seconds(5));
  if (!channel.ok()) return Fail("channel", channel.status());
  auto stub = gpukit::v1::ArrayService::NewStub(*channel);
  std::vector<double> rpc_us, fetch_us, import_us, driver_us[7];
  for (int i = 0; i < std::max(rounds, 1) / 2 + 2; ++i) {
    auto fresh = (*client)->Empty({1 << 20}, gpukit::DType::kFloat32);
    if (!fresh.ok()) return Fail("create", fresh.status());
    auto start = std::chrono::steady_clock::now();
    auto lap = [&start](std::vector<double>& into) {
      const auto now = std::chrono::steady_clock::now();
      into.push_back(std::chrono::duration<double, std::micro>(now - start).count());
      start = now;
    };
    gpukit::v1::ExportArrayRequest request;
    request.set_session_id((*client)->session_id());
    request.set_handle(fresh->handle());
    gpukit::v1::ExportArrayResponse response;
    grpc::ClientContext context;
    if (!stub->Export(&context, request, &response).ok()) return Fail("export");
    lap(rpc_us);
    auto socket = gpukit::ConnectUnixSocket(response.fd_channel());
    if (!socket.ok()) return Fail("channel", socket.status());
    const std::string message =
        gpukit::EncodeFdChannelRequest({gpukit::FdChannelOp::kFetch, response.token()});
    absl::Status sent = gpukit::SendMessage(socket->get(), message.data(), message.size());
    auto reply = gpukit::ReceiveMessage(socket->get(), 1024, absl::Seconds(5));
    if (!sent.ok() || !reply.ok() || !reply->fd.valid()) return Fail("fetch");
    lap(fetch_us);
    if (i % 2 == 0) {
      auto imported = gpukit::internal::DeviceImport::Import(
          response.device_index(), std::move(reply->fd), response.allocation_bytes());
      if (!imported.ok()) return Fail("import", imported.status());
      lap(import_us);
      continue;
    }
    // Every other round the driver's calls one by one, as gpukit_ipc_bench times them.
    const size_t size = static_cast<size_t>(response.allocation_bytes());
    CUmemGenericAllocationHandle handle = 0;
    CUdeviceptr address = 0;
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((*cu)->cuMemImportFromShareableHandle(
            &handle, reinterpret_cast<void*>(static_cast<intptr_t>(reply->fd.get())),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) {
      return Fail("cuMemImportFromShareableHandle");
    }
    lap(driver_us[0]);
    if ((*cu)->cuMemAddressReserve(&address, size, 0, 0, 0) != CUDA_SUCCESS) return Fail("reserve");
    lap(driver_us[1]);
    if ((*cu)->cuMemMap(address, size, 0, handle, 0) != CUDA_SUCCESS) return Fail("cuMemMap");
    lap(driver_us[2]);
    if ((*cu)->cuMemSetAccess(address, size, &access, 1) != CUDA_SUCCESS) return Fail("access");
    lap(driver_us[3]);
    (*cu)->cuMemRelease(handle);  // while mapped, as SharedMapping does
    lap(driver_us[4]);
    CUdevice device = 0;
    CUcontext primary = nullptr;
    (*cu)->cuDeviceGet(&device, 0);
    (*cu)->cuDevicePrimaryCtxRetain(&primary, device);
    (*cu)->cuCtxSetCurrent(primary);
    (*cu)->cuDevicePrimaryCtxRelease(device);
    lap(driver_us[5]);
    reply->fd.Reset();  // close the imported descriptor
    lap(driver_us[6]);
    (*cu)->cuMemUnmap(address, size);
    (*cu)->cuMemAddressFree(address, size);
  }
  std::printf("map steps p50: Export RPC %.1f us, descriptor fetch %.1f us, import + map %.1f us\n",
              PercentileUs(rpc_us, 50), PercentileUs(fetch_us, 50), PercentileUs(import_us, 50));
  std::printf(
      "import + map's driver calls p50: import %.1f, reserve %.1f, map %.1f, access %.1f, "
      "release while mapped %.1f, primary context retain + release %.1f, close(fd) %.1f us\n",
      PercentileUs(driver_us[0], 50), PercentileUs(driver_us[1], 50),
      PercentileUs(driver_us[2], 50), PercentileUs(driver_us[3], 50),
      PercentileUs(driver_us[4], 50), PercentileUs(driver_us[5], 50),
      PercentileUs(driver_us[6], 50));

  // The legacy form (a CUDA IPC handle in the reply), for clients that cannot receive
  // descriptors: the same memory both ways, kept after the array is freed, and timed.
  std::vector<double> legacy_us;
  for (int i = 0; i < std::max(rounds, 1) / 4 + 1; ++i) {
    std::vector<float> values(1 << 20);
    for (float& v : values) v = value(rng);
    auto fresh = (*client)->FromVector<float>(values, {1 << 20});
    if (!fresh.ok()) return Fail("upload", fresh.status());
    const auto start = std::chrono::steady_clock::now();
    gpukit::v1::ExportArrayRequest request;
    request.set_session_id((*client)->session_id());
    request.set_handle(fresh->handle());
    request.set_cuda_ipc_handle(true);
    gpukit::v1::ExportArrayResponse response;
    grpc::ClientContext context;
    if (grpc::Status s = stub->Export(&context, request, &response); !s.ok()) {
      // A daemon whose devices run in executors refuses the form, saying so (the handle
      // would belong to the executor's CUDA context, which a restart takes away).
      if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
          absl::StrContains(s.error_message(), "executor") && legacy_us.empty()) {
        std::printf("legacy export refused: the daemon runs its devices in executors\n");
        break;
      }
      return Fail("legacy export: " + s.error_message());
    }
    auto opened = gpukit::internal::DeviceImport::OpenIpcHandle(response.device_index(),
                                                               response.cuda_ipc_handle());
    if (!opened.ok()) return Fail("cuIpcOpenMemHandle", opened.status());
    legacy_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (i > 0) continue;
    std::vector<float> seen(values.size());
    const uint64_t at = (*opened)->address() + static_cast<uint64_t>(response.offset_bytes());
    if ((*cu)->cuMemcpyDtoH(seen.data(), at, seen.size() * 4) != CUDA_SUCCESS || seen != values) {
      return Fail("the legacy handle's mapping does not show the array");
    }
    values[5] = 42.0f;
    if ((*cu)->cuMemcpyHtoD(at + 20, &values[5], 4) != CUDA_SUCCESS) return Fail("cuMemcpyHtoD");
    absl::Status same = Check<float>("the array after a write through the legacy mapping",
                                     values, fresh->ToVector<float>());
    if (!same.ok()) return Fail("legacy", same);
    absl::Status freed = fresh->Free();
    if (!freed.ok()) return Fail("free", freed);
    // Kept until the session ends: the mapping still reads the data.
    if ((*cu)->cuMemcpyDtoH(seen.data(), at, seen.size() * 4) != CUDA_SUCCESS || seen != values) {
      return Fail("a legacy export's memory did not outlive its array");
    }
  }
  if (!legacy_us.empty()) {
    std::printf("map 4 MiB arrays by CUDA IPC handle: first p50 %.1f p99 %.1f us\n",
                PercentileUs(legacy_us, 50), PercentileUs(legacy_us, 99));
  }

  absl::Status closed = (*client)->Close();
  if (!closed.ok()) return Fail("close", closed);
  std::cout << "gpu-map ok" << std::endl;
  return 0;
}

// This process's device memory, for the import modes: cuMemAlloc memory, or a VMM allocation
// (POSIX descriptor handle type when `shareable`) mapped read-write at an address of its own.
class OwnMemory {
 public:
  static absl::StatusOr<std::unique_ptr<OwnMemory>> Legacy(const gpukit::CudaDriver& cu,
                                                           int64_t bytes) {
    auto memory = std::unique_ptr<OwnMemory>(new OwnMemory(cu, bytes));
    GPUKIT_RETURN_IF_ERROR(gpukit::CheckCu(
        cu.cuMemAlloc(&memory->address_, static_cast<size_t>(bytes)), "cuMemAlloc"));
    return memory;
  }
  static absl::StatusOr<std::unique_ptr<OwnMemory>> Vmm(const gpukit::CudaDriver& cu,
                                                        int64_t bytes, bool shareable) {
    auto memory = std::unique_ptr<OwnMemory>(new OwnMemory(cu, bytes));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes =
        shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    const size_t size = static_cast<size_t>(bytes);  // a multiple of 2 MiB here
    GPUKIT_RETURN_IF_ERROR(
        gpukit::CheckCu(cu.cuMemCreate(&memory->handle_, size, &prop, 0), "cuMemCreate"));
    GPUKIT_RETURN_IF_ERROR(gpukit::CheckCu(
        cu.cuMemAddressReserve(&memory->address_, size, 0, 0, 0), "cuMemAddressReserve"));
    GPUKIT_RETURN_IF_ERROR(
        gpukit::CheckCu(cu.cuMemMap(memory->address_, size, 0, memory->handle_, 0), "cuMemMap"));
    memory->mapped_ = true;
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    GPUKIT_RETURN_IF_ERROR(
        gpukit::CheckCu(cu.cuMemSetAccess(memory->address_, size, &access, 1), "cuMemSetAccess"));
    return memory;
  }
  ~OwnMemory() {
    const size_t size = static_cast<size_t>(bytes_);
    if (handle_ != 0) {
      if (mapped_) cu_.cuMemUnmap(address_, size);
      if (address_ != 0) cu_.cuMemAddressFree(address_, size);
      cu_.cuMemRelease(handle_);
    } else if (address_ != 0) {
      cu_.cuMemFree(address_);
    }
  }
  uint64_t address() const { return address_; }

 private:
  OwnMemory(const gpukit::CudaDriver& cu, int64_t bytes) : cu_(cu), bytes_(bytes) {}
  const gpukit::CudaDriver& cu_;
  const int64_t bytes_;
  CUdeviceptr address_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  bool mapped_ = false;
};

// The primary context of device 0, current on this thread: where the import modes allocate.
absl::StatusOr<const gpukit::CudaDriver*> BindPrimaryContext() {
  // Retained for the rest of the process: the worker's allocations live in it.
  static auto* const bound =
      new absl::StatusOr<std::unique_ptr<gpukit::internal::PrimaryContext>>(
          gpukit::internal::PrimaryContext::Retain(0));
  if (!bound->ok()) return bound->status();
  GPUKIT_RETURN_IF_ERROR((**bound)->MakeCurrent());
  return &(**bound)->cu();
}

// One kind of own memory through ImportDeviceMemory and back; "" when all checks held.
std::string CheckImport(gpukit::Client& client, const gpukit::CudaDriver& cu,
                        const OwnMemory& memory, int64_t offset_bytes, std::mt19937& rng) {
  constexpr int64_t kCount = 1 << 18;  // 1 MiB of floats, at an offset into the allocation
  std::uniform_real_distribution<float> value(-100, 100);
  std::vector<float> data(kCount);
  for (float& v : data) v = value(rng);
  const uint64_t pointer = memory.address() + static_cast<uint64_t>(offset_bytes);
  if (cu.cuMemcpyHtoD(pointer, data.data(), kCount * 4) != CUDA_SUCCESS) return "cuMemcpyHtoD";
  auto array = client.ImportDeviceMemory(pointer, {kCount}, gpukit::DType::kFloat32);
  if (!array.ok()) return absl::StrCat("import: ", array.status().ToString());
  absl::Status same = Check<float>("gpukitd's view of the imported memory", data,
                                   array->ToVector<float>());
  if (!same.ok()) return same.ToString();
  auto sum = client.Add(*array, *array);
  if (!sum.ok()) return absl::StrCat("add: ", sum.status().ToString());
  std::vector<float> doubled(kCount);
  for (int64_t i = 0; i < kCount; ++i) doubled[i] = data[i] + data[i];
  same = Check<float>("an add of the imported array", doubled, sum->ToVector<float>());
  if (!same.ok()) return same.ToString();
  absl::StatusOr<gpukit::DeviceMapping> mapping = array->Map();
  if (!mapping.ok() || mapping->device_pointer != pointer) {
    return "Map() of an imported array does not give the client's own pointer";
  }
  for (float& v : data) v = value(rng);
  absl::Status written = array->Write(data.data(), kCount * 4);
  if (!written.ok()) return absl::StrCat("upload: ", written.ToString());
  std::vector<float> seen(kCount);
  if (cu.cuMemcpyDtoH(seen.data(), pointer, kCount * 4) != CUDA_SUCCESS) return "cuMemcpyDtoH";
  if (seen != data) return "gpukitd's upload did not land in the client's memory";
  absl::Status freed = array->Free();
  if (!freed.ok()) return absl::StrCat("free: ", freed.ToString());
  if (cu.cuMemcpyDtoH(seen.data(), pointer, kCount * 4) != CUDA_SUCCESS || seen != data) {
    return "the memory is not the client's own after the array was freed";
  }
  return "";
}

int GpuImport(const gpukit::ClientOptions& options, uint64_t seed, int rounds) {
  std::cout << "gpu-import seed " << seed << std::endl;
  absl::StatusOr<const gpukit::CudaDriver*> bound = BindPrimaryContext();
  if (!bound.ok()) return Fail("CUDA", bound.status());
  const gpukit::CudaDriver& cu = **bound;
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  constexpr int64_t kBytes = int64_t{4} << 20;

  auto legacy = OwnMemory::Legacy(cu, kBytes);
  if (!legacy.ok()) return Fail("cuMemAlloc", legacy.status());
  if (std::string failed = CheckImport(**client, cu, **legacy, 4096, rng); !failed.empty()) {
    return Fail("legacy IPC: " + failed);
  }
  auto vmm = OwnMemory::Vmm(cu, kBytes, /*shareable=*/true);
  if (!vmm.ok()) return Fail("VMM allocation", vmm.status());
  if (std::string failed = CheckImport(**client, cu, **vmm, 8192, rng); !failed.empty()) {
    return Fail("VMM descriptor: " + failed);
  }

  // Refusals.
  std::vector<float> host(16);
  auto refused = (*client)->ImportDeviceMemory(reinterpret_cast<uint64_t>(host.data()), {16},
                                               gpukit::DType::kFloat32);
  if (!absl::IsInvalidArgument(refused.status())) {
    return Fail("importing host memory was not refused as INVALID_ARGUMENT", refused.status());
  }
  refused = (*client)->ImportDeviceMemory((*legacy)->address() + 8, {kBytes / 4},
                                          gpukit::DType::kFloat32);
  if (!absl::IsInvalidArgument(refused.status())) {
    return Fail("a range past the allocation's end was not refused", refused.status());
  }
  auto private_vmm = OwnMemory::Vmm(cu, kBytes, /*shareable=*/false);
  if (!private_vmm.ok()) return Fail("VMM allocation", private_vmm.status());
  refused = (*client)->ImportDeviceMemory((*private_vmm)->address(), {16}, gpukit::DType::kFloat32);
  if (!absl::IsInvalidArgument(refused.status()) ||
      refused.status().message().find("cannot be shared") == std::string::npos) {
    return Fail("a VMM allocation without a shareable handle was not refused", refused.status());
  }

  // Timings: fresh memory each round, imported then freed.
  for (const bool is_vmm : {false, true}) {
    std::vector<double> import_us;
    for (int i = 0; i < std::max(rounds, 1); ++i) {
      auto memory = is_vmm ? OwnMemory::Vmm(cu, kBytes, true) : OwnMemory::Legacy(cu, kBytes);
      if (!memory.ok()) return Fail("allocate", memory.status());
      const auto start = std::chrono::steady_clock::now();
      auto array = (*client)->ImportDeviceMemory((*memory)->address(), {kBytes / 4},
                                                 gpukit::DType::kFloat32);
      import_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      if (!array.ok()) return Fail("timed import", array.status());
      absl::Status freed = array->Free();
      if (!freed.ok()) return Fail("free", freed);
    }
    std::printf("import 4 MiB %s: p50 %.1f p99 %.1f us\n",
                is_vmm ? "VMM descriptor" : "legacy IPC handle", PercentileUs(import_us, 50),
                PercentileUs(import_us, 99));
  }
  absl::Status closed = (*client)->Close();
  if (!closed.ok()) return Fail("close", closed);
  std::cout << "gpu-import ok" << std::endl;
  return 0;
}

int HoldImported(const gpukit::ClientOptions& options, int64_t bytes) {
  absl::StatusOr<const gpukit::CudaDriver*> bound = BindPrimaryContext();
  if (!bound.ok()) return Fail("CUDA", bound.status());
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  auto memory = OwnMemory::Legacy(**bound, bytes);
  if (!memory.ok()) return Fail("cuMemAlloc", memory.status());
  auto array = (*client)->ImportDeviceMemory((*memory)->address(), {bytes}, gpukit::DType::kUInt8);
  if (!array.ok()) return Fail("import", array.status());
  std::cout << "holding" << std::endl;  // flushed: the test is waiting for it
  while (true) absl::SleepFor(absl::Seconds(1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc % 2 != 1) return Fail("flags come in pairs: --name value");
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i], value = argv[i + 1];
    if (name == "--addr") {
      flags.addr = value;
    } else if (name == "--mode") {
      flags.mode = value;
    } else if (name == "--seed") {
      if (!absl::SimpleAtoi(value, &flags.seed)) return Fail("--seed needs a number");
    } else if (name == "--lease-ms") {
      if (!absl::SimpleAtoi(value, &flags.lease_ms)) return Fail("--lease-ms needs a number");
    } else if (name == "--tenant") {
      flags.tenant = value;
    } else if (name == "--partition") {
      flags.partition = value;
    } else if (name == "--memory-request" || name == "--memory-limit" || name == "--bytes") {
      absl::StatusOr<int64_t> bytes = gpukit::ParseBytes(value);
      if (!bytes.ok()) return Fail(absl::StrCat(name, " needs a size"), bytes.status());
      if (name == "--memory-request") flags.resources.memory_request_bytes = *bytes;
      if (name == "--memory-limit") flags.resources.memory_limit_bytes = *bytes;
      if (name == "--bytes") flags.bytes = *bytes;
    } else if (name == "--compute-request" || name == "--compute-limit") {
      double share = 0;
      if (!absl::SimpleAtod(value, &share)) return Fail(absl::StrCat(name, " needs a number"));
      (name == "--compute-request" ? flags.resources.compute_request
                                   : flags.resources.compute_limit) = share;
    } else if (name == "--ops") {
      if (!absl::SimpleAtoi(value, &flags.ops)) return Fail("--ops needs a number");
    } else if (name == "--rounds") {
      if (!absl::SimpleAtoi(value, &flags.rounds) || flags.rounds < 0) {
        return Fail("--rounds needs a number >= 0");
      }
      flags.rounds_given = true;
    } else if (name == "--wait-for") {
      flags.wait_for = value;
    } else if (name == "--shared-memory") {
      if (value != "0" && value != "1") return Fail("--shared-memory needs 0 or 1");
      flags.use_shared_memory = value == "1";
    } else {
      return Fail(absl::StrCat("unknown flag ", name));
    }
  }
  if (flags.addr.empty()) return Fail("--addr is required");
  gpukit::ClientOptions options;
  options.address = flags.addr;
  options.tenant = flags.tenant.empty() ? absl::StrCat("worker-", flags.seed) : flags.tenant;
  options.partition = flags.partition;
  options.resources = flags.resources;
  options.client_name = absl::StrCat("worker-", flags.mode);
  options.lease = absl::Milliseconds(flags.lease_ms);
  options.call_timeout = absl::Seconds(30);
  options.use_shared_memory = flags.use_shared_memory;
  if (flags.mode == "compute") return Compute(options, flags.seed);
  if (flags.mode == "upload-forever") return UploadForever(options);
  if (flags.mode == "hold") return Hold(options, flags.bytes, /*mapped=*/false);
  if (flags.mode == "hold-mapped") return Hold(options, flags.bytes, /*mapped=*/true);
  if (flags.mode == "hammer") return Hammer(options, flags.ops);
  if (flags.mode == "pipeline-exit") return PipelineExit(options, flags.ops);
  if (flags.mode == "gpu-compute") {
    return GpuCompute(options, flags.seed, flags.rounds, flags.wait_for);
  }
  if (flags.mode == "gpu-map") {
    return GpuMap(options, flags.seed, static_cast<int>(flags.rounds_given ? flags.rounds : 200));
  }
  if (flags.mode == "gpu-import") {
    return GpuImport(options, flags.seed,
                     static_cast<int>(flags.rounds_given ? flags.rounds : 200));
  }
  if (flags.mode == "hold-imported") return HoldImported(options, flags.bytes);
  return Fail(absl::StrCat(
      "unknown --mode \"", flags.mode,
      "\"; modes: compute, upload-forever, hold, hold-mapped, hammer, pipeline-exit, gpu-compute, gpu-map, "
      "gpu-import, hold-imported"));
}
