// cuBLASLt matmul on the GPU against a host reference in double precision, on random inputs
// (never zeros): CublasLtMatmul directly (shapes, batches, broadcast batches, transposes,
// TF32, bias and bias+GELU epilogues, for float32, float16 and bfloat16), then through
// CudaDevice::RunOp (matmul takes cuBLASLt, counted by cublaslt_matmul_count(); what it
// does not take falls back; its workspace per stream is freed with the stream).
//
// The reference uses the inputs as the GPU sees them (rounded to the dtype), so the
// difference is the GPU's accumulation and output rounding only. Errors are norm-based:
// ||out - ref||_2 / ||ref||_2 must be <= 1e-5 for float32 (which also proves float32 is not
// silently computed in TF32, whose error here is about 3e-4), 1e-3 for TF32 and 1e-2 for
// float16 and bfloat16.
//
// Skipped, visibly, where there is no GPU or no libcublasLt.
#include "runtime/cuda/cublaslt.h"

#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/library_search.h"
#include "runtime/op_registry.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;

constexpr DType F32 = DType::kFloat32, F16 = DType::kFloat16, BF16 = DType::kBFloat16;

double Tolerance(DType dtype, bool tf32) {
  if (dtype != F32) return 1e-2;
  return tf32 ? 1e-3 : 1e-5;
}

// `values` rounded to `dtype` (as float32 first, the way the CPU kernels convert), and back.
std::vector<uint8_t> ToBytes(const std::vector<double>& values, DType dtype) {
  std::vector<float> as_float(values.begin(), values.end());
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  const int64_t n = static_cast<int64_t>(values.size());
  kernels::CastCpu({as_float.data(), F32, {n}}, {bytes.data(), dtype, {n}});
  return bytes;
}
std::vector<double> FromBytes(const std::vector<uint8_t>& bytes, DType dtype) {
  const int64_t n = static_cast<int64_t>(bytes.size() / DTypeSize(dtype));
  std::vector<float> as_float(n);
  kernels::CastCpu({bytes.data(), dtype, {n}}, {as_float.data(), F32, {n}});
  return {as_float.begin(), as_float.end()};
}

