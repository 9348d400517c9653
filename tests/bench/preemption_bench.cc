// How long a high-priority stream's matmul waits behind a low-priority flood of large
// matmuls on the same CUDA device, with the flood's matmuls whole and in slices of several
// lengths (CudaDeviceOptions::matmul_slices): the device-level mechanism behind
// QoS on the GPU's time, without gpukitd's request path.
//
//   gpukit_preemption_bench [--seconds 5] [--slices 0,200,100,50]
//
// Victim: one thread runs 1024^3 bfloat16 matmuls on a high-priority stream, one at a time,
// each timed on the host from RunOp to its completion event (what a caller waits for).
// Flood: two threads, each with its own low-priority stream, run 8192^3 bfloat16 matmuls,
// each waited for before the next (as gpukitd runs one request's op), as fast as they go.
// Scenarios: victim alone; flood alone (whole: its reference throughput); then victim and
// flood together for each slice length (0: whole). Reports victim p50 / p99 / p99.9 in us and
// as ratios to alone, and the flood's TFLOP/s as a ratio to flood alone. Exits 1 without a
// GPU or cuBLASLt.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/op_registry.h"

namespace gpukit {
namespace {

struct Options {
  double seconds = 5;
  std::vector<int64_t> slices_us = {0, 200, 100, 50};
};

int Die(const std::string& what) {
  std::fprintf(stderr, "gpukit_preemption_bench: %s\n", what.c_str());
  return 1;
}

// n x n bfloat16 inputs and output for one matmul, and its launch.
struct Product {
  std::vector<BufferId> buffers;
  OpLaunch launch;
  double flops = 0;
};

absl::StatusOr<Product> MakeProduct(CudaDevice& device, StreamId stream, int64_t n) {
  const OpRegistry& registry = OpRegistry::Builtin();
  const OpDef* matmul = registry.Find("matmul").value();
  const int64_t count = n * n;
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 7 + 1) * 0.125f;
  std::vector<uint8_t> host(count * 2);
  kernels::CastCpu({values.data(), DType::kFloat32, {count}},
                   {host.data(), DType::kBFloat16, {count}});
  Product p;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<BufferId> b = device.Allocate(count * 2);
    if (!b.ok()) return b.status();
    p.buffers.push_back(*b);
    if (i < 2) {
      if (absl::Status s = device.CopyHostToDevice(*b, 0, host.data(), host.size(), stream);
          !s.ok()) {
        return s;
      }
    }
  }
  if (absl::Status s = SynchronizeStream(device, stream); !s.ok()) return s;
  OperandDesc desc;
  desc.tensor = {DType::kBFloat16, {n, n}};
  absl::StatusOr<OpPlan> plan = registry.Plan(*matmul, {desc, desc}, {});
  if (!plan.ok()) return plan.status();
  p.launch.op = matmul;
  p.launch.plan = *plan;
  p.launch.inputs.resize(2);
  for (int i = 0; i < 2; ++i) {
    p.launch.inputs[i].buffer = p.buffers[i];
    p.launch.inputs[i].desc = desc.tensor;
  }
  p.launch.output = p.buffers[2];
  p.flops = 2.0 * static_cast<double>(n) * n * n;
  return p;
}

// Runs `p` on `stream` and waits for it; the host time it took.
absl::StatusOr<absl::Duration> RunAndWait(CudaDevice& device, StreamId stream, const Product& p) {
  const absl::Time start = absl::Now();
  if (absl::Status s = device.RunOp(p.launch, stream); !s.ok()) return s;
  absl::StatusOr<EventId> end = device.RecordEvent(stream);
  if (!end.ok()) return end.status();
  absl::Status waited = device.WaitEvent(*end);
  device.DestroyEvent(*end).IgnoreError();
  if (!waited.ok()) return waited;
  return absl::Now() - start;
}

struct Result {
  std::vector<double> victim_us;  // sorted
  double flood_tflops = 0;
  std::string error;
};

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  return sorted[i];
}

