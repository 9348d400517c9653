// Measures gpukitd: start-up time, idle memory, and the round trip of a small RunOp against
// a raw gRPC ping to the same daemon in the same run; with --backend cuda also the launch of
// an empty custom kernel (CompileKernel once, then LaunchKernel through the C++ client).
//
//   gpukit_rpc_bench --gpukitd build/daemon/gpukitd [--iterations 20000] [--starts 5]
//                    [--backend cpu|cuda] [--only ping|keepalive|runop|add|launch|chain]
//   gpukit_rpc_bench --addr unix:///path.sock --only NAME [--iterations N] [--warmup N]
//                    [--samples-out FILE]
//
// The daemon is started by the benchmark on a private unix socket. Start-up time is from
// posix_spawn to the first answered health check. The ping is grpc.health.v1.Health/Check
// with an empty request (what any gRPC server answers without touching gpukit code); the
// op is ComputeService/RunOp "add" of two 16-element float32 arrays, through the generated
// stub, its result freed after the timed loop. SessionService/KeepAlive (a session lookup
// and nothing else) separates what any synchronous gpukit handler costs from what RunOp adds.
//
// --only NAME makes the same calls, one kind only, `iterations` times without the start-up
// runs: a driver for a profiler attached to the daemon (perf, callgrind), whose counts for
// two kinds, divided by `iterations`, give what one call of each costs. It prints the mean
// and, from each call timed on its own, p50 and p99; --warmup N makes N untimed calls first
// (default 0, so a profiler's counts stay exact) and --samples-out FILE writes every call's
// time in microseconds, one a line. --addr (with --only) uses a gpukitd that runs already
// instead of starting one: tests/bench/python_overhead_bench.py times the C++ client so,
// against the daemon its Python client uses. --only chain runs the pipelined chain alone
// (`iterations` adds after a tenth as many untimed) and prints its ops per second: with
// --addr, a driver for reading the daemon's CPU time per pipelined op.
//
// The full run (without --only) ends with one line of JSON, for scripts and CI
// (tests/python/test_rpc_latency_bench.py checks its shape): ping_p50_us, ping_p99_us,
// runop_p50_us, runop_p99_us, keepalive_*, add_* (and launch_* on cuda), startup_median_ms,
// idle_rss_mib, peak_rss_mib, and pipelined_ops_per_s: a chain of `iterations` dependent adds
// through ClientOptions::pipeline (PipelinedOpsPerSecond).
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"
#include "gpukit/client.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gpukit/v1/session.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "runtime/base/mutex_mode.h"
#include <sys/wait.h>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Daemon {
  pid_t pid = -1;
  std::string address;
};

std::string g_backend = "cpu";

Daemon Spawn(const std::string& binary, const std::string& dir) {
  Daemon daemon;
  daemon.address = absl::StrCat("unix://", dir, "/gpukitd.sock");
  std::string listen = absl::StrCat("--listen=", daemon.address);
  const std::string backend = absl::StrCat("--backend=", g_backend);
  const char* argv[] = {binary.c_str(), listen.c_str(), backend.c_str(), "--log-level=warn",
                        nullptr};
  if (posix_spawn(&daemon.pid, binary.c_str(), nullptr, nullptr, const_cast<char* const*>(argv),
                  environ) != 0) {
    std::perror("posix_spawn gpukitd");
    std::exit(1);
  }
  return daemon;
}

void Stop(Daemon& daemon) {
  kill(daemon.pid, SIGTERM);
  int status = 0;
  waitpid(daemon.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "gpukitd did not exit cleanly (status %d)\n", status);
    std::exit(1);
  }
}

