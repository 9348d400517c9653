// Matmul on the CUDA device through CudaDevice::RunOp (cuBLASLt), in TFLOP/s, for the
// shapes and dtypes of PyTorch's reference (tests/bench/torch_matmul_reference.py, run on
// the same GPU): square n^3 for n in --sizes, float32 (exact and with allow_tf32), float16
// and bfloat16.
//
//   gpukit_matmul_bench [--sizes 4096,8192] [--reps 20] [--data pattern|random]
//                       [--log-level debug]
//
// Each case: the median over `reps` runs of the device time between two events around one
// RunOp, after 3 warm-up runs (the first builds the cuBLASLt plan). FLOPs are 2 n^3. Three
// runs of each case: whole (OpLaunch::sliceable false, as when no session of a higher
// class is open), and in slices as a normal- and a low-priority stream cut it when one is
// (CudaDeviceOptions::matmul_slices: 500 us and 100 us by default), with the slices per
// matmul and the speed against the whole. Inputs: "pattern" (the default) is (i % 7 + 1) / 8,
// exact in every dtype; "random" is standard normal values (the GPU draws more power on
// them, like on real weights, and may clock lower). A case that did not go through cuBLASLt
// says so (its time is then gpukit's own kernel's). Exits 1 without a GPU or cuBLASLt.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/op_registry.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

struct Options {
  std::vector<int64_t> sizes = {4096, 8192};
  int reps = 20;
  bool random = false;
};

int Die(const std::string& what) {
  std::fprintf(stderr, "gpukit_matmul_bench: %s\n", what.c_str());
  return 1;
}

struct Case {
  std::string name;
  DType dtype;
  bool allow_tf32;
};