double Gelu(double x) {  // the tanh approximation, as cuBLASLt's epilogue computes it
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// ||out - ref|| / ||ref||.
double RelativeError(const std::vector<double>& out, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

// A case: the shape, and whether a and b are one matrix broadcast over the batch.
struct Case {
  MatmulShape shape;
  bool broadcast_a = false;
  bool broadcast_b = false;
};

std::string Describe(const Case& c) { return DescribeMatmul(c.shape); }

class CublasLtMatmulTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
    if (!cu.ok()) {
      skip_ = new std::string(absl::StrCat("no CUDA driver: ", cu.status().message()));
      return;
    }
    cu_ = *cu;
    int count = 0;
    if (cu_->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      skip_ = new std::string("no CUDA device");
      return;
    }
    CUdevice device = 0;
    cu_->cuDeviceGet(&device, 0);
    cu_->cuDevicePrimaryCtxRetain(&context_, device);
    cu_->cuCtxSetCurrent(context_);
    int sms = 0;
    cu_->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    absl::StatusOr<std::unique_ptr<CublasLtMatmul>> blas =
        CublasLtMatmul::Create(CudaLibrarySearchDirs({}), sms);
    if (!blas.ok()) {
      skip_ = new std::string(std::string(blas.status().message()));
      return;
    }
    blas_ = blas->release();
    std::printf("cuBLASLt %lld from %s\n", static_cast<long long>(blas_->library().version),
                blas_->library().path.c_str());
    cu_->cuStreamCreateWithPriority(&stream_, CU_STREAM_NON_BLOCKING, 0);
    cu_->cuMemAlloc(&workspace_, CublasLtMatmul::kWorkspaceBytes);
  }

  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    ASSERT_EQ(cu_->cuCtxSetCurrent(context_), CUDA_SUCCESS);
    seed_ = ::gpukit::testing::TestSeed();
    rng_.seed(seed_);
  }

  std::vector<double> Random(int64_t n) {
    std::uniform_real_distribution<double> magnitude(0.25, 2.0);
    std::bernoulli_distribution negative(0.5);
    std::vector<double> v(n);
    for (double& x : v) x = magnitude(rng_) * (negative(rng_) ? -1 : 1);
    return v;
  }

  CUdeviceptr Upload(const std::vector<uint8_t>& bytes) {
    CUdeviceptr ptr = 0;
    EXPECT_EQ(cu_->cuMemAlloc(&ptr, bytes.size()), CUDA_SUCCESS);
    EXPECT_EQ(cu_->cuMemcpyHtoDAsync(ptr, bytes.data(), bytes.size(), stream_), CUDA_SUCCESS);
    EXPECT_EQ(cu_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    owned_.push_back(ptr);
    return ptr;
  }

  void TearDown() override {
    for (CUdeviceptr ptr : owned_) cu_->cuMemFree(ptr);
  }

  // Runs `c` on cuBLASLt and checks it against the host reference; returns the error.
  double Check(const Case& c) {
    SCOPED_TRACE(::testing::Message()
                 << Describe(c) << ", seed " << seed_ << " (GPUKIT_TEST_SEED)");
    const MatmulShape& s = c.shape;
    const int64_t a_matrices = c.broadcast_a ? 1 : s.batch;
    const int64_t b_matrices = c.broadcast_b ? 1 : s.batch;
    // As the GPU will see them: rounded to the dtype.
    const std::vector<uint8_t> a_bytes = ToBytes(Random(a_matrices * s.m * s.k), s.dtype);
    const std::vector<uint8_t> b_bytes = ToBytes(Random(b_matrices * s.k * s.n), s.dtype);
    const bool has_bias = s.epilogue != MatmulEpilogue::kNone;
    const std::vector<uint8_t> bias_bytes = ToBytes(Random(has_bias ? s.n : 1), s.dtype);
    const std::vector<double> a = FromBytes(a_bytes, s.dtype), b = FromBytes(b_bytes, s.dtype),
                              bias = FromBytes(bias_bytes, s.dtype);

    std::vector<double> ref(s.batch * s.m * s.n);
    for (int64_t batch = 0; batch < s.batch; ++batch) {
      const double* ab = a.data() + (c.broadcast_a ? 0 : batch * s.m * s.k);
      const double* bb = b.data() + (c.broadcast_b ? 0 : batch * s.k * s.n);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < s.k; ++l) {
            sum += (s.transpose_a ? ab[l * s.m + i] : ab[i * s.k + l]) *
                   (s.transpose_b ? bb[j * s.k + l] : bb[l * s.n + j]);
          }
          if (has_bias) sum += bias[j];
          if (s.epilogue == MatmulEpilogue::kBiasGelu) sum = Gelu(sum);
          ref[batch * s.m * s.n + i * s.n + j] = sum;
        }
      }
    }

    MatmulShape shape = s;
    shape.a_batch_stride = c.broadcast_a || s.batch == 1 ? 0 : s.m * s.k;
    shape.b_batch_stride = c.broadcast_b || s.batch == 1 ? 0 : s.k * s.n;
    MatmulBuffers buffers;
    buffers.a = Upload(a_bytes);
    buffers.b = Upload(b_bytes);
    buffers.bias = has_bias ? Upload(bias_bytes) : 0;
    // The output is poisoned (0xff bytes: NaN in every float dtype) so an unwritten element
    // cannot pass.
    buffers.out = Upload(std::vector<uint8_t>(ref.size() * DTypeSize(s.dtype), 0xff));
    buffers.workspace = workspace_;
    buffers.workspace_bytes = CublasLtMatmul::kWorkspaceBytes;
    const absl::Status status = blas_->Matmul(stream_, shape, buffers);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return 1;
    EXPECT_EQ(cu_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    std::vector<uint8_t> out_bytes(ref.size() * DTypeSize(s.dtype));
    EXPECT_EQ(cu_->cuMemcpyDtoHAsync(out_bytes.data(), buffers.out, out_bytes.size(), stream_),
              CUDA_SUCCESS);
    EXPECT_EQ(cu_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    const std::vector<double> out = FromBytes(out_bytes, s.dtype);
    const double error = RelativeError(out, ref);
    EXPECT_LE(error, Tolerance(s.dtype, s.allow_tf32)) << "relative error " << error;
    return error;
  }

  static MatmulShape Shape(DType dtype, int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
    MatmulShape s;
    s.dtype = dtype;
    s.m = m;
    s.n = n;
    s.k = k;
    s.batch = batch;
    return s;
  }

  static inline std::string* skip_ = nullptr;
  static inline const CudaDriver* cu_ = nullptr;
  static inline CUcontext context_ = nullptr;
  static inline CublasLtMatmul* blas_ = nullptr;
  static inline CUstream stream_ = nullptr;
  static inline CUdeviceptr workspace_ = 0;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::vector<CUdeviceptr> owned_;
};