// One scenario on a device made with `slice` for its low-priority streams.
Result RunScenario(absl::Duration slice, bool victim, bool flood, double seconds) {
  Result result;
  CudaDeviceOptions options;
  options.matmul_slices.low_priority = slice;
  absl::StatusOr<std::unique_ptr<CudaDevice>> created = CudaDevice::Create(options);
  if (!created.ok()) {
    result.error = created.status().ToString();
    return result;
  }
  CudaDevice& device = **created;
  absl::StatusOr<StreamId> high = device.CreateStream(StreamPriority::kHigh);
  absl::StatusOr<StreamId> low[2] = {device.CreateStream(StreamPriority::kLow),
                                     device.CreateStream(StreamPriority::kLow)};
  if (!high.ok() || !low[0].ok() || !low[1].ok()) {
    result.error = "cannot create streams";
    return result;
  }
  absl::StatusOr<Product> small = MakeProduct(device, *high, 1024);
  absl::StatusOr<Product> big[2] = {MakeProduct(device, *low[0], 8192),
                                    MakeProduct(device, *low[1], 8192)};
  if (!small.ok() || !big[0].ok() || !big[1].ok()) {
    result.error = "cannot allocate the products";
    return result;
  }
  // Warm-up: plans, workspaces, clocks.
  for (int i = 0; i < 3; ++i) {
    (void)RunAndWait(device, *high, *small);
    (void)RunAndWait(device, *low[0], *big[0]);
    (void)RunAndWait(device, *low[1], *big[1]);
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> flood_ops{0};
  std::vector<std::thread> flooders;
  if (flood) {
    for (int t = 0; t < 2; ++t) {
      flooders.emplace_back([&, t] {
        while (!stop.load()) {
          if (RunAndWait(device, *low[t], *big[t]).ok()) flood_ops.fetch_add(1);
        }
      });
    }
  }
  const absl::Time start = absl::Now();
  const absl::Time until = start + absl::Seconds(seconds);
  if (victim) {
    while (absl::Now() < until) {
      absl::StatusOr<absl::Duration> took = RunAndWait(device, *high, *small);
      if (!took.ok()) {
        result.error = took.status().ToString();
        break;
      }
      result.victim_us.push_back(absl::ToDoubleMicroseconds(*took));
    }
  } else {
    absl::SleepFor(until - absl::Now());
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  for (std::thread& t : flooders) t.join();
  std::sort(result.victim_us.begin(), result.victim_us.end());
  result.flood_tflops = flood_ops.load() * big[0]->flops / elapsed / 1e12;
  return result;
}

int Run(const Options& options) {
  std::printf("gpukit_preemption_bench: victim 1024^3 bf16 (high priority) beside a flood of "
              "8192^3 bf16 from 2 threads (low priority), %.0f s per scenario\n",
              options.seconds);
  const Result victim_alone = RunScenario(absl::ZeroDuration(), true, false, options.seconds);
  if (!victim_alone.error.empty()) return Die(victim_alone.error);
  const Result flood_alone = RunScenario(absl::ZeroDuration(), false, true, options.seconds);
  if (!flood_alone.error.empty()) return Die(flood_alone.error);
  const double p50 = Percentile(victim_alone.victim_us, 0.5);
  const double p99 = Percentile(victim_alone.victim_us, 0.99);
  const double p999 = Percentile(victim_alone.victim_us, 0.999);
  std::printf("%-22s %9s %9s %9s   %8s %8s %8s   %9s %6s\n", "scenario", "p50 us", "p99 us",
              "p99.9 us", "x p50", "x p99", "x p99.9", "flood TF", "x");
  std::printf("%-22s %9.1f %9.1f %9.1f   %8s %8s %8s   %9s %6s\n", "victim alone", p50, p99, p999,
              "1.00", "1.00", "1.00", "-", "-");
  std::printf("%-22s %9s %9s %9s   %8s %8s %8s   %9.1f %6s\n", "flood alone", "-", "-", "-", "-",
              "-", "-", flood_alone.flood_tflops, "1.00");
  std::string json = absl::StrCat("{\"victim_alone_us\":{\"p50\":", p50, ",\"p99\":", p99,
                                  ",\"p999\":", p999,
                                  "},\"flood_alone_tflops\":", flood_alone.flood_tflops,
                                  ",\"together\":[");
  bool first = true;
  for (int64_t us : options.slices_us) {
    const Result r = RunScenario(absl::Microseconds(us), true, true, options.seconds);
    if (!r.error.empty()) return Die(r.error);
    const double q50 = Percentile(r.victim_us, 0.5), q99 = Percentile(r.victim_us, 0.99),
                 q999 = Percentile(r.victim_us, 0.999);
    const std::string name =
        us == 0 ? std::string("together, whole") : absl::StrCat("together, ", us, " us slices");
    std::printf("%-22s %9.1f %9.1f %9.1f   %8.2f %8.2f %8.2f   %9.1f %6.2f\n", name.c_str(), q50,
                q99, q999, q50 / p50, q99 / p99, q999 / p999, r.flood_tflops,
                r.flood_tflops / flood_alone.flood_tflops);
    absl::StrAppend(&json, first ? "" : ",", "{\"slice_us\":", us, ",\"p50\":", q50,
                    ",\"p99\":", q99, ",\"p999\":", q999, ",\"flood_tflops\":", r.flood_tflops,
                    "}");
    first = false;
  }
  absl::StrAppend(&json, "]}");
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace gpukit

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  gpukit::Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      if (!absl::SimpleAtod(argv[i + 1], &options.seconds) || options.seconds <= 0) {
        std::fprintf(stderr, "bad --seconds \"%s\"\n", argv[i + 1]);
        return 2;
      }
    } else if (flag == "--slices") {
      options.slices_us.clear();
      for (absl::string_view part : absl::StrSplit(argv[i + 1], ',')) {
        int64_t us = 0;
        if (!absl::SimpleAtoi(part, &us) || us < 0) {
          std::fprintf(stderr, "bad slice length \"%s\"\n", std::string(part).c_str());
          return 2;
        }
        options.slices_us.push_back(us);
      }
    } else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--slices 0,200,100,50]\n", argv[0]);
      return 2;
    }
  }
  return gpukit::Run(options);
}