// grpc.health.v1.Health/Check with an empty HealthCheckRequest; true when SERVING.
bool HealthCheck(grpc::Channel& channel) {
  static const grpc::internal::RpcMethod kMethod("/grpc.health.v1.Health/Check",
                                                 grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  grpc::Status status =
      grpc::internal::BlockingUnaryCall(&channel, kMethod, &context, request, &response);
  if (!status.ok()) return false;
  std::vector<grpc::Slice> slices;
  response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes == std::string("\x08\x01", 2);  // status = SERVING
}

// Waits for the daemon to answer a health check; returns the time since `spawned`.
double WaitReadyMs(const Daemon& daemon, Clock::time_point spawned) {
  while (Clock::now() - spawned < std::chrono::seconds(10)) {
    auto channel = grpc::CreateChannel(daemon.address, grpc::InsecureChannelCredentials());
    if (channel->WaitForConnected(std::chrono::system_clock::now() +
                                  std::chrono::milliseconds(2)) &&
        HealthCheck(*channel)) {
      return std::chrono::duration<double, std::milli>(Clock::now() - spawned).count();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  std::fprintf(stderr, "gpukitd did not become ready within 10 s\n");
  std::exit(1);
}

long RssKiB(pid_t pid, const char* field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0)
      return std::strtol(line.c_str() + std::strlen(field), nullptr, 10);
  }
  return -1;
}

struct Stats {
  double p50, p99, mean;
};

Stats Summarise(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const double mean = std::accumulate(us.begin(), us.end(), 0.0) / us.size();
  return {us[us.size() / 2], us[us.size() * 99 / 100], mean};
}

// Times each call of each function, interleaving the functions in rounds so that load
// from elsewhere on the machine falls on all of them alike.
std::vector<Stats> TimeInterleaved(int iterations, const std::vector<std::function<void()>>& fns) {
  constexpr int kRounds = 10;
  for (const auto& fn : fns) {
    for (int i = 0; i < iterations / 10; ++i) fn();  // warm-up
  }
  std::vector<std::vector<double>> us(fns.size());
  for (int round = 0; round < kRounds; ++round) {
    for (size_t f = 0; f < fns.size(); ++f) {
      for (int i = 0; i < iterations / kRounds; ++i) {
        const auto start = Clock::now();
        fns[f]();
        us[f].push_back(Micros(Clock::now() - start));
      }
    }
  }
  std::vector<Stats> stats;
  for (auto& samples : us) stats.push_back(Summarise(std::move(samples)));
  return stats;
}

// Ops per second of a chain of `ops` dependent Adds on 16 float32 elements (x = x + 1)
// submitted without waiting for the replies (ClientOptions::pipeline), then one
// Client::Sync; the sum is checked.
double PipelinedOpsPerSecond(const std::string& address, int ops) {
  gpukit::ClientOptions options;
  options.address = address;
  options.tenant = "bench";
  options.pipeline = true;
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect (pipeline): %s\n",
                 std::string(client.status().message()).c_str());
    std::exit(1);
  }
  auto x = (*client)->FromVector(std::vector<float>(16, 0.0f), {16});
  auto chain = [&](int count) {
    const auto start = Clock::now();
    for (int i = 0; i < count && x.ok(); ++i) x = (*client)->Add(*x, 1.0f);
    const absl::Status synced = x.ok() ? (*client)->Sync() : x.status();
    if (!synced.ok()) {
      std::fprintf(stderr, "pipelined chain: %s\n", std::string(synced.message()).c_str());
      std::exit(1);
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  chain(std::max(1, ops / 10));  // warm-up
  const double seconds = chain(ops);
  auto sum = x->ToVector<float>();
  const float expected = static_cast<float>(ops + std::max(1, ops / 10));
  if (!sum.ok() || (*sum)[0] != expected) {
    std::fprintf(stderr, "pipelined chain: x[0] is %g, not %g\n", sum.ok() ? (*sum)[0] : -1.0,
                 static_cast<double>(expected));
    std::exit(1);
  }
  return ops / seconds;
}

// `value` with `digits` decimals, as JSON takes it.
std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

// The last line of a full run: one JSON object of every figure (names as the header says).
std::string SummaryJson(const std::vector<std::pair<std::string, Stats>>& calls,
                        const std::vector<double>& start_ms, long idle_rss_kib, long peak_rss_kib,
                        double pipelined_ops_per_s) {
  std::string json = "{";
  for (const auto& [name, stats] : calls) {
    absl::StrAppend(&json, "\"", name, "_p50_us\": ", Fixed(stats.p50, 3), ", \"", name,
                    "_p99_us\": ", Fixed(stats.p99, 3), ", \"", name,
                    "_mean_us\": ", Fixed(stats.mean, 3), ", ");
  }
  absl::StrAppend(&json, "\"startup_median_ms\": ", Fixed(start_ms[start_ms.size() / 2], 3),
                  ", \"idle_rss_mib\": ", Fixed(idle_rss_kib / 1024.0, 1),
                  ", \"peak_rss_mib\": ", Fixed(peak_rss_kib / 1024.0, 1), ", \"backend\": \"",
                  g_backend, "\"");
  absl::StrAppend(&json, ", \"pipelined_ops_per_s\": ", Fixed(pipelined_ops_per_s, 1), "}");
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  std::string gpukitd;
  int iterations = 20000, starts = 5;
  int warmup = 0;
  std::string only, addr, samples_out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gpukitd") == 0) gpukitd = argv[i + 1];
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--starts") == 0) starts = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--backend") == 0) g_backend = argv[i + 1];
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--addr") == 0) addr = argv[i + 1];
    if (std::strcmp(argv[i], "--warmup") == 0) warmup = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--samples-out") == 0) samples_out = argv[i + 1];
  }
  if (gpukitd.empty() == addr.empty() || (!addr.empty() && only.empty()) || iterations <= 0 ||
      starts <= 0) {
    std::fprintf(stderr,
                 "usage: %s --gpukitd PATH [--iterations N] [--starts N] [--backend cpu|cuda]\n"
                 "          [--only NAME [--warmup N] [--samples-out FILE]]\n"
                 "       %s --addr ADDR --only NAME [--iterations N] [--warmup N]\n"
                 "          [--samples-out FILE]\n",
                 argv[0], argv[0]);
    return 2;
  }
  const bool spawns = addr.empty();  // else the daemon at `addr`, which this run leaves alone
  char dir_template[] = "/tmp/gpukit-bench-XXXXXX";
  const std::string dir = spawns ? mkdtemp(dir_template) : "";

  // Start-up: spawn to first answered health check, several times.
  std::vector<double> start_ms;
  for (int i = 0; i < (only.empty() ? starts : 0); ++i) {
    const auto spawned = Clock::now();
    Daemon d = Spawn(gpukitd, dir);
    start_ms.push_back(WaitReadyMs(d, spawned));
    Stop(d);
  }
  std::sort(start_ms.begin(), start_ms.end());

  Daemon daemon;
  long idle_rss = -1;
  if (spawns) {
    const auto spawned = Clock::now();
    daemon = Spawn(gpukitd, dir);
    WaitReadyMs(daemon, spawned);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    idle_rss = RssKiB(daemon.pid, "VmRSS:");
  } else {
    daemon.address = addr;
  }

  if (only == "chain") {
    std::printf("%d x chain: %.1f ops/s\n", iterations,
                PipelinedOpsPerSecond(daemon.address, iterations));
    if (spawns) {
      Stop(daemon);
      rmdir(dir.c_str());
    }
    return 0;
  }
  auto channel = gpukit::ConnectChannel(daemon.address, absl::Seconds(5));
  if (!channel.ok()) return 1;
  gpukit::ClientOptions options;
  options.address = daemon.address;
  options.tenant = "bench";
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  std::vector<float> values(16);
  std::iota(values.begin(), values.end(), 1.0f);
  auto a = (*client)->FromVector(values, {16});
  auto b = (*client)->FromVector(values, {16});
  if (!a.ok() || !b.ok()) return 1;

  auto compute = gpukit::v1::ComputeService::NewStub(*channel);
  gpukit::v1::RunOpRequest run;
  run.set_session_id((*client)->session_id());
  run.set_op("add");
  run.add_inputs()->set_handle(a->handle());
  run.add_inputs()->set_handle(b->handle());
  std::vector<std::string> outputs;
  outputs.reserve(iterations + iterations / 10);  // freed after the timed loops

  // An empty kernel, for the launch round trip (GPU only: the CPU backend runs no kernels).
  const bool launches = g_backend == "cuda";
  gpukit::Kernel empty;
  if (launches) {
    auto compiled = (*client)->CompileKernel(R"(extern "C" __global__ void empty() {})", {"empty"});
    if (!compiled.ok()) {
      std::fprintf(stderr, "compile: %s\n", std::string(compiled.status().message()).c_str());
      return 1;
    }
    empty = *compiled;
  }
  auto sessions = gpukit::v1::SessionService::NewStub(*channel);
  gpukit::v1::KeepAliveRequest keepalive;
  keepalive.set_session_id((*client)->session_id());
  struct Call {
    const char* name;
    const char* label;
    std::function<void()> fn;
  };
  std::vector<Call> calls = {{"ping", "grpc.health.v1 Check (raw gRPC ping)",
                              [&] {
                                if (!HealthCheck(**channel)) std::exit(1);
                              }},
                             {"keepalive", "SessionService.KeepAlive (sync baseline)",
                              [&] {
                                gpukit::v1::KeepAliveResponse response;
                                grpc::ClientContext context;
                                if (!sessions->KeepAlive(&context, keepalive, &response).ok())
                                  std::exit(1);
                              }},
                             {"runop", "RunOp add, 2 x 16 float32 (stub)",
                              [&] {
                                gpukit::v1::RunOpResponse response;
                                grpc::ClientContext context;
                                if (!compute->RunOp(&context, run, &response).ok()) std::exit(1);
                                outputs.push_back(response.output().handle());
                              }},
                             {"add", "Client::Add incl. Free of the result", [&] {
                                auto c = (*client)->Add(
                                    *a, *b);  // RunOp + Free when `c` goes out of scope
                                if (!c.ok()) std::exit(1);
                              }}};
  if (launches) {
    calls.push_back({"launch", "LaunchKernel empty<<<1,1>>> (client)", [&] {
                       if (!(*client)->LaunchKernel(empty, "", {1}, {1}, 0, {}).ok()) std::exit(1);
                     }});
  }
  if (!only.empty()) {
    auto it =
        std::find_if(calls.begin(), calls.end(), [&](const Call& c) { return only == c.name; });
    if (it == calls.end()) {
      std::fprintf(stderr, "--only %s: no such call\n", only.c_str());
      return 2;
    }
    for (int i = 0; i < warmup; ++i) it->fn();
    std::vector<double> us;
    us.reserve(iterations);
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      it->fn();
      us.push_back(Micros(Clock::now() - start));
    }
    if (!samples_out.empty()) {
      std::ofstream out(samples_out);
      for (double sample : us) out << sample << '\n';
      if (!out) {
        std::fprintf(stderr, "--samples-out %s: cannot write\n", samples_out.c_str());
        return 1;
      }
    }
    const Stats only_stats = Summarise(std::move(us));
    std::printf("%d x %s: mean %.1f us, p50 %.1f us, p99 %.1f us\n", iterations, it->name,
                only_stats.mean, only_stats.p50, only_stats.p99);
  }
  std::vector<std::function<void()>> timed;
  for (const Call& call : calls) timed.push_back(call.fn);
  const std::vector<Stats> stats =
      only.empty() ? TimeInterleaved(iterations, timed) : std::vector<Stats>();
  auto arrays = gpukit::v1::ArrayService::NewStub(*channel);
  for (const std::string& handle : outputs) {
    gpukit::v1::FreeArrayRequest free;
    free.set_session_id((*client)->session_id());
    free.set_handle(handle);
    gpukit::v1::FreeArrayResponse freed;
    grpc::ClientContext context;
    arrays->Free(&context, free, &freed);
  }
  client->reset();
  // The pipelined chain (full run only), before the daemon stops.
  const double pipelined_ops_per_s =
      only.empty() ? PipelinedOpsPerSecond(daemon.address, iterations) : 0.0;
  if (!spawns) return 0;
  const long busy_rss = RssKiB(daemon.pid, "VmHWM:");
  Stop(daemon);
  rmdir(dir.c_str());

  if (!only.empty()) return 0;
  std::printf(
      "gpukitd start-up (spawn to first health check), %d starts: median %.1f ms, max %.1f ms\n",
      starts, start_ms[start_ms.size() / 2], start_ms.back());
  std::printf("gpukitd idle RSS: %.1f MiB; peak RSS after the run: %.1f MiB\n", idle_rss / 1024.0,
              busy_rss / 1024.0);
  std::printf("%-44s %10s %10s %10s %8s\n", "round trip (unix socket)", "p50 us", "p99 us",
              "mean us", "/ ping");
  for (size_t i = 0; i < calls.size(); ++i) {
    std::printf("%-44s %10.1f %10.1f %10.1f %7.2fx\n", calls[i].label, stats[i].p50, stats[i].p99,
                stats[i].mean, stats[i].p50 / stats[0].p50);
  }
  const Stats& ping = stats[0];
  const Stats& op = stats[2];
  std::printf("RunOp / ping: p50 %.2fx, mean %.2fx (goal <= 1.3x)\n", op.p50 / ping.p50,
              op.mean / ping.mean);
  if (launches) {
    const Stats& launch = stats[4];
    std::printf("LaunchKernel / ping: p50 %.2fx, mean %.2fx (goal <= 1.3x)\n",
                launch.p50 / ping.p50, launch.mean / ping.mean);
  }
  std::vector<std::pair<std::string, Stats>> named;
  for (size_t i = 0; i < calls.size(); ++i) named.emplace_back(calls[i].name, stats[i]);
  std::printf("%s\n",
              SummaryJson(named, start_ms, idle_rss, busy_rss, pipelined_ops_per_s).c_str());
  return 0;
}