TEST_F(CublasLtMatmulTest, SizesInEveryDtype) {
  for (DType dtype : {F32, F16, BF16}) {
    Check({Shape(dtype, 1, 1, 1)});
    Check({Shape(dtype, 17, 33, 9)});
    Check({Shape(dtype, 256, 256, 256)});
    Check({Shape(dtype, 3, 1000, 70)});
    Check({Shape(dtype, 1, 80, 48)});  // a 1-d a (NumPy's vector) is one row
    Check({Shape(dtype, 64, 1, 48)});  // a 1-d b is one column: D's leading dimension is 1
  }
}

TEST_F(CublasLtMatmulTest, Float32IsNotTf32UnlessAllowed) {
  MatmulShape exact = Shape(F32, 256, 256, 256);
  const double exact_error = Check({exact});
  MatmulShape tf32 = exact;
  tf32.allow_tf32 = true;
  const double tf32_error = Check({tf32});
  std::printf("256^3 float32 relative error: exact %.2e, tf32 %.2e\n", exact_error, tf32_error);
  EXPECT_LT(exact_error, 1e-5);
}

TEST_F(CublasLtMatmulTest, Tf32Sizes) {
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{17, 33, 9}, std::tuple{512, 384, 640}}) {
    MatmulShape s = Shape(F32, m, n, k);
    s.allow_tf32 = true;
    Check({s});
  }
}

TEST_F(CublasLtMatmulTest, StridedBatches) {
  for (DType dtype : {F32, F16, BF16}) {
    Check({Shape(dtype, 17, 33, 9, 4)});
    Check({Shape(dtype, 64, 48, 40, 7)});
    Check({Shape(dtype, 1, 1, 1, 3)});
  }
}

// Batch stride 0: one matrix for every entry of the batch.
TEST_F(CublasLtMatmulTest, BroadcastBatches) {
  for (DType dtype : {F32, F16, BF16}) {
    Check({Shape(dtype, 17, 33, 9, 4), /*broadcast_a=*/true, /*broadcast_b=*/false});
    Check({Shape(dtype, 17, 33, 9, 4), /*broadcast_a=*/false, /*broadcast_b=*/true});
    Check({Shape(dtype, 64, 64, 64, 5), /*broadcast_a=*/false, /*broadcast_b=*/true});
  }
}

TEST_F(CublasLtMatmulTest, Transposes) {
  for (DType dtype : {F32, F16, BF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        MatmulShape s = Shape(dtype, 17, 33, 9);
        s.transpose_a = ta;
        s.transpose_b = tb;
        Check({s});
        MatmulShape batched = Shape(dtype, 40, 24, 56, 3);
        batched.transpose_a = ta;
        batched.transpose_b = tb;
        Check({batched});
        Check({batched, /*broadcast_a=*/true, /*broadcast_b=*/false});
      }
    }
  }
}

TEST_F(CublasLtMatmulTest, BiasAndGeluEpilogues) {
  for (DType dtype : {F32, F16, BF16}) {
    for (MatmulEpilogue epilogue : {MatmulEpilogue::kBias, MatmulEpilogue::kBiasGelu}) {
      for (MatmulShape s :
           {Shape(dtype, 17, 33, 9), Shape(dtype, 128, 256, 64), Shape(dtype, 32, 64, 16, 3)}) {
        s.epilogue = epilogue;
        Check({s});
      }
    }
  }
}

