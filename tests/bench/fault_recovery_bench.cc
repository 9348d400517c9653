// How long a device fault costs the sessions that did not cause it (issue 15): gpukitd runs
// each device in a child executor and restarts it after a fault; this measures, per fault,
// the time from its injection until a bystander session's next small op (an add of two
// 16-element float32 arrays, retried at once on UNAVAILABLE) succeeds, and until the faulty
// call returned.
//
//   gpukit_fault_recovery_bench [--backend cpu|cuda] [--cycles 20] [--inject auto|op|kill]
//                               [--gpukitd PATH] [--verbose]
//
// The fault, each cycle from a session of a fresh tenant (gpukitd holds back a tenant whose
// work faults twice within 10 minutes):
//   - cuda: a JIT kernel that writes a terabyte past its array (an illegal address);
//   - cpu, --inject op (the default when the build has GPUKIT_FAULT_INJECTION): the test-only
//     op _test_fault, a sticky fault as a CUDA illegal address is;
//   - cpu, --inject kill (the default otherwise): SIGKILL to device 0's executor (its pid from
//     ListDevices); there is no faulty call, and its column is the time until ListDevices
//     shows the restart.
// The bystander's clock starts with the injection, on its own thread. An add that succeeds
// before the fault has taken effect (issued before the faulty call returned, or before
// kill() returned, and before any failure) is not the recovery and is counted apart
// ("before the fault").
//
// Wrong answers of gpukitd are counted and reported, and the cycle is measured all the same:
// the bystander's add blamed for the fault (ABORTED: MISATTRIBUTED; the bystander then goes on
// in a session of a fresh tenant, since the blame counts against its tenant), any other error
// of its adds but UNAVAILABLE (ERRORS, retried), and a faulty call answered other than ABORTED
// (WRONG ANSWER). The bench then exits with status 1 after printing its times.
//
// Prints p50 and max of both times over the cycles, and with --verbose a line per cycle.
// Each cycle waits for the executors (of all devices) to serve again and their standbys to be
// ready as before, so cycles are alike.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cpp/channel.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/base/status_macros.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_api.h"
#include "tests/testing/temp_dir.h"

#ifndef GPUKIT_FAULT_INJECTION
#define GPUKIT_FAULT_INJECTION 0
#endif

namespace gpukit {
namespace {

using testing::HandleOperand;
using testing::RawApi;

constexpr char kOutOfBoundsKernel[] = R"(
extern "C" __global__ void write_far_out_of_bounds(float* data) {
  volatile float* far = reinterpret_cast<volatile float*>(
      reinterpret_cast<char*>(data) + (1ull << 40));
  *far = 1.0f;
}
)";
constexpr char kOutOfBoundsEntry[] = "write_far_out_of_bounds";

// How long one cycle may take to recover before the bench gives up.
constexpr absl::Duration kRecoveryTimeout = absl::Seconds(60);
constexpr auto kCallDeadline = std::chrono::seconds(60);

enum class Injection { kOp, kKill, kKernel };

struct Flags {
  std::string backend = "cpu";
  std::string gpukitd;
  std::string inject = "auto";
  int cycles = 20;
  bool verbose = false;
};

// One cycle's measurements.
struct Cycle {
  absl::Duration fault_returned;       // injection -> the faulty call returned (kill: restart seen)
  absl::Duration bystander_recovered;  // injection -> the bystander's first add after the fault
  std::string fault_status;  // "faulty call ABORTED", ...; kill: "executor killed, restart seen"
  int64_t unavailable = 0;   // the bystander's adds answered UNAVAILABLE
  int64_t early = 0;         // its adds that succeeded before the fault took effect
  // gpukitd blamed the bystander's add for the fault (ABORTED): a misattribution, which the
  // bench counts and reports.
  bool misattributed = false;
  // The faulty call's answer when it was not ABORTED (a fault's answer), else "".
  std::string wrong_fault_answer;
  // Other errors of the bystander's adds (retried as UNAVAILABLE is): the first, and how many.
  int64_t errors = 0;
  std::string first_error;
};

class Bench {
 public:
  Bench(Flags flags, RawApi api, pid_t daemon_pid)
      : flags_(std::move(flags)),
        api_(std::move(api)),
        daemon_pid_(daemon_pid),
        compute_(v1::ComputeService::NewStub(api_.channel())) {}

