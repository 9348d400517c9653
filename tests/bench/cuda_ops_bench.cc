// Built-in ops on the CUDA device against the device's own copy bandwidth, measured in the
// same run, plus the JIT compiler's cache hits. Device level (no daemon, no RPC): what the
// kernels themselves achieve.
//
//   gpukit_cuda_ops_bench [--gib 1] [--reps 20] [--chain-ops 20000]
//
// For each case: the median over `reps` runs of the device time between two events around
// one RunOp (or one cuMemcpyDtoD for the reference), after 3 warm-up runs. Bandwidth counts
// bytes read plus bytes written. Ratios are against the device-to-device copy of the same
// run. Then the device's own ceiling for small ops: chains of `chain-ops` dependent adds on
// 16 floats from 1, 2, 4 and 8 threads (each on its own stream), with no events, an event
// pair around each op, an event after each op and an event after every 16th op (ops/s over
// all threads). Prints a table; exits 1 without a GPU or
// NVRTC.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/transfer_engine.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/op_registry.h"

namespace gpukit {
namespace {

struct Options {
  double gib = 1;
  int reps = 20;
  int chain_ops = 20000;  // per thread, in the small-op chains
};

int Die(const std::string& what) {
  std::fprintf(stderr, "gpukit_cuda_ops_bench: %s\n", what.c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class Bench {
 public:
  Bench(CudaDevice& device, StreamId stream, int reps)
      : device_(device), stream_(stream), reps_(reps) {}

  // Median device time of `enqueue`, in seconds.
  absl::StatusOr<double> Time(const std::function<absl::Status()>& enqueue) {
    std::vector<double> times;
    for (int i = 0; i < reps_ + 3; ++i) {
      absl::StatusOr<EventId> start = device_.RecordEvent(stream_);
      if (!start.ok()) return start.status();
      if (absl::Status s = enqueue(); !s.ok()) return s;
      absl::StatusOr<EventId> end = device_.RecordEvent(stream_);
      if (!end.ok()) return end.status();
      if (absl::Status s = device_.WaitEvent(*end); !s.ok()) return s;
      absl::StatusOr<int64_t> ns = device_.EventElapsedNs(*start, *end);
      if (!ns.ok()) return ns.status();
      device_.DestroyEvent(*start).IgnoreError();
      device_.DestroyEvent(*end).IgnoreError();
      if (i >= 3) times.push_back(static_cast<double>(*ns) * 1e-9);
    }
    return Median(times);
  }

  absl::StatusOr<OpLaunch> Plan(const std::string& op, const std::vector<TensorDesc>& inputs,
                                std::vector<BufferId> buffers, BufferId out, AttrMap attrs = {}) {
    const OpRegistry& registry = OpRegistry::Builtin();
    absl::StatusOr<const OpDef*> def = registry.Find(op);
    if (!def.ok()) return def.status();
    std::vector<OperandDesc> descs;
    OpLaunch launch;
    launch.op = *def;
    for (size_t i = 0; i < inputs.size(); ++i) {
      OperandDesc d;
      d.tensor = inputs[i];
      descs.push_back(d);
      OpOperand operand;
      operand.buffer = buffers[i];
      operand.desc = inputs[i];
      launch.inputs.push_back(operand);
    }
    absl::StatusOr<OpPlan> plan = registry.Plan(**def, descs, attrs);
    if (!plan.ok()) return plan.status();
    launch.plan = *plan;
    launch.output = out;
    return launch;
  }

 private:
  CudaDevice& device_;
  StreamId stream_;
  int reps_;
};

int Run(const Options& options) {
  absl::StatusOr<std::unique_ptr<JitCompiler>> jit_or = JitCompiler::Create({});
  if (!jit_or.ok()) return Die(jit_or.status().ToString());
  std::shared_ptr<JitCompiler> jit(*std::move(jit_or));
  CudaDeviceOptions device_options;
  device_options.jit = jit;
  absl::StatusOr<std::unique_ptr<CudaDevice>> created = CudaDevice::Create(device_options);
  if (!created.ok()) return Die(created.status().ToString());
  CudaDevice& device = **created;
  absl::StatusOr<StreamId> stream = device.CreateStream(StreamPriority::kNormal);
  if (!stream.ok()) return Die(stream.status().ToString());
  Bench bench(device, *stream, options.reps);

  const int64_t bytes = static_cast<int64_t>(options.gib * (int64_t{1} << 30));
  const int64_t n = bytes / 4;
  std::vector<BufferId> buffers;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<BufferId> b = device.Allocate(bytes);
    if (!b.ok()) return Die(b.status().ToString());
    buffers.push_back(*b);
  }
  // Fill a and b with something other than zeros (1.0f), through the op path itself.
  std::vector<float> host(1 << 20, 1.0f);
  for (int64_t off = 0; off < bytes; off += host.size() * 4) {
    const int64_t chunk = std::min<int64_t>(host.size() * 4, bytes - off);
    for (int i = 0; i < 2; ++i) {
      if (!device.CopyHostToDevice(buffers[i], off, host.data(), chunk, *stream).ok()) {
        return Die("fill failed");
      }
    }
  }
  const BufferId a = buffers[0], b = buffers[1], out = buffers[2];
  const TensorDesc vec{DType::kFloat32, {n}};

  std::printf("device: %s (%s), %.2f GiB per array, median of %d runs\n",
              device.properties().name.c_str(), device.cuda_info().arch.c_str(), options.gib,
              options.reps);
  absl::StatusOr<double> copy =
      bench.Time([&] { return device.CopyDeviceToDevice(out, 0, a, 0, bytes, *stream); });
  if (!copy.ok()) return Die(copy.status().ToString());
  const double copy_bw = 2.0 * bytes / *copy;
  std::printf("%-34s %10.3f ms %9.1f GB/s  %s\n", "device-to-device copy (reference)", *copy * 1e3,
              copy_bw / 1e9, "1.00x");

  struct Case {
    std::string name;
    std::string op;
    std::vector<TensorDesc> inputs;
    std::vector<BufferId> in_buffers;
    double moved;  // bytes read + written
  };
  const std::vector<Case> cases = {
      {"add f32 (a + b)", "add", {vec, vec}, {a, b}, 3.0 * bytes},
      {"mul f32 (a * a: a is read once)", "mul", {vec, vec}, {a, a}, 2.0 * bytes},
      {"sum f32 (all elements)", "sum", {vec}, {a}, 1.0 * bytes},
      {"max f32 (all elements)", "max", {vec}, {a}, 1.0 * bytes},
      {"astype f32 -> bf16", "astype", {vec}, {a}, 1.5 * bytes},
  };
  for (const Case& c : cases) {
    AttrMap attrs;
    if (c.op == "astype") attrs["dtype"] = DType::kBFloat16;
    absl::StatusOr<OpLaunch> launch = bench.Plan(c.op, c.inputs, c.in_buffers, out, attrs);
    if (!launch.ok()) return Die(launch.status().ToString());
    absl::StatusOr<double> t = bench.Time([&] { return device.RunOp(*launch, *stream); });
    if (!t.ok()) return Die(absl::StrCat(c.name, ": ", t.status().ToString()));
    const double bw = c.moved / *t;
    std::printf("%-34s %10.3f ms %9.1f GB/s  %.2fx\n", c.name.c_str(), *t * 1e3, bw / 1e9,
                bw / copy_bw);
  }

  // Uploads and downloads of 256 MiB from ordinary (pageable) memory through the device,
  // that is the transfer engine, against the raw driver copy from pinned memory and from
  // the same pageable memory. Host wall time, copy plus synchronisation.
  {
    absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
    if (!cu.ok()) return Die(cu.status().ToString());
    const int64_t size = int64_t{256} << 20;
    std::vector<char> pageable(size, 1);
    void* pinned = nullptr;
    CUdeviceptr raw = 0;
    if ((*cu)->cuMemHostAlloc(&pinned, size, 0) != CUDA_SUCCESS ||
        (*cu)->cuMemAlloc(&raw, size) != CUDA_SUCCESS) {
      return Die("pinned or raw allocation failed");
    }
    std::memset(pinned, 1, size);
    auto wall = [&](const std::function<bool()>& copy) {
      std::vector<double> times;
      for (int i = 0; i < options.reps + 2; ++i) {
        const auto start = std::chrono::steady_clock::now();
        if (!copy()) return -1.0;
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (i >= 2) times.push_back(t);
      }
      return Median(times);
    };
    const double raw_pinned =
        wall([&] { return (*cu)->cuMemcpyHtoD(raw, pinned, size) == CUDA_SUCCESS; });
    const double raw_pageable =
        wall([&] { return (*cu)->cuMemcpyHtoD(raw, pageable.data(), size) == CUDA_SUCCESS; });
    const double engine_up = wall([&] {
      return device.CopyHostToDevice(a, 0, pageable.data(), size, *stream).ok() &&
             SynchronizeStream(device, *stream).ok();
    });
    const double raw_down =
        wall([&] { return (*cu)->cuMemcpyDtoH(pinned, raw, size) == CUDA_SUCCESS; });
    const double engine_down = wall([&] {
      return device.CopyDeviceToHost(pageable.data(), a, 0, size, *stream).ok() &&
             SynchronizeStream(device, *stream).ok();
    });
    // The device's own pinned host buffers (what spilled arrays live in): no staging.
    absl::StatusOr<HostBuffer> host = device.AllocateHostBuffer(size);
    if (!host.ok() || !host->pinned()) return Die("no pinned host buffer from the device");
    std::memset(host->data(), 1, size);
    const double host_up = wall([&] {
      return device.CopyHostToDevice(a, 0, host->data(), size, *stream).ok() &&
             SynchronizeStream(device, *stream).ok();
    });
    const double host_down = wall([&] {
      return device.CopyDeviceToHost(host->data(), a, 0, size, *stream).ok() &&
             SynchronizeStream(device, *stream).ok();
    });
    auto row = [&](const char* name, double t, double reference) {
      std::printf("%-52s %8.3f ms %7.1f GB/s  %.2fx\n", name, t * 1e3, size / t / 1e9,
                  reference / t);
    };
    row("upload 256 MiB, raw cuMemcpyHtoD from pinned (ref)", raw_pinned, raw_pinned);
    row("upload 256 MiB, raw cuMemcpyHtoD from pageable", raw_pageable, raw_pinned);
    row("upload 256 MiB from pageable, transfer engine", engine_up, raw_pinned);
    row("download 256 MiB, raw cuMemcpyDtoH to pinned (ref)", raw_down, raw_down);
    row("download 256 MiB to pageable, transfer engine", engine_down, raw_down);
    row("upload 256 MiB from a device host buffer (pinned)", host_up, raw_pinned);
    row("download 256 MiB to a device host buffer (pinned)", host_down, raw_down);
    if (std::getenv("GPUKIT_BENCH_TRANSFER_SWEEP") != nullptr) {
      // The engine's knobs: copy threads and chunk size (the device uses the defaults).
      CUstream raw_stream = nullptr;
      (*cu)->cuStreamCreate(&raw_stream, CU_STREAM_NON_BLOCKING);
      CUcontext context = nullptr;
      (*cu)->cuCtxGetCurrent(&context);
      for (int threads : {4, 8, 12}) {
        for (int64_t chunk_mib : {4, 8, 32}) {
          TransferEngineOptions knobs;
          knobs.copy_threads = threads;
          knobs.chunk_bytes = chunk_mib << 20;
          TransferEngine engine(**cu, context, knobs);
          const double up = wall([&] {
            return engine.HostToDevice(raw, pageable.data(), size, raw_stream).ok() &&
                   (*cu)->cuStreamSynchronize(raw_stream) == CUDA_SUCCESS;
          });
          const double down = wall(
              [&] { return engine.DeviceToHost(pageable.data(), raw, size, raw_stream).ok(); });
          std::printf("  engine %2d threads, %2lld MiB chunks: up %.2fx, down %.2fx\n", threads,
                      static_cast<long long>(chunk_mib), raw_pinned / up, raw_down / down);
        }
      }
    }
    (*cu)->cuMemFree(raw);
    (*cu)->cuMemFreeHost(pinned);
  }

  // What every op pays around its kernel: an output allocation and its free, and two timing
  // events. The device (memory pool, event free list) against the raw driver calls, host wall
  // time per pair, median of 20 batches of 1000.
  {
    absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
    if (!cu.ok()) return Die(cu.status().ToString());
    auto per_call_us = [&](const std::function<bool()>& call) {
      std::vector<double> times;
      for (int batch = 0; batch < 21; ++batch) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 1000; ++i) {
          if (!call()) return -1.0;
        }
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (batch > 0) times.push_back(t / 1000 * 1e6);
      }
      return Median(times);
    };
    for (int64_t bytes : {int64_t{64}, int64_t{1} << 20, int64_t{64} << 20}) {
      const double raw = per_call_us([&] {
        CUdeviceptr p = 0;
        return (*cu)->cuMemAlloc(&p, bytes) == CUDA_SUCCESS && (*cu)->cuMemFree(p) == CUDA_SUCCESS;
      });
      const double pooled = per_call_us([&] {
        absl::StatusOr<BufferId> b = device.Allocate(bytes);
        return b.ok() && device.Free(*b).ok();
      });
      std::printf(
          "allocate + free %9lld B: raw cuMemAlloc/cuMemFree %8.2f us, pool %6.2f us (%.0fx)\n",
          static_cast<long long>(bytes), raw, pooled, raw / pooled);
    }
    CUstream raw_stream = nullptr;
    (*cu)->cuStreamCreate(&raw_stream, CU_STREAM_NON_BLOCKING);
    const double raw_events = per_call_us([&] {
      CUevent e = nullptr;
      bool ok = (*cu)->cuEventCreate(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
                (*cu)->cuEventRecord(e, raw_stream) == CUDA_SUCCESS &&
                (*cu)->cuEventSynchronize(e) == CUDA_SUCCESS;
      return (*cu)->cuEventDestroy(e) == CUDA_SUCCESS && ok;
    });
    const double device_events = per_call_us([&] {
      absl::StatusOr<EventId> e = device.RecordEvent(*stream);
      return e.ok() && device.WaitEvent(*e).ok() && device.DestroyEvent(*e).ok();
    });
    std::printf("event create/record/wait/destroy: raw %.2f us, device (reused events) %.2f us\n",
                raw_events, device_events);
    (*cu)->cuStreamDestroy(raw_stream);
    const MemoryPoolStats pool = device.memory_pool_stats();
    std::printf("memory pool: %s; %lld segments, %lld MiB mapped, %lld allocations, %lld reused\n",
                device.memory_source().c_str(), static_cast<long long>(pool.segments),
                static_cast<long long>(pool.mapped_bytes >> 20),
                static_cast<long long>(pool.allocations), static_cast<long long>(pool.reused));
  }

  // The device's own ceiling for chains of small ops (no daemon, no executor channel): `threads`
  // threads, each on its own stream, each running a chain of dependent adds on 16-element
  // arrays (c = a + c), one synchronize at the end. Events: none; each op between two new
  // events (RunOpBetweenEvents, as an in-process device runs a pipelined op); one event
  // after each op (the executor's way: an op's start shares the previous op's end); one
  // event after every 16th op. Each event is waited for and destroyed 64 events later, as a
  // pipelined session sees its ops' completions.
  {
    const TensorDesc small{DType::kFloat32, {16}};
    enum class Events { kNone, kPairPerOp, kOnePerOp, kOnePer16Ops };
    auto chain = [&](int threads, Events events) -> absl::StatusOr<double> {
      std::vector<StreamId> streams;
      std::vector<std::vector<BufferId>> arrays;
      for (int t = 0; t < threads; ++t) {
        GPUKIT_ASSIGN_OR_RETURN(StreamId s, device.CreateStream(StreamPriority::kNormal));
        streams.push_back(s);
        std::vector<BufferId> pair;
        for (int i = 0; i < 2; ++i) {
          GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device.Allocate(64));
          GPUKIT_RETURN_IF_ERROR(device.FillZero(buffer, 0, 64, s));
          pair.push_back(buffer);
        }
        arrays.push_back(pair);
      }
      std::vector<absl::Status> results(threads);
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          absl::StatusOr<OpLaunch> launch =
              bench.Plan("add", {small, small}, {arrays[t][0], arrays[t][1]}, arrays[t][1]);
          if (!launch.ok()) {
            results[t] = launch.status();
            return;
          }
          constexpr size_t kWindow = 64;  // events in flight
          std::deque<EventId> in_flight;
          auto track = [&](EventId event) -> absl::Status {
            in_flight.push_back(event);
            if (in_flight.size() <= kWindow) return absl::OkStatus();
            absl::Status waited = device.WaitEvent(in_flight.front());
            device.DestroyEvents({in_flight.front()}).IgnoreError();
            in_flight.pop_front();
            return waited;
          };
          for (int i = 0; i < options.chain_ops && results[t].ok(); ++i) {
            absl::Status& result = results[t];
            switch (events) {
              case Events::kPairPerOp: {
                EventId first, second;
                result = device.RunOpBetweenEvents(*launch, streams[t], &first, &second);
                if (result.ok()) result = track(first);
                if (result.ok()) result = track(second);
                break;
              }
              case Events::kNone:
              case Events::kOnePerOp:
              case Events::kOnePer16Ops: {
                result = device.RunOp(*launch, streams[t]);
                const bool record =
                    events == Events::kOnePerOp || (events == Events::kOnePer16Ops && i % 16 == 15);
                if (!result.ok() || !record) break;
                absl::StatusOr<EventId> event = device.RecordEvent(streams[t]);
                result = event.ok() ? track(*event) : event.status();
                break;
              }
            }
          }
          if (results[t].ok()) results[t] = SynchronizeStream(device, streams[t]);
          for (EventId event : in_flight) device.DestroyEvents({event}).IgnoreError();
        });
      }
      for (std::thread& w : workers) w.join();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (const absl::Status& r : results) GPUKIT_RETURN_IF_ERROR(r);
      for (int t = 0; t < threads; ++t) {
        for (BufferId buffer : arrays[t]) device.Free(buffer).IgnoreError();
        device.DestroyStream(streams[t]).IgnoreError();
      }
      return threads * options.chain_ops / seconds;
    };
    const std::pair<Events, const char*> variants[] = {
        {Events::kNone, ""},
        {Events::kPairPerOp, ", each op between two events"},
        {Events::kOnePerOp, ", an event after each op"},
        {Events::kOnePer16Ops, ", an event after every 16th op"},
    };
    for (const auto& [events, what] : variants) {
      for (int threads : {1, 2, 4, 8}) {
        absl::StatusOr<double> rate = chain(threads, events);
        if (!rate.ok()) return Die(rate.status().ToString());
        std::printf("chain of %d adds on 16 floats, %d thread(s)%s: %.0f ops/s\n",
                    options.chain_ops, threads, what, *rate);
      }
    }
  }

  // The JIT compiler's caches: a small kernel compiled once, then hit in memory.
  CompileRequest request;
  request.source = R"(extern "C" __global__ void scale(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; })";
  request.entries = {"scale"};
  absl::StatusOr<JitResult> first = jit->Compile(request, device.cuda_info().arch);
  if (!first.ok()) return Die(first.status().ToString());
  std::vector<double> hits;
  for (int i = 0; i < 1000; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<JitResult> hit = jit->Compile(request, device.cuda_info().arch);
    hits.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!hit.ok() || hit->origin != KernelOrigin::kMemory) return Die("expected a memory hit");
  }
  std::printf(
      "NVRTC compile of a small kernel: %.1f ms; cached compile (memory hit): p50 %.1f us\n",
      absl::ToDoubleMilliseconds(first->elapsed), Median(hits) * 1e6);
  for (BufferId buffer : buffers) device.Free(buffer).IgnoreError();
  return 0;
}

}  // namespace
}  // namespace gpukit

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  gpukit::Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gib") {
      options.gib = std::atof(argv[i + 1]);
    } else if (flag == "--reps") {
      options.reps = std::atoi(argv[i + 1]);
    } else if (flag == "--chain-ops") {
      options.chain_ops = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--gib G] [--reps N] [--chain-ops N]\n", argv[0]);
      return 2;
    }
  }
  return gpukit::Run(options);
}