TEST_F(CublasLtMatmulTest, RejectsWhatItCannotRun) {
  MatmulBuffers buffers;
  buffers.a = buffers.b = buffers.out = workspace_;
  MatmulShape s = Shape(F32, 4, 4, 4);
  s.epilogue = MatmulEpilogue::kBias;  // without a bias
  EXPECT_THAT(blas_->Matmul(stream_, s, buffers), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(blas_->Matmul(stream_, Shape(DType::kInt32, 4, 4, 4), buffers),
              StatusIs(absl::StatusCode::kInvalidArgument));
  buffers.workspace_bytes = CublasLtMatmul::kWorkspaceBytes + 1;
  EXPECT_THAT(blas_->Matmul(stream_, Shape(F32, 4, 4, 4), buffers),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CublasLtMatmulTest, PlansAreCachedPerShape) {
  const size_t before = blas_->plan_count();
  Check({Shape(F16, 96, 80, 48)});
  const size_t after_first = blas_->plan_count();
  EXPECT_EQ(after_first, before + 1);
  Check({Shape(F16, 96, 80, 48)});
  EXPECT_EQ(blas_->plan_count(), after_first);
}

// ---- Through the CUDA device ----

// ---- Slices: bitwise the whole ----

// Runs `shape` whole and in slices of about `max_slice_flops` on random inputs and compares
// the two outputs byte for byte. The outputs start with different poison (0xff, 0xfe
// bytes), so an element neither run wrote cannot compare equal.
void ExpectSlicesGiveTheWhole(CublasLtMatmul& blas, const CudaDriver& cu, CUstream stream,
                              CUdeviceptr workspace, const MatmulShape& shape,
                              double max_slice_flops, std::mt19937& rng) {
  SCOPED_TRACE(DescribeMatmul(shape));
  const int64_t a_matrices = shape.a_batch_stride == 0 ? 1 : shape.batch;
  const int64_t b_matrices = shape.b_batch_stride == 0 ? 1 : shape.batch;
  const int64_t out_elements = shape.batch * shape.m * shape.n;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  auto random_bytes = [&](int64_t count) {
    std::vector<double> v(count);
    for (double& x : v) x = value(rng);
    return ToBytes(v, shape.dtype);
  };
  const size_t element = DTypeSize(shape.dtype);
  std::vector<CUdeviceptr> owned;
  auto upload = [&](const std::vector<uint8_t>& bytes) {
    CUdeviceptr ptr = 0;
    EXPECT_EQ(cu.cuMemAlloc(&ptr, bytes.size()), CUDA_SUCCESS);
    EXPECT_EQ(cu.cuMemcpyHtoD(ptr, bytes.data(), bytes.size()), CUDA_SUCCESS);
    owned.push_back(ptr);
    return ptr;
  };
  MatmulBuffers whole;
  whole.a = upload(random_bytes(a_matrices * shape.m * shape.k));
  whole.b = upload(random_bytes(b_matrices * shape.k * shape.n));
  whole.bias = shape.epilogue != MatmulEpilogue::kNone ? upload(random_bytes(shape.n)) : 0;
  whole.workspace = workspace;
  whole.workspace_bytes = CublasLtMatmul::kWorkspaceBytes;
  MatmulBuffers sliced = whole;
  whole.out = upload(std::vector<uint8_t>(out_elements * element, 0xff));
  sliced.out = upload(std::vector<uint8_t>(out_elements * element, 0xfe));
  // The slices the plan cuts along its algorithm's tiles and waves.
  absl::StatusOr<CublasLtMatmul::SlicedRun> run = blas.Slicing(shape, sliced, max_slice_flops);
  ASSERT_TRUE(run.ok()) << run.status();
  const MatmulSlicing& slicing = run->slicing;
  if (MatmulWaves(shape, run->grid) == 0) {
    std::printf("%s: the algorithm's tile is not in this build's table; cut by FLOPs\n",
                DescribeMatmul(shape).c_str());
  }
  ASSERT_GT(slicing.count, 1) << "the case must slice (" << run->grid.tile_rows << " x "
                              << run->grid.tile_cols << " tiles, " << MatmulWaves(shape, run->grid)
                              << " waves)";

  const int64_t sliced_before = blas.sliced_matmul_count();
  const int64_t slices_before = blas.slice_count();
  GPUKIT_EXPECT_OK(blas.Matmul(stream, shape, whole));
  GPUKIT_EXPECT_OK(blas.Matmul(stream, shape, sliced, max_slice_flops));
  EXPECT_EQ(cu.cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(blas.sliced_matmul_count(), sliced_before + 1);
  EXPECT_EQ(blas.slice_count(), slices_before + slicing.count);
  std::vector<uint8_t> whole_bytes(out_elements * element), sliced_bytes(out_elements * element);
  EXPECT_EQ(cu.cuMemcpyDtoH(whole_bytes.data(), whole.out, whole_bytes.size()), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemcpyDtoH(sliced_bytes.data(), sliced.out, sliced_bytes.size()), CUDA_SUCCESS);
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < whole_bytes.size(); ++i) {
    if (whole_bytes[i] != sliced_bytes[i]) {
      if (first < 0) first = static_cast<int64_t>(i / element);
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << differ << " bytes differ, the first in element " << first << " of "
                       << out_elements << " (" << slicing.count << " slices of "
                       << slicing.per_slice << ")";
  for (CUdeviceptr ptr : owned) cu.cuMemFree(ptr);
}

// Every dtype (float32 exact and TF32), row slices and batch slices, transposes, a bias
// epilogue, slices that do not divide the rows evenly. Each product spans several waves of
// the GPU's SMs: a slice is at least about one wave (PlanMatmulSlices).
TEST_F(CublasLtMatmulTest, SlicedMatmulsAreBitwiseTheWhole) {
  for (DType dtype : {F32, F16, BF16}) {
    for (bool tf32 : {false, true}) {
      if (tf32 && dtype != F32) continue;
      MatmulShape rows = Shape(dtype, 8192 + 3 * 128 + 40, 4096, 1024);
      rows.allow_tf32 = tf32;
      ExpectSlicesGiveTheWhole(*blas_, *cu_, stream_, workspace_, rows, MatmulFlops(rows) / 7,
                               rng_);
      MatmulShape transposed_b = rows;
      transposed_b.transpose_b = true;
      ExpectSlicesGiveTheWhole(*blas_, *cu_, stream_, workspace_, transposed_b,
                               MatmulFlops(rows) / 3, rng_);
      MatmulShape batch = Shape(dtype, 1024, 2048, 1024, 12);
      batch.allow_tf32 = tf32;
      batch.a_batch_stride = batch.m * batch.k;
      batch.b_batch_stride = 0;  // one b for every entry
      MatmulShape entry = batch;
      entry.batch = 1;
      ExpectSlicesGiveTheWhole(*blas_, *cu_, stream_, workspace_, batch,
                               2 * MatmulFlops(entry), rng_);
      MatmulShape biased = rows;
      biased.epilogue = MatmulEpilogue::kBias;
      ExpectSlicesGiveTheWhole(*blas_, *cu_, stream_, workspace_, biased, MatmulFlops(rows) / 4,
                               rng_);
    }
  }
}

// The slices count the SMs of the stream they run on: on 32 SMs they are those of the same
// tiles with 32 SMs a wave, and the grid Slicing reports says so.
TEST_F(CublasLtMatmulTest, SlicesCountTheStreamsSms) {
  const MatmulShape shape = Shape(BF16, 8192, 2048, 4096);
  MatmulBuffers buffers;
  buffers.a = workspace_;  // only the addresses' alignment matters to a plan
  buffers.b = workspace_;
  buffers.out = workspace_;
  buffers.workspace = workspace_;
  buffers.workspace_bytes = CublasLtMatmul::kWorkspaceBytes;
  const double target = MatmulFlops(shape) / 16;
  GPUKIT_ASSERT_OK_AND_ASSIGN(CublasLtMatmul::SlicedRun all,
                              blas_->Slicing(shape, buffers, target));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CublasLtMatmul::SlicedRun part,
                              blas_->Slicing(shape, buffers, target, 32));
  if (MatmulWaves(shape, all.grid) == 0) GTEST_SKIP() << "the algorithm's tile is not known";
  EXPECT_EQ(part.grid.multiprocessors, 32);
  EXPECT_EQ(part.grid.tile_rows, all.grid.tile_rows);
  EXPECT_EQ(part.slicing, PlanMatmulSlices(shape, target, part.grid));
  EXPECT_EQ(all.slicing, PlanMatmulSlices(shape, target, all.grid));
  std::printf("%s in slices of %.3g FLOPs: %lld on %lld SMs, %lld on 32\n",
              DescribeMatmul(shape).c_str(), target, static_cast<long long>(all.slicing.count),
              static_cast<long long>(all.grid.multiprocessors),
              static_cast<long long>(part.slicing.count));
}

// The large products the QoS benchmark floods with, in 100 us slices as a low-priority stream
// runs them on an H100.
TEST_F(CublasLtMatmulTest, LargeProductsSliceBitwise) {
  for (DType dtype : {F16, BF16}) {
    const MatmulShape big = Shape(dtype, 8192, 8192, 8192);
    ExpectSlicesGiveTheWhole(*blas_, *cu_, stream_, workspace_, big, 7.6e10, rng_);
  }
  MatmulShape tf32 = Shape(F32, 4096, 4096, 4096);
  tf32.allow_tf32 = true;
  ExpectSlicesGiveTheWhole(*blas_, *cu_, stream_, workspace_, tf32, 3.7e10, rng_);
}

class CudaDeviceMatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // No JIT compiler and no precompiled kernels: gpukit's own kernels are unavailable, so a
    // matmul that works went through cuBLASLt and one that falls back says so
    // (UNIMPLEMENTED).
    absl::StatusOr<std::unique_ptr<CudaDevice>> device =
        CudaDevice::Create({.use_precompiled_kernels = false});
    if (!device.ok()) GTEST_SKIP() << "no usable CUDA device: " << device.status();
    device_ = *std::move(device);
    if (!device_->cublaslt_available()) GTEST_SKIP() << "no cuBLASLt (see the log)";
    GPUKIT_ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream(StreamPriority::kNormal));
  }

  void TearDown() override {
    if (device_ == nullptr || stream_.value == 0) return;
    for (BufferId buffer : owned_) device_->Free(buffer).IgnoreError();
    GPUKIT_EXPECT_OK(device_->DestroyStream(stream_));
    // The stream's cuBLASLt workspace went with it.
    EXPECT_EQ(device_->GetMemoryInfo().used_bytes, 0);
  }

  absl::StatusOr<BufferId> Upload(const std::vector<float>& values, DType dtype) {
    std::vector<double> wide(values.begin(), values.end());
    const std::vector<uint8_t> bytes = ToBytes(wide, dtype);
    GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device_->Allocate(std::max<size_t>(bytes.size(), 1)));
    owned_.push_back(buffer);
    GPUKIT_RETURN_IF_ERROR(
        device_->CopyHostToDevice(buffer, 0, bytes.data(), bytes.size(), stream_));
    GPUKIT_RETURN_IF_ERROR(SynchronizeStream(*device_, stream_));
    return buffer;
  }

  // Plans matmul(a, b) with `attrs`, allocates its output and runs it on `stream`.
  absl::StatusOr<BufferId> Matmul(const OperandDesc& a, BufferId a_buffer, const OperandDesc& b,
                                  BufferId b_buffer, AttrMap attrs, StreamId stream) {
    const OpRegistry& registry = OpRegistry::Builtin();
    GPUKIT_ASSIGN_OR_RETURN(const OpDef* op, registry.Find("matmul"));
    GPUKIT_ASSIGN_OR_RETURN(OpPlan plan, registry.Plan(*op, {a, b}, attrs));
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(plan.output.shape, plan.output.dtype));
    GPUKIT_ASSIGN_OR_RETURN(BufferId out, device_->Allocate(std::max<int64_t>(bytes, 1)));
    owned_.push_back(out);
    OpLaunch launch;
    launch.op = op;
    launch.plan = plan;
    launch.inputs.resize(2);
    launch.inputs[0].buffer = a_buffer;
    launch.inputs[0].desc = a.tensor;
    launch.inputs[1].buffer = b_buffer;
    launch.inputs[1].desc = b.tensor;
    launch.output = out;
    GPUKIT_RETURN_IF_ERROR(device_->RunOp(launch, stream));
    GPUKIT_RETURN_IF_ERROR(SynchronizeStream(*device_, stream));
    return out;
  }

  absl::StatusOr<std::vector<double>> Download(BufferId buffer, int64_t count, DType dtype) {
    std::vector<uint8_t> bytes(count * DTypeSize(dtype));
    GPUKIT_RETURN_IF_ERROR(
        device_->CopyDeviceToHost(bytes.data(), buffer, 0, bytes.size(), stream_));
    GPUKIT_RETURN_IF_ERROR(SynchronizeStream(*device_, stream_));
    return FromBytes(bytes, dtype);
  }

  static OperandDesc Desc(DType dtype, Shape shape) {
    OperandDesc d;
    d.tensor = {dtype, std::move(shape)};
    return d;
  }

  std::unique_ptr<CudaDevice> device_;
  StreamId stream_;
  std::vector<BufferId> owned_;
};