  absl::Status Run() {
    GPUKIT_ASSIGN_OR_RETURN(injection_, ChooseInjection());
    GPUKIT_RETURN_IF_ERROR(StartBystander());
    GPUKIT_ASSIGN_OR_RETURN(Executors start, AllExecutors());
    if (!start.all_processes) {
      return absl::FailedPreconditionError("a device's executor does not run in a process");
    }
    standby_ready_ = start.standby_ready;
    restarts_ = start.restarts;
    std::printf("backend %s, fault: %s, %d cycles, standby executor %s\n", flags_.backend.c_str(),
                InjectionName(), flags_.cycles, standby_ready_ > 0 ? "ready" : "none");
    std::vector<Cycle> cycles;
    for (int i = 0; i < flags_.cycles; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(Cycle cycle, RunCycle(i));
      if (flags_.verbose) {
        std::printf(
            "cycle %2d: %-28s after %8.2f ms; bystander's first add after %8.2f ms "
            "(%lld unavailable, %lld before the fault)%s%s%s\n",
            i, cycle.fault_status.c_str(), absl::ToDoubleMilliseconds(cycle.fault_returned),
            absl::ToDoubleMilliseconds(cycle.bystander_recovered),
            static_cast<long long>(cycle.unavailable), static_cast<long long>(cycle.early),
            cycle.misattributed ? "; MISATTRIBUTED: the bystander's add was blamed" : "",
            cycle.errors > 0
                ? absl::StrCat("; ", cycle.errors, " ERRORS, first: ", cycle.first_error).c_str()
                : "",
            cycle.wrong_fault_answer.empty()
                ? ""
                : absl::StrCat("; WRONG ANSWER to the faulty call: ", cycle.wrong_fault_answer)
                      .c_str());
      }
      cycles.push_back(std::move(cycle));
    }
    PrintSummary(cycles);
    // The bystander's arrays came through every restart.
    GPUKIT_RETURN_IF_ERROR(CheckBystanderSum());
    int wrong = 0;
    for (const Cycle& cycle : cycles) {
      wrong += cycle.misattributed || cycle.errors > 0 || !cycle.wrong_fault_answer.empty();
    }
    if (wrong > 0) {
      return absl::InternalError(
          absl::StrCat("gpukitd answered wrongly (MISATTRIBUTED, ERRORS, WRONG ANSWER above) in ",
                       wrong, " of ", cycles.size(), " cycles; the times above stand"));
    }
    return absl::OkStatus();
  }

 private:
  const char* InjectionName() const {
    switch (injection_) {
      case Injection::kOp:
        return "op _test_fault";
      case Injection::kKill:
        return "SIGKILL to the executor";
      case Injection::kKernel:
        return "out-of-bounds JIT kernel";
    }
    return "?";
  }

  absl::StatusOr<Injection> ChooseInjection() const {
    if (flags_.backend == "cuda") {
      if (flags_.inject != "auto" && flags_.inject != "kernel") {
        return absl::InvalidArgumentError("on cuda the fault is the JIT kernel (--inject auto)");
      }
      return Injection::kKernel;
    }
    if (flags_.inject == "op") {
      if (!GPUKIT_FAULT_INJECTION) {
        return absl::InvalidArgumentError(
            "--inject op needs a build with GPUKIT_FAULT_INJECTION (gpukitd has no _test_fault)");
      }
      return Injection::kOp;
    }
    if (flags_.inject == "kill") return Injection::kKill;
    if (flags_.inject != "auto") {
      return absl::InvalidArgumentError(absl::StrCat("--inject ", flags_.inject, "?"));
    }
    return GPUKIT_FAULT_INJECTION ? Injection::kOp : Injection::kKill;
  }

  // ---- calls ----

  static void SetDeadline(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  }

