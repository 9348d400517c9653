// The Device conformance suite: what every Device implementation must do, whatever it runs on.
//
// The suite is a value-parameterised fixture over a factory function; its tests live in
// device_conformance.cc. A backend instantiates it once in its own test binary by linking
// device_conformance.cc and naming a factory (Ray's store_client_test_base.h pattern):
//
//   INSTANTIATE_TEST_SUITE_P(
//       Cpu, DeviceConformanceTest,
//       ::testing::Values(DeviceConformanceParam{"Cpu", [] { return MakeCpuDevice(); }}),
//       DeviceConformanceParamName);
//
// The CUDA device will instantiate the same suite in a binary labelled `gpu`; its factory
// returns FAILED_PRECONDITION or UNAVAILABLE where no GPU exists, and the suite then skips:
//
//   gpukit_cc_test(NAME cuda_device_test
//     SRCS runtime/device_conformance.cc runtime/cuda_device_test.cc
//     DEPS gpukit::runtime LABELS gpu)
//
// The suite tests the interface's contract only (device.h): exact byte accounting, the
// meaning of worker threads and anything else backend-specific belongs to the backend's own
// tests. Every test frees what it allocates; TearDown checks that memory in use is back to
// where it was when the device was made.
//
// Thread safety: a fixture instance is used by one test on one thread (tests that need more
// threads start and join them themselves).
#ifndef GPUKIT_TESTS_UNIT_RUNTIME_DEVICE_CONFORMANCE_H_
#define GPUKIT_TESTS_UNIT_RUNTIME_DEVICE_CONFORMANCE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/device.h"
#include "runtime/op_registry.h"

namespace gpukit::testing {

struct DeviceConformanceParam {
  // Suffix of the test names: letters and digits only ("Cpu", "Cuda0").
  std::string name;
  // Makes a fresh device for each test. FAILED_PRECONDITION or UNAVAILABLE skip the test (no
  // such hardware here); any other error fails it.
  std::function<absl::StatusOr<std::unique_ptr<Device>>()> create;
};

inline std::string DeviceConformanceParamName(
    const ::testing::TestParamInfo<DeviceConformanceParam>& info) {
  return info.param.name;
}

class DeviceConformanceTest : public ::testing::TestWithParam<DeviceConformanceParam> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Device>> device = GetParam().create();
    if (absl::IsFailedPrecondition(device.status()) || absl::IsUnavailable(device.status())) {
      GTEST_SKIP() << "device not available here: " << device.status();
    }
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    baseline_used_bytes_ = device_->GetMemoryInfo().used_bytes;
    absl::StatusOr<StreamId> stream = device_->CreateStream(StreamPriority::kNormal);
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = *stream;
  }

  void TearDown() override {
    if (device_ == nullptr) return;
    for (BufferId buffer : owned_) device_->Free(buffer).IgnoreError();  // freed already: fine
    if (stream_.value != 0) {
      EXPECT_TRUE(device_->DestroyStream(stream_).ok());
    }
    EXPECT_EQ(device_->GetMemoryInfo().used_bytes, baseline_used_bytes_)
        << "the test left device memory allocated";
  }

  Device& device() { return *device_; }
  StreamId stream() const { return stream_; }

  // Allocates `bytes` and frees the buffer at TearDown unless the test freed it.
  absl::StatusOr<BufferId> Allocate(int64_t bytes) {
    GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device_->Allocate(bytes));
    owned_.push_back(buffer);
    return buffer;
  }

  absl::Status Sync() { return SynchronizeStream(*device_, stream_); }

  // Allocates a buffer holding `values` (copied and synchronised).
  template <typename T>
  absl::StatusOr<BufferId> Upload(const std::vector<T>& values) {
    const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(T));
    GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, Allocate(bytes));
    if (bytes > 0) {
      GPUKIT_RETURN_IF_ERROR(device_->CopyHostToDevice(buffer, 0, values.data(), bytes, stream_));
    }
    GPUKIT_RETURN_IF_ERROR(Sync());
    return buffer;
  }

  // Reads `count` elements of type T from `buffer` starting at element `first`.
  template <typename T>
  absl::StatusOr<std::vector<T>> Download(BufferId buffer, int64_t count, int64_t first = 0) {
    std::vector<T> values(static_cast<size_t>(count));
    const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
    if (bytes > 0) {
      GPUKIT_RETURN_IF_ERROR(device_->CopyDeviceToHost(
          values.data(), buffer, first * static_cast<int64_t>(sizeof(T)), bytes, stream_));
    }
    GPUKIT_RETURN_IF_ERROR(Sync());
    return values;
  }

  // An array operand of RunOp over `buffer`.
  static OpOperand ArrayOperand(BufferId buffer, DType dtype, Shape shape) {
    OpOperand operand;
    operand.buffer = buffer;
    operand.desc = {dtype, std::move(shape)};
    return operand;
  }
  static OpOperand ScalarOperand(ScalarValue value) {
    OpOperand operand;
    operand.is_scalar = true;
    operand.scalar = value;
    return operand;
  }

  struct OpResult {
    BufferId buffer;
    TensorDesc desc;
  };

  // Plans built-in `op` over `inputs` with the OpRegistry, allocates the output, runs the op
  // on the stream and waits for it.
  absl::StatusOr<OpResult> RunBuiltin(absl::string_view op, std::vector<OpOperand> inputs,
                                      const AttrMap& attrs = {}) {
    const OpRegistry& registry = OpRegistry::Builtin();
    GPUKIT_ASSIGN_OR_RETURN(const OpDef* def, registry.Find(op));
    std::vector<OperandDesc> descs;
    for (const OpOperand& in : inputs) {
      OperandDesc desc;
      desc.is_scalar = in.is_scalar;
      desc.tensor = in.desc;
      desc.scalar = in.scalar;
      descs.push_back(desc);
    }
    OpLaunch launch;
    launch.op = def;
    GPUKIT_ASSIGN_OR_RETURN(launch.plan, registry.Plan(*def, descs, attrs));
    launch.inputs = std::move(inputs);
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes,
                            ByteSize(launch.plan.output.shape, launch.plan.output.dtype));
    GPUKIT_ASSIGN_OR_RETURN(launch.output, Allocate(bytes));
    GPUKIT_RETURN_IF_ERROR(device_->RunOp(launch, stream_));
    GPUKIT_RETURN_IF_ERROR(Sync());
    return OpResult{launch.output, launch.plan.output};
  }

 private:
  std::unique_ptr<Device> device_;
  StreamId stream_;
  int64_t baseline_used_bytes_ = 0;
  std::vector<BufferId> owned_;
};

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_UNIT_RUNTIME_DEVICE_CONFORMANCE_H_