TEST_F(CudaDeviceMatmulTest, RunOpMatmulGoesThroughCublasLt) {
  for (DType dtype : {F32, F16, BF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload({1, 2, 3, 4, 5, 6}, dtype));     // [2, 3]
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Upload({7, 8, 9, 10, 11, 12}, dtype));  // [3, 2]
    const int64_t before = device_->cublaslt_matmul_count();
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        BufferId out, Matmul(Desc(dtype, {2, 3}), a, Desc(dtype, {3, 2}), b, {}, stream_));
    EXPECT_EQ(device_->cublaslt_matmul_count(), before + 1);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<double> c, Download(out, 4, dtype));
    EXPECT_THAT(c, ElementsAre(58, 64, 139, 154));  // exact in every dtype
  }
}

TEST_F(CudaDeviceMatmulTest, AllowTf32AndBroadcastBatchesGoThroughCublasLt) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload({1, 2, 3, 4, 5, 6, 1, 1, 1, 1, 1, 1}, F32));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Upload({7, 8, 9, 10, 11, 12}, F32));
  const int64_t before = device_->cublaslt_matmul_count();
  // [2, 2, 3] @ [3, 2]: b broadcast over the batch (stride 0), with TF32 allowed (these
  // small integers are exact in TF32).
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId out, Matmul(Desc(F32, {2, 2, 3}), a, Desc(F32, {3, 2}), b,
                                                   {{"allow_tf32", true}}, stream_));
  EXPECT_EQ(device_->cublaslt_matmul_count(), before + 1);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<double> c, Download(out, 8, F32));
  EXPECT_THAT(c, ElementsAre(58, 64, 139, 154, 27, 30, 27, 30));
}