  absl::StatusOr<std::string> RunOp(const std::string& session, const std::string& op,
                                    const std::vector<std::string>& handles) {
    v1::RunOpRequest request;
    request.set_session_id(session);
    request.set_op(op);
    for (const std::string& handle : handles) *request.add_inputs() = HandleOperand(handle);
    grpc::ClientContext context;
    SetDeadline(context);
    v1::RunOpResponse response;
    GPUKIT_RETURN_IF_ERROR(FromGrpc(compute_->RunOp(&context, request, &response), context));
    return response.output().handle();
  }

  absl::Status LaunchOutOfBounds(const std::string& session, const std::string& array) {
    v1::CompileKernelRequest compile;
    compile.set_session_id(session);
    compile.set_source(kOutOfBoundsKernel);
    compile.add_entries(kOutOfBoundsEntry);
    v1::CompileKernelResponse compiled;
    {
      grpc::ClientContext context;
      SetDeadline(context);
      GPUKIT_RETURN_IF_ERROR(
          FromGrpc(compute_->CompileKernel(&context, compile, &compiled), context));
    }
    v1::LaunchKernelRequest launch;
    launch.set_session_id(session);
    launch.set_kernel(compiled.kernel());
    launch.mutable_grid()->set_x(1);
    launch.mutable_block()->set_x(1);
    launch.add_args()->set_array(array);
    v1::LaunchKernelResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    return FromGrpc(compute_->LaunchKernel(&context, launch, &response), context);
  }

  absl::StatusOr<std::string> Upload(const std::string& session, const std::vector<float>& values) {
    const std::string bytes(reinterpret_cast<const char*>(values.data()),
                            values.size() * sizeof(float));
    GPUKIT_ASSIGN_OR_RETURN(
        v1::ArrayInfo info,
        api_.CreateWithBytes(session, {static_cast<int64_t>(values.size())}, v1::DTYPE_FLOAT32,
                             bytes));
    return info.handle();
  }

  absl::StatusOr<std::vector<float>> Download(const std::string& session,
                                              const std::string& handle) {
    GPUKIT_ASSIGN_OR_RETURN(std::string bytes, api_.DownloadAll(session, handle));
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
    return values;
  }

  // The executors of all devices (a session may be placed on any), summed up.
  struct Executors {
    int64_t restarts = 0;       // in all
    int standby_ready = 0;      // devices whose standby executor is ready
    bool all_serving = true;    // every device has an executor process serving
    bool all_processes = true;  // every device's executor runs in a child process
    std::string description;    // ListDevices' executors, for an error
  };
  absl::StatusOr<Executors> AllExecutors() {
    GPUKIT_ASSIGN_OR_RETURN(v1::ListDevicesResponse devices, api_.ListDevices());
    if (devices.devices().empty()) return absl::NotFoundError("ListDevices lists no device");
    Executors all;
    for (const v1::DeviceInfo& device : devices.devices()) {
      const v1::ExecutorInfo& executor = device.executor();
      all.restarts += executor.restarts();
      all.standby_ready += executor.standby_ready() ? 1 : 0;
      all.all_serving = all.all_serving && executor.pid() > 0;
      all.all_processes = all.all_processes && executor.mode() == "process";
      absl::StrAppend(&all.description, "device ", device.index(), ": ",
                      executor.ShortDebugString(), "; ");
    }
    return all;
  }

  // Device 0's executor.
  absl::StatusOr<v1::ExecutorInfo> Executor() {
    GPUKIT_ASSIGN_OR_RETURN(v1::ListDevicesResponse devices, api_.ListDevices());
    if (devices.devices().empty()) return absl::NotFoundError("ListDevices lists no device");
    return devices.devices(0).executor();
  }