absl::StatusOr<double> MedianSeconds(CudaDevice& device, StreamId stream, const OpLaunch& launch,
                                     int reps) {
  std::vector<double> times;
  for (int i = 0; i < reps + 3; ++i) {
    absl::StatusOr<EventId> start = device.RecordEvent(stream);
    if (!start.ok()) return start.status();
    if (absl::Status s = device.RunOp(launch, stream); !s.ok()) return s;
    absl::StatusOr<EventId> end = device.RecordEvent(stream);
    if (!end.ok()) return end.status();
    if (absl::Status s = device.WaitEvent(*end); !s.ok()) return s;
    absl::StatusOr<int64_t> ns = device.EventElapsedNs(*start, *end);
    if (!ns.ok()) return ns.status();
    device.DestroyEvent(*start).IgnoreError();
    device.DestroyEvent(*end).IgnoreError();
    if (i >= 3) times.push_back(static_cast<double>(*ns) * 1e-9);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int Run(const Options& options) {
  CudaDeviceOptions device_options;
  // The JIT compiler is optional here: it is only the fallback's.
  if (absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({}); jit.ok()) {
    device_options.jit = std::shared_ptr<JitCompiler>(*std::move(jit));
  }
  absl::StatusOr<std::unique_ptr<CudaDevice>> created = CudaDevice::Create(device_options);
  if (!created.ok()) return Die(created.status().ToString());
  CudaDevice& device = **created;
  if (!device.cublaslt_available()) return Die("cuBLASLt is not available (see the log above)");
  absl::StatusOr<StreamId> stream = device.CreateStream(StreamPriority::kNormal);
  if (!stream.ok()) return Die(stream.status().ToString());
  absl::StatusOr<StreamId> low = device.CreateStream(StreamPriority::kLow);
  if (!low.ok()) return Die(low.status().ToString());
  std::printf("device: %s (%s), matmul through CudaDevice::RunOp, median of %d runs, %s inputs\n",
              device.properties().name.c_str(), device.cuda_info().arch.c_str(), options.reps,
              options.random ? "random" : "pattern");
  std::printf("%-17s %9s %9s | %-24s | %-24s\n", "case", "whole", "TFLOP/s",
              "normal-priority slices", "low-priority slices");

  const std::vector<Case> cases = {{"fp32", DType::kFloat32, false},
                                   {"tf32", DType::kFloat32, true},
                                   {"fp16", DType::kFloat16, false},
                                   {"bf16", DType::kBFloat16, false}};
  const OpRegistry& registry = OpRegistry::Builtin();
  const OpDef* matmul = registry.Find("matmul").value();
  for (const int64_t n : options.sizes) {
    const int64_t count = n * n;
    // (i % 7 + 1) / 8: non-zero and exact in float16 and bfloat16; or standard normal.
    std::vector<float> values(count);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < count; ++i) {
      values[i] = options.random ? normal(rng) : static_cast<float>(i % 7 + 1) * 0.125f;
    }
    for (const Case& c : cases) {
      const int64_t bytes = count * DTypeSize(c.dtype);
      std::vector<uint8_t> host(bytes);
      kernels::CastCpu({values.data(), DType::kFloat32, {count}}, {host.data(), c.dtype, {count}});
      std::vector<BufferId> buffers;
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<BufferId> b = device.Allocate(bytes);
        if (!b.ok()) return Die(b.status().ToString());
        buffers.push_back(*b);
      }
      for (int i = 0; i < 2; ++i) {
        if (absl::Status s = device.CopyHostToDevice(buffers[i], 0, host.data(), bytes, *stream);
            !s.ok()) {
          return Die(s.ToString());
        }
      }
      if (absl::Status s = SynchronizeStream(device, *stream); !s.ok()) return Die(s.ToString());

      OperandDesc desc;
      desc.tensor = {c.dtype, {n, n}};
      AttrMap attrs;
      if (c.allow_tf32) attrs["allow_tf32"] = true;
      absl::StatusOr<OpPlan> plan = registry.Plan(*matmul, {desc, desc}, attrs);
      if (!plan.ok()) return Die(plan.status().ToString());
      OpLaunch launch;
      launch.op = matmul;
      launch.plan = *plan;
      launch.inputs.resize(2);
      for (int i = 0; i < 2; ++i) {
        launch.inputs[i].buffer = buffers[i];
        launch.inputs[i].desc = desc.tensor;
      }
      launch.output = buffers[2];
      const int64_t before = device.cublaslt_matmul_count();
      launch.sliceable = false;
      absl::StatusOr<double> whole = MedianSeconds(device, *stream, launch, options.reps);
      if (!whole.ok()) return Die(absl::StrCat(c.name, ": ", whole.status().ToString()));
      const bool through_cublaslt = device.cublaslt_matmul_count() > before;
      const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * n;
      std::string line = absl::StrFormat("matmul %5d^3 %-4s %9.3f %9.1f", n, c.name, *whole * 1e3,
                                         flops / *whole / 1e12);
      launch.sliceable = true;
      for (StreamId on : {*stream, *low}) {
        const int64_t slices_before = device.cublaslt_slice_count();
        const int64_t sliced_before = device.cublaslt_sliced_matmul_count();
        absl::StatusOr<double> t = MedianSeconds(device, on, launch, options.reps);
        if (!t.ok()) return Die(absl::StrCat(c.name, ": ", t.status().ToString()));
        const int64_t sliced = device.cublaslt_sliced_matmul_count() - sliced_before;
        const int64_t slices = device.cublaslt_slice_count() - slices_before;
        absl::StrAppendFormat(&line, " | %9.3f ms %5.3fx %3d sl", *t * 1e3, *whole / *t,
                              sliced > 0 ? slices / sliced : 1);
      }
      std::printf("%s%s\n", line.c_str(),
                  through_cublaslt ? "" : "  (NOT through cuBLASLt: gpukit's kernel)");
      for (BufferId b : buffers) device.Free(b).IgnoreError();
    }
  }
  return device.DestroyStream(*stream).ok() && device.DestroyStream(*low).ok() ? 0 : 1;
}

}  // namespace
}  // namespace gpukit

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  gpukit::Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes") {
      options.sizes.clear();
      for (absl::string_view part : absl::StrSplit(argv[i + 1], ',')) {
        int64_t n = 0;
        if (!absl::SimpleAtoi(part, &n) || n <= 0) {
          std::fprintf(stderr, "bad size \"%s\"\n", std::string(part).c_str());
          return 2;
        }
        options.sizes.push_back(n);
      }
    } else if (flag == "--reps") {
      options.reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--log-level") {
      spdlog::set_level(spdlog::level::from_str(argv[i + 1]));  // debug: each plan's grid
    } else if (const std::string value = argv[i + 1];
               flag == "--data" && (value == "random" || value == "pattern")) {
      options.random = value == "random";
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--sizes 4096,8192] [--reps N] [--data pattern|random] [--log-level debug]\n",
          argv[0]);
      return 2;
    }
  }
  return gpukit::Run(options);
}