TEST_F(CudaDeviceMatmulTest, WhatCublasLtDoesNotTakeFallsBack) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a16, Upload({1, 2, 3, 4}, F16));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b32, Upload({1, 2, 3, 4}, F32));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a32, Upload({1, 2, 3, 4, 5, 6, 7, 8}, F32));
  const int64_t before = device_->cublaslt_matmul_count();
  // Mixed dtypes, and batches broadcast along different axes ([2, 1] against [1, 2]): both
  // go to gpukit's kernel, which this device (no JIT compiler) does not have.
  EXPECT_THAT(Matmul(Desc(F16, {2, 2}), a16, Desc(F32, {2, 2}), b32, {}, stream_),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(
      Matmul(Desc(F32, {2, 1, 1, 2}), a32, Desc(F32, {1, 2, 2, 1}), a32, {}, stream_).status(),
      StatusIs(absl::StatusCode::kUnimplemented));
  // Nothing to compute: done without either.
  GPUKIT_EXPECT_OK(Matmul(Desc(F32, {0, 2}), a32, Desc(F32, {2, 2}), b32, {}, stream_).status());
  EXPECT_EQ(device_->cublaslt_matmul_count(), before);
  // A batch of [2, 1] against [1, 1] has one stride per input (b's is 0): cuBLASLt's.
  GPUKIT_EXPECT_OK(
      Matmul(Desc(F32, {2, 1, 2, 2}), a32, Desc(F32, {1, 1, 2, 2}), b32, {}, stream_).status());
  EXPECT_EQ(device_->cublaslt_matmul_count(), before + 1);
}