  // The executor's pid, checked to be a child of gpukitd (so the bench never kills a stranger).
  absl::StatusOr<pid_t> ExecutorPid() {
    GPUKIT_ASSIGN_OR_RETURN(v1::ExecutorInfo info, Executor());
    const pid_t pid = static_cast<pid_t>(info.pid());
    if (pid <= 0) return absl::UnavailableError(absl::StrCat("executor pid ", info.pid()));
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    std::vector<std::string> fields;
    if (close != std::string::npos) fields = absl::StrSplit(line.substr(close + 2), ' ');
    int64_t parent = -1;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &parent) || parent != daemon_pid_) {
      return absl::FailedPreconditionError(
          absl::StrCat("executor pid ", pid, " is not a child of gpukitd (", daemon_pid_, ")"));
    }
    return pid;
  }

  // Polls ListDevices until the executors have restarted `restarts` times in all and serve,
  // and (`standby_too`) their standbys are as they were at the start.
  absl::Status WaitForRestarts(int64_t restarts, bool standby_too) {
    const absl::Time deadline = absl::Now() + kRecoveryTimeout;
    Executors last;
    while (absl::Now() < deadline) {
      absl::StatusOr<Executors> all = AllExecutors();
      if (all.ok()) {
        last = *std::move(all);
        if (last.restarts >= restarts && last.all_serving &&
            (!standby_too || last.standby_ready == standby_ready_)) {
          return absl::OkStatus();
        }
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("the executors did not reach ", restarts, " restarts: ", last.description));
  }

  // ---- the bystander ----

  // Opens the bystander's session (tenant "bystander", then "bystander-1", ... after each
  // misattribution, so that the hold-back the blamed tenant earns does not stop the bench).
  absl::Status StartBystander() {
    GPUKIT_ASSIGN_OR_RETURN(
        bystander_, api_.OpenSession(bystander_generation_ == 0
                                         ? std::string("bystander")
                                         : absl::StrCat("bystander-", bystander_generation_)));
    ++bystander_generation_;
    std::vector<float> values(16);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 4.5f;
    GPUKIT_ASSIGN_OR_RETURN(bystander_x_, Upload(bystander_, values));
    bystander_values_ = values;
    // The first add (on cuda: the built-in kernel's first load) before anything is timed.
    return CheckBystanderSum();
  }

  // x + x has the right values.
  absl::Status CheckBystanderSum() {
    GPUKIT_ASSIGN_OR_RETURN(std::string sum,
                            RunOp(bystander_, "add", {bystander_x_, bystander_x_}));
    GPUKIT_ASSIGN_OR_RETURN(std::vector<float> values, Download(bystander_, sum));
    GPUKIT_RETURN_IF_ERROR(api_.Free(bystander_, sum).status());
    for (size_t i = 0; i < bystander_values_.size(); ++i) {
      if (i >= values.size() || values[i] != 2 * bystander_values_[i]) {
        return absl::DataLossError(absl::StrCat("the bystander's x + x is wrong at ", i));
      }
    }
    return absl::OkStatus();
  }

  // ---- one cycle ----

  absl::StatusOr<Cycle> RunCycle(int i) {
    // The faulty session, ready before the clock starts.
    std::string faulty;
    std::string faulty_array;
    if (injection_ != Injection::kKill) {
      GPUKIT_ASSIGN_OR_RETURN(faulty, api_.OpenSession(absl::StrCat("faulty-", i)));
      GPUKIT_ASSIGN_OR_RETURN(faulty_array, Upload(faulty, {1, 2, 3, 4}));
    }
    pid_t victim = 0;
    if (injection_ == Injection::kKill) {
      GPUKIT_ASSIGN_OR_RETURN(victim, ExecutorPid());
    }

    Cycle cycle;
    // Nanoseconds since the injection at which the fault took effect as the bench sees it (the
    // faulty call returned, or the restart showed); 0 until then.
    std::atomic<int64_t> fault_seen_ns{0};
    absl::Status bystander_error;
    bool bystander_blamed = false;
    absl::Notification go;
    absl::Time injected;
    std::thread bystander([&] {
      go.WaitForNotification();
      bool failed = false;
      const absl::Time give_up = injected + kRecoveryTimeout;
      while (absl::Now() < give_up) {
        const bool after_fault = failed || fault_seen_ns.load() != 0;
        absl::StatusOr<std::string> sum = RunOp(bystander_, "add", {bystander_x_, bystander_x_});
        if (sum.ok()) {
          const absl::Time done = absl::Now();
          api_.Free(bystander_, *sum).IgnoreError();
          if (!after_fault) {
            ++cycle.early;
            continue;
          }
          cycle.bystander_recovered = done - injected;
          return;
        }
        if (absl::IsAborted(sum.status())) {
          bystander_blamed = true;  // checked against the faulty call's answer below
        } else if (absl::IsUnavailable(sum.status())) {
          ++cycle.unavailable;
        } else {
          // Wrong: an op of a session that did not fault must succeed or be safe to retry.
          // Retried all the same, so the cycle is measured; reported, and fails the run.
          if (cycle.errors++ == 0) cycle.first_error = sum.status().ToString();
        }
        failed = true;
      }
      bystander_error = absl::DeadlineExceededError("the bystander's add never succeeded");
    });

    injected = absl::Now();
    go.Notify();
    absl::Status fault;
    switch (injection_) {
      case Injection::kOp:
        fault = RunOp(faulty, "_test_fault", {faulty_array}).status();
        break;
      case Injection::kKernel:
        fault = LaunchOutOfBounds(faulty, faulty_array);
        break;
      case Injection::kKill:
        if (::kill(victim, SIGKILL) != 0) {
          fault = absl::InternalError(std::strerror(errno));
        } else {
          // SIGKILL takes effect at once: an add sent from here on cannot be the old
          // executor's.
          fault_seen_ns.store(
              std::max<int64_t>(1, absl::ToInt64Nanoseconds(absl::Now() - injected)));
          fault = WaitForRestarts(restarts_ + 1, /*standby_too=*/false);
        }
        break;
    }
    const absl::Duration returned = absl::Now() - injected;
    if (fault_seen_ns.load() == 0) {
      fault_seen_ns.store(std::max<int64_t>(1, absl::ToInt64Nanoseconds(returned)));
    }
    bystander.join();
    cycle.fault_returned = returned;

    if (injection_ == Injection::kKill) {
      GPUKIT_RETURN_IF_ERROR(fault);
      cycle.fault_status = "executor killed, restart seen";
    } else {
      if (fault.ok()) {
        return absl::InternalError(absl::StrCat("cycle ", i, ": the faulty call succeeded"));
      }
      cycle.fault_status = absl::StrCat("faulty call ", absl::StatusCodeToString(fault.code()));
      if (!absl::IsAborted(fault)) cycle.wrong_fault_answer = fault.ToString();
    }
    cycle.misattributed = bystander_blamed;
    if (!bystander_error.ok()) {
      return absl::InternalError(
          absl::StrCat("cycle ", i, ": the bystander failed: ", bystander_error.ToString()));
    }
    GPUKIT_RETURN_IF_ERROR(WaitForRestarts(restarts_ + 1, /*standby_too=*/true));
    GPUKIT_ASSIGN_OR_RETURN(Executors after, AllExecutors());
    restarts_ = after.restarts;
    GPUKIT_RETURN_IF_ERROR(CheckBystanderSum());
    if (cycle.misattributed) {
      GPUKIT_RETURN_IF_ERROR(api_.Close(bystander_).status());
      GPUKIT_RETURN_IF_ERROR(StartBystander());
    }
    if (!faulty.empty()) GPUKIT_RETURN_IF_ERROR(api_.Close(faulty).status());
    return cycle;
  }

  void PrintSummary(const std::vector<Cycle>& cycles) const {
    const auto row = [&](const char* name, absl::Duration Cycle::*field) {
      std::vector<double> ms;
      for (const Cycle& cycle : cycles) ms.push_back(absl::ToDoubleMilliseconds(cycle.*field));
      std::sort(ms.begin(), ms.end());
      std::printf("%-58s p50 %8.2f ms   max %8.2f ms\n", name, ms[ms.size() / 2], ms.back());
    };
    row("injection -> the bystander's first add after the fault", &Cycle::bystander_recovered);
    row(injection_ == Injection::kKill ? "injection -> ListDevices shows the restart"
                                       : "injection -> the faulty call returned",
        &Cycle::fault_returned);
    int misattributed = 0;
    for (const Cycle& cycle : cycles) misattributed += cycle.misattributed ? 1 : 0;
    int64_t errors = 0;
    std::string first_error;
    for (const Cycle& cycle : cycles) {
      if (cycle.errors > 0 && first_error.empty()) first_error = cycle.first_error;
      errors += cycle.errors;
    }
    if (errors > 0) {
      std::printf(
          "ERRORS: %lld of the bystander's adds failed with neither UNAVAILABLE nor "
          "success (retried); the first: %s\n",
          static_cast<long long>(errors), first_error.c_str());
    }
    int wrong_answers = 0;
    for (const Cycle& cycle : cycles) wrong_answers += !cycle.wrong_fault_answer.empty();
    if (wrong_answers > 0) {
      std::printf("WRONG ANSWER to the faulty call (not ABORTED) in %d of %zu cycles\n",
                  wrong_answers, cycles.size());
    }
    if (misattributed > 0) {
      std::printf(
          "MISATTRIBUTED in %d of %zu cycles: gpukitd answered the bystander's add ABORTED (and "
          "recorded the fault against its tenant)\n",
          misattributed, cycles.size());
    }
  }

  const Flags flags_;
  RawApi api_;
  const pid_t daemon_pid_;
  std::unique_ptr<v1::ComputeService::Stub> compute_;
  Injection injection_ = Injection::kOp;
  int standby_ready_ = 0;
  int64_t restarts_ = 0;
  int bystander_generation_ = 0;
  std::string bystander_;
  std::string bystander_x_;
  std::vector<float> bystander_values_;
};

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--backend cpu|cuda] [--cycles N] [--inject auto|op|kill] "
               "[--gpukitd PATH] [--verbose]\n",
               argv0);
  return 2;
}

}  // namespace
}  // namespace gpukit

