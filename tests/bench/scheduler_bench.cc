// Scheduler costs on one core (Google Benchmark): admission decisions, task submit-to-
// completion cycles and memory reservations with accounting. Results go to
// docs/benchmarks.md; run with
//   build/tests/bench/gpukit_scheduler_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <algorithm>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/scheduler.h"
#include "runtime/cpu/cpu_device.h"

namespace gpukit {
namespace {

constexpr int64_t kDeviceBytes = int64_t{80} << 30;
constexpr int kCycles = 10'000;

// One allocation decision over a snapshot, the rule every allocation runs.
void BM_AdmitAllocation(benchmark::State& state) {
  AllocationSnapshot s;
  s.bytes = 4096;
  s.max_array_bytes = int64_t{2} << 30;
  s.session_limit_bytes = int64_t{1} << 30;
  s.partition_quota_bytes = int64_t{8} << 30;
  s.device_capacity_bytes = kDeviceBytes;
  int64_t admitted = 0;
  for (auto _ : state) {
    s.session_used_bytes = (s.session_used_bytes + 4096) & ((int64_t{1} << 30) - 1);
    benchmark::DoNotOptimize(s);
    admitted += AdmitAllocation(s).decision.admitted;
  }
  benchmark::DoNotOptimize(admitted);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AdmitAllocation);

std::unique_ptr<Scheduler> MakeScheduler(const Clock& clock, int max_running) {
  PartitionSpec p;
  p.name = "default";
  p.memory_quota_bytes = kDeviceBytes;
  p.compute_share = 1.0;
  p.max_running_tasks = max_running;
  p.max_queued_tasks = kCycles + 1;
  return *Scheduler::Create(clock, {{0, kDeviceBytes}}, {p}, SchedulerOptions{});
}

// One iteration is 10,000 tasks, each submitted (and admitted at once), started and
// finished with a device time: the whole life of an op's task, minus the device.
void BM_SubmitCompleteCycles(benchmark::State& state) {
  SystemClock clock;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(clock, 64);
  const SessionTicket ticket = scheduler->AdmitSession("s-bench", "", {})->ticket;
  TaskRequest request;
  request.name = "add";
  for (auto _ : state) {
    for (int i = 0; i < kCycles; ++i) {
      TaskRef task = *scheduler->Submit(ticket, request);
      scheduler->Start(task).IgnoreError();
      scheduler->Finish(task, absl::OkStatus(), absl::Microseconds(5));
    }
  }
  state.SetItemsProcessed(state.iterations() * kCycles);
}
BENCHMARK(BM_SubmitCompleteCycles)->Unit(benchmark::kMillisecond);

// 10,000 tasks queued behind one running slot, then drained: queue order and Pump under
// a deep queue.
void BM_QueuedSubmitThenDrain(benchmark::State& state) {
  SystemClock clock;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(clock, 1);
  const SessionTicket ticket = scheduler->AdmitSession("s-bench", "", {})->ticket;
  TaskRequest request;
  request.name = "add";
  std::vector<std::pair<int, TaskRef>> tasks;  // (priority, task)
  tasks.reserve(kCycles);
  for (auto _ : state) {
    for (int i = 0; i < kCycles; ++i) {
      request.priority = i % 7;
      tasks.emplace_back(request.priority, *scheduler->Submit(ticket, request));
    }
    // The first task took the free slot at once; the queue serves the rest by priority,
    // then arrival. Finish them in that order: each must be the one admitted (each Finish
    // admits the next).
    std::stable_sort(tasks.begin() + 1, tasks.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [priority, task] : tasks) {
      if (scheduler->StateOf(task) != TaskState::kAdmitted) {
        state.SkipWithError("the queue did not admit tasks in priority order");
        return;
      }
      scheduler->Finish(task, absl::OkStatus(), absl::Microseconds(1));
    }
    tasks.clear();
  }
  state.SetItemsProcessed(state.iterations() * kCycles);
}
BENCHMARK(BM_QueuedSubmitThenDrain)->Unit(benchmark::kMillisecond);

// One iteration is 10,000 reservations of 4 KiB against session, partition and device,
// each released: the accounting every allocation pays.
void BM_ReserveReleaseCycles(benchmark::State& state) {
  SystemClock clock;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(clock, 64);
  ResourceSpec limits;
  limits.memory_limit_bytes = int64_t{1} << 30;
  const SessionTicket ticket = scheduler->AdmitSession("s-bench", "", limits)->ticket;
  for (auto _ : state) {
    for (int i = 0; i < kCycles; ++i) {
      MemoryReservation r = *scheduler->ReserveMemory(ticket, 4096);
      benchmark::DoNotOptimize(r);
    }
  }
  state.SetItemsProcessed(state.iterations() * kCycles);
}
BENCHMARK(BM_ReserveReleaseCycles)->Unit(benchmark::kMillisecond);

// The same with the CPU device's allocation and free of each 4 KiB buffer (the CPU
// backend's stand-in for the CUDA memory pool, which is measured on the GPU host).
void BM_ReserveAllocateFreeCycles(benchmark::State& state) {
  SystemClock clock;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(clock, 64);
  const SessionTicket ticket = scheduler->AdmitSession("s-bench", "", {})->ticket;
  CpuDeviceOptions options;
  options.memory_bytes = kDeviceBytes;
  std::unique_ptr<CpuDevice> device = *CpuDevice::Create(options);
  for (auto _ : state) {
    for (int i = 0; i < kCycles; ++i) {
      MemoryReservation r = *scheduler->ReserveMemory(ticket, 4096);
      BufferId buffer = *device->Allocate(4096);
      device->Free(buffer).IgnoreError();
    }
  }
  state.SetItemsProcessed(state.iterations() * kCycles);
}
BENCHMARK(BM_ReserveAllocateFreeCycles)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpukit

BENCHMARK_MAIN();