// A low-priority stream runs a large matmul in slices, a high-priority one whole, and the
// two results are the same bytes; the normal-priority stream of the fixture slices only
// above its longer target.
TEST_F(CudaDeviceMatmulTest, LowPriorityStreamsSliceLargeMatmulsBitwise) {
  // 1.4e11 FLOPs: about 180 us in bfloat16 on an H100, so sliced at 100 us in every dtype.
  const int64_t m = 8192, k = 4096, n = 2048;
  std::mt19937 rng(::gpukit::testing::TestSeed());
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> a_values(m * k), b_values(k * n);
  for (float& v : a_values) v = value(rng);
  for (float& v : b_values) v = value(rng);
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId low, device_->CreateStream(StreamPriority::kLow));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId high, device_->CreateStream(StreamPriority::kHigh));
  for (DType dtype : {F32, BF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload(a_values, dtype));
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Upload(b_values, dtype));
    const int64_t sliced_before = device_->cublaslt_sliced_matmul_count();
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        BufferId whole, Matmul(Desc(dtype, {m, k}), a, Desc(dtype, {k, n}), b, {}, high));
    EXPECT_EQ(device_->cublaslt_sliced_matmul_count(), sliced_before);
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        BufferId sliced, Matmul(Desc(dtype, {m, k}), a, Desc(dtype, {k, n}), b, {}, low));
    EXPECT_EQ(device_->cublaslt_sliced_matmul_count(), sliced_before + 1);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<double> w, Download(whole, m * n, dtype));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<double> s, Download(sliced, m * n, dtype));
    int64_t differ = 0;
    for (int64_t i = 0; i < m * n; ++i) differ += w[i] != s[i] || std::isnan(w[i]);
    EXPECT_EQ(differ, 0);
  }
  GPUKIT_EXPECT_OK(device_->DestroyStream(low));
  GPUKIT_EXPECT_OK(device_->DestroyStream(high));
}