int main(int argc, char** argv) {
  gpukit::UseFastMutexes();
  gpukit::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--verbose") {
      flags.verbose = true;
      continue;
    }
    if (i + 1 >= argc) return gpukit::Usage(argv[0]);
    const std::string value = argv[++i];
    if (flag == "--backend") {
      flags.backend = value;
    } else if (flag == "--cycles") {
      if (!absl::SimpleAtoi(value, &flags.cycles)) return gpukit::Usage(argv[0]);
    } else if (flag == "--inject") {
      flags.inject = value;
    } else if (flag == "--gpukitd") {
      flags.gpukitd = value;
    } else {
      return gpukit::Usage(argv[0]);
    }
  }
  if (flags.cycles <= 0 || (flags.backend != "cpu" && flags.backend != "cuda")) {
    return gpukit::Usage(argv[0]);
  }

  gpukit::testing::ScopedTempDir dir;
  gpukit::testing::DaemonOptions options;
  options.dir = dir.path();
  options.backend = flags.backend;
  options.daemon_path = flags.gpukitd;
  options.ready_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<gpukit::testing::DaemonProcess>> daemon =
      gpukit::testing::DaemonProcess::Start(options);
  if (!daemon.ok()) {
    std::fprintf(stderr, "gpukit_fault_recovery_bench: %s\n", daemon.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<gpukit::testing::RawApi> api =
      gpukit::testing::RawApi::Connect((*daemon)->address());
  absl::Status status = api.status();
  if (api.ok()) {
    gpukit::Bench bench(flags, *std::move(api), (*daemon)->pid());
    status = bench.Run();
  }
  std::fflush(stdout);  // the rows before the error
  if (!status.ok()) {
    // The end of gpukitd's log (its temporary directory goes with the bench).
    const std::string log = (*daemon)->Log();
    size_t from = log.size();
    for (int lines = 0; lines < 40 && from > 0; ++lines) {
      from = log.rfind('\n', from - 1);
      if (from == std::string::npos) from = 0;
    }
    std::fprintf(stderr, "gpukitd's log, the last lines:\n%s\ngpukit_fault_recovery_bench: %s\n",
                 log.substr(from).c_str(), status.ToString().c_str());
    return 1;
  }
  if (absl::Status stopped = (*daemon)->Stop(); !stopped.ok()) {
    std::fprintf(stderr, "gpukit_fault_recovery_bench: gpukitd: %s\n", stopped.ToString().c_str());
    return 1;
  }
  return 0;
}
