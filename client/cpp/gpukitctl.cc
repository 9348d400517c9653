// gpukitctl: the operator's view of a running gpukitd.
//
//   gpukitctl [--addr ADDR] [-o table|json] status|devices|sessions
//
// Exit status 0 on success, 1 on any error (the reason goes to stderr).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cpp/channel.h"
#include "google/protobuf/util/json_util.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "runtime/base/units.h"

namespace gpukit {
namespace {

constexpr char kUsage[] = R"(Usage: gpukitctl [--addr ADDR] [-o table|json] COMMAND

Commands:
  status     daemon version, backend, uptime, sessions, listen addresses
  devices    devices with memory in use and total
  sessions   open sessions: tenant, partition, client, arrays, memory, age, lease left

Flags:
  --addr ADDR      gpukitd address: unix:///path.sock or host:port
                   (default: $GPUKIT_ADDR, else the default socket)
  -o, --output F   table (default) or json
  --timeout DUR    deadline of the call, e.g. 5s (default 10s)
  --help           this help
  --version        print the version
)";

// Columns padded to their widest cell and separated by three spaces, as kubectl prints.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    std::cout << line << "\n";
  }
}

// kubectl-style age: 45s, 12m, 3h, 2d.
std::string Age(int64_t ms) {
  const int64_t s = ms / 1000;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 2 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 2 * 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

int PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    std::cerr << "gpukitctl: cannot print JSON: " << status.message() << "\n";
    return 1;
  }
  std::cout << json;
  return 0;
}

int Fail(absl::string_view what, const absl::Status& status) {
  std::cerr << "gpukitctl: " << what << ": " << status.message() << "\n";
  return 1;
}

struct Flags {
  std::string addr;
  std::string output = "table";
  absl::Duration timeout = absl::Seconds(10);
  std::string command;
};

class Ctl {
 public:
  Ctl(std::shared_ptr<grpc::Channel> channel, const Flags& flags)
      : admin_(v1::AdminService::NewStub(channel)), flags_(flags) {}

  int Status() {
    v1::StatusResponse response;
    grpc::ClientContext context;
    Deadline(context);
    absl::Status status = FromGrpc(admin_->Status(&context, {}, &response), context);
    if (!status.ok()) return Fail("status", status);
    if (flags_.output == "json") return PrintJson(response);
    PrintTable(
        {{"VERSION", "BACKEND", "UPTIME", "DEVICES", "SESSIONS", "ARRAYS", "LISTEN"},
         {response.version(), response.backend(), Age(response.uptime_ms()),
          absl::StrCat(response.device_count()), absl::StrCat(response.sessions()),
          absl::StrCat(response.arrays()), absl::StrJoin(response.listen_addresses(), ",")}});
    return 0;
  }

  int Devices() {
    v1::ListDevicesResponse response;
    grpc::ClientContext context;
    Deadline(context);
    absl::Status status = FromGrpc(admin_->ListDevices(&context, {}, &response), context);
    if (!status.ok()) return Fail("devices", status);
    if (flags_.output == "json") return PrintJson(response);
    std::vector<std::vector<std::string>> rows = {
        {"INDEX", "NAME", "BACKEND", "MEMORY-USED", "MEMORY-TOTAL"}};
    for (const v1::DeviceInfo& d : response.devices()) {
      rows.push_back({absl::StrCat(d.index()), d.name(), d.backend(),
                      FormatBytes(d.memory_used_bytes()), FormatBytes(d.memory_total_bytes())});
    }
    PrintTable(rows);
    return 0;
  }

  int Sessions() {
    v1::ListSessionsResponse response;
    grpc::ClientContext context;
    Deadline(context);
    absl::Status status = FromGrpc(admin_->ListSessions(&context, {}, &response), context);
    if (!status.ok()) return Fail("sessions", status);
    if (flags_.output == "json") return PrintJson(response);
    if (response.sessions().empty()) {
      std::cerr << "No sessions.\n";
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {{"SESSION", "TENANT", "PARTITION", "CLIENT",
                                                   "PID", "ARRAYS", "MEMORY", "AGE", "LEASE-LEFT"}};
    for (const v1::SessionInfo& s : response.sessions()) {
      rows.push_back({s.session_id(), s.tenant(), s.partition(), s.client_name(),
                      absl::StrCat(s.client_pid()), absl::StrCat(s.arrays()),
                      FormatBytes(s.memory_bytes()), Age(s.age_ms()), Age(s.lease_remaining_ms())});
    }
    PrintTable(rows);
    return 0;
  }

 private:
  void Deadline(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(flags_.timeout));
  }

  std::unique_ptr<v1::AdminService::Stub> admin_;
  const Flags& flags_;
};

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next = [&](std::string* out) {
      if (inline_value) {
        *out = value;
        return true;
      }
      if (i + 1 >= argc) {
        std::cerr << "gpukitctl: " << arg << " needs a value\n";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--version") {
      std::cout << "gpukitctl " << GPUKIT_VERSION_STRING << "\n";
      return 0;
    } else if (arg == "--addr") {
      if (!next(&flags.addr)) return 1;
    } else if (arg == "-o" || arg == "--output") {
      if (!next(&flags.output)) return 1;
      if (flags.output != "table" && flags.output != "json") {
        std::cerr << "gpukitctl: output format \"" << flags.output << "\" is not table or json\n";
        return 1;
      }
    } else if (arg == "--timeout") {
      std::string text;
      if (!next(&text)) return 1;
      if (!absl::ParseDuration(text, &flags.timeout) || flags.timeout <= absl::ZeroDuration()) {
        std::cerr << "gpukitctl: --timeout \"" << text << "\" is not a positive duration\n";
        return 1;
      }
    } else if (!arg.empty() && arg[0] == '-') {
      std::cerr << "gpukitctl: unknown flag " << arg << " (see gpukitctl --help)\n";
      return 1;
    } else if (flags.command.empty()) {
      flags.command = arg;
    } else {
      std::cerr << "gpukitctl: unexpected argument \"" << arg << "\"\n";
      return 1;
    }
  }
  if (flags.command.empty()) {
    std::cerr << kUsage;
    return 1;
  }
  if (flags.command != "status" && flags.command != "devices" && flags.command != "sessions") {
    std::cerr << "gpukitctl: unknown command \"" << flags.command
              << "\"; commands: status, devices, sessions\n";
    return 1;
  }
  if (flags.addr.empty()) flags.addr = DefaultClientTarget();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectChannel(flags.addr, flags.timeout);
  if (!channel.ok()) return Fail("connect", channel.status());
  Ctl ctl(*channel, flags);
  if (flags.command == "status") return ctl.Status();
  if (flags.command == "devices") return ctl.Devices();
  return ctl.Sessions();
}

}  // namespace
}  // namespace gpukit

int main(int argc, char** argv) { return gpukit::Main(argc, argv); }