// A stream confined to a quarter of the SMs (a green context) runs cuBLASLt matmuls, events
// and copies, and its results are the same bytes as a stream on every SM.
TEST_F(CudaDeviceMatmulTest, StreamsOnPartOfTheSmsRunMatmulsBitwise) {
  const int total = device_->cuda_info().multiprocessor_count;
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      StreamId part, device_->CreateStream({.priority = StreamPriority::kLow, .sm_share = 0.25}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int sms, device_->StreamSmCount(part));
  std::printf("a stream asking for 0.25 of %d SMs runs on %d\n", total, sms);
  EXPECT_LT(sms, total);
  EXPECT_GE(sms, 1);
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId whole, device_->CreateStream(StreamPriority::kHigh));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int all, device_->StreamSmCount(whole));
  EXPECT_EQ(all, total);
  const int64_t n = 1024;
  std::mt19937 rng(::gpukit::testing::TestSeed());
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> values(n * n);
  for (float& v : values) v = value(rng);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload(values, BF16));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      BufferId on_part, Matmul(Desc(BF16, {n, n}), a, Desc(BF16, {n, n}), a, {}, part));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      BufferId on_all, Matmul(Desc(BF16, {n, n}), a, Desc(BF16, {n, n}), a, {}, whole));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<double> p, Download(on_part, n * n, BF16));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<double> w, Download(on_all, n * n, BF16));
  int64_t differ = 0;
  for (int64_t i = 0; i < n * n; ++i) differ += p[i] != w[i] || std::isnan(p[i]);
  EXPECT_EQ(differ, 0);
  // Events on it measure its work.
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(part));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      BufferId again, Matmul(Desc(BF16, {n, n}), a, Desc(BF16, {n, n}), a, {}, part));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(part));
  GPUKIT_ASSERT_OK(device_->WaitEvent(end));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t ns, device_->EventElapsedNs(start, end));
  EXPECT_GT(ns, 0);
  std::printf("1024^3 bf16 on %d of %d SMs: %.1f us between its events\n", sms, total, ns / 1e3);
  (void)again;
  GPUKIT_EXPECT_OK(device_->DestroyEvent(start));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(end));
  GPUKIT_EXPECT_OK(device_->DestroyStream(part));
  GPUKIT_EXPECT_OK(device_->DestroyStream(whole));
}

// Two threads, each with its own stream (and so its own workspace), many matmuls at once.
TEST_F(CudaDeviceMatmulTest, ConcurrentStreamsEachGetTheirOwnWorkspace) {
  const int64_t n = 192;
  std::vector<float> ones(n * n, 1.0f);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload(ones, F32));
  const int64_t before = device_->cublaslt_matmul_count();
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<StreamId> stream = device_->CreateStream(StreamPriority::kNormal);
      if (!stream.ok()) {
        results[t] = stream.status();
        return;
      }
      const OpRegistry& registry = OpRegistry::Builtin();
      const OpDef* op = registry.Find("matmul").value();
      const OperandDesc d = Desc(F32, {n, n});
      const OpPlan plan = registry.Plan(*op, {d, d}, {}).value();
      absl::StatusOr<BufferId> out = device_->Allocate(n * n * 4);
      if (!out.ok()) {
        results[t] = out.status();
        return;
      }
      OpLaunch launch;
      launch.op = op;
      launch.plan = plan;
      launch.inputs.resize(2);
      for (OpOperand& in : launch.inputs) {
        in.buffer = a;
        in.desc = d.tensor;
      }
      launch.output = *out;
      for (int i = 0; i < 50 && results[t].ok(); ++i) results[t] = device_->RunOp(launch, *stream);
      std::vector<float> host(n * n);
      if (results[t].ok()) {
        results[t] = device_->CopyDeviceToHost(host.data(), *out, 0, n * n * 4, *stream);
      }
      if (results[t].ok()) results[t] = SynchronizeStream(*device_, *stream);
      for (float v : host) {
        if (results[t].ok() && v != static_cast<float>(n)) {
          results[t] = absl::InternalError(absl::StrCat("element ", v, " != ", n));
        }
      }
      device_->Free(*out).IgnoreError();
      absl::Status destroyed = device_->DestroyStream(*stream);
      if (results[t].ok()) results[t] = destroyed;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) GPUKIT_EXPECT_OK(s);
  EXPECT_EQ(device_->cublaslt_matmul_count(), before + 100);
}

}  // namespace
}  // namespace gpukit
