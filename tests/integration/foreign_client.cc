// A client under another uid, for session_ownership_test.cc. The test (running as root)
// spawns it; it drops to --as-uid (and that gid, with no supplementary groups) before it
// touches gRPC, so gpukitd sees a different, unprivileged peer on its unix socket.
//
//   foreign_client --addr ADDR --as-uid 65534 --mode attack --session S --array A --kernel K
//       For every gpukit.v1 method whose request names a session (session_methods.h), sends
//       one request built by reflection that names session S, with the victim's handles
//       where a field takes one (handle/array: A, kernel: K), through grpc::GenericStub;
//       Upload gets its header and a chunk. Close goes last. Prints
//       "RESULT <method> <code> <message>" for each. Then opens a session of its own and
//       prints "OWN <id>" (a session of the caller's own tenant, or of --tenant), "LISTED <id>" for
//       each session ListSessions shows it, and "TASK <session id>" for each task ListTasks shows
//       it, "TENANT <name>" for each tenant ListTenants shows it.
//   foreign_client --addr ADDR --as-uid 65534 --mode open [--tenant T] [--partition P]
//       Opens a session (60 s lease; tenant T, by default the caller's own) with a float32
//       array of 4 and prints "GRANTED <tenant>" and "OPENED <session> <array>", or
//       "REFUSED <code> <message>" if the daemon refused the session.
//   foreign_client --addr ADDR --as-uid U --mode every --session S --array A --kernel K
//       As attack, but for every method of every gpukit.v1 service (EveryMethod).
// Any mode takes --token T: every call carries "authorization: Bearer T" (for TCP).
//   foreign_client --addr ADDR --as-uid 65534 --mode use --session S --array A
//       KeepAlive and Describe on S and A; prints "USE <method> <code>" for each.
//
// Exit 0 once it printed everything; 1 with a message on stderr if it could not run.
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/dynamic_message.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gpukit/v1/session.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/session_methods.h"

namespace {

namespace pb = google::protobuf;
using gpukit::v1::AdminService;
using gpukit::v1::ArrayService;
using gpukit::v1::SessionService;

struct Flags {
  std::string addr;
  std::string mode;
  int64_t as_uid = -1;
  std::string session;
  std::string array;
  std::string kernel;
  std::string tenant;     // OpenSession's; empty: the caller's own
  std::string partition;  // OpenSession's; empty: "default"
};

int Fail(const std::string& message) {
  std::cerr << "foreign_client: " << message << "\n";
  return 1;
}

// --token: sent as "authorization: Bearer <token>" on every call when set.
std::string& Token() {
  static auto* token = new std::string;
  return *token;
}

void Authorize(grpc::ClientContext& context) {
  if (!Token().empty()) context.AddMetadata("authorization", "Bearer " + Token());
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

// Fills what `message` needs to act on the victim's session: session_id, handles, and
// enough of the rest that the request would do something if gpukitd let it through. For a
// oneof, the first member (the last with `last_oneof_member`, for Upload's chunk).
void Fill(pb::Message& message, const Flags& victim, bool last_oneof_member, int depth = 0) {
  const pb::Descriptor& type = *message.GetDescriptor();
  const pb::Reflection& reflection = *message.GetReflection();
  for (int i = 0; i < type.field_count(); ++i) {
    const pb::FieldDescriptor& field = *type.field(i);
    if (const pb::OneofDescriptor* oneof = field.containing_oneof()) {
      const pb::FieldDescriptor* pick =
          oneof->field(last_oneof_member && depth == 0 ? oneof->field_count() - 1 : 0);
      if (&field != pick) continue;
    }
    const std::string& name = field.name();
    if (field.type() == pb::FieldDescriptor::TYPE_STRING) {
      std::string value;
      if (name == "session_id") {
        value = victim.session;
      } else if (name == "handle" || name == "array") {
        value = victim.array;
      } else if (name == "kernel") {
        value = victim.kernel;
      } else if (name == "op") {
        value = "neg";
      } else if (name == "source") {
        value = "extern \"C\" __global__ void k(float* x) { x[0] = 1; }";
      } else if (name == "entries") {
        value = "k";
      } else {
        continue;
      }
      if (field.is_repeated()) {
        reflection.AddString(&message, &field, value);
      } else {
        reflection.SetString(&message, &field, value);
      }
    } else if (field.type() == pb::FieldDescriptor::TYPE_BYTES && name == "data") {
      reflection.SetString(&message, &field, std::string(16, '\x7f'));
    } else if (field.type() == pb::FieldDescriptor::TYPE_INT64 && !field.is_repeated() &&
               (name == "bytes" || name == "descriptor_allocation_bytes")) {
      reflection.SetInt64(&message, &field, 16);
    } else if (field.type() == pb::FieldDescriptor::TYPE_INT64 && field.is_repeated() &&
               name == "shape") {
      reflection.AddInt64(&message, &field, 4);
    } else if (field.type() == pb::FieldDescriptor::TYPE_ENUM && name == "dtype") {
      reflection.SetEnumValue(&message, &field, gpukit::v1::DTYPE_FLOAT32);
    } else if (field.type() == pb::FieldDescriptor::TYPE_MESSAGE && !field.is_map() && depth < 2) {
      pb::Message* inner = field.is_repeated() ? reflection.AddMessage(&message, &field)
                                               : reflection.MutableMessage(&message, &field);
      Fill(*inner, victim, last_oneof_member, depth + 1);
    }
  }
}

// Sends `messages` on one call of `method` ("/pkg.Service/Method") and reads every reply;
// works for unary and streaming methods alike (on the wire they are all streams).
grpc::Status Call(grpc::GenericStub& stub, const std::string& method,
                  const std::vector<std::string>& messages) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  Authorize(context);
  grpc::CompletionQueue queue;
  auto wait = [&queue] {
    void* tag = nullptr;
    bool ok = false;
    return queue.Next(&tag, &ok) && ok;
  };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  call->StartCall(nullptr);
  bool open = wait();
  for (const std::string& bytes : messages) {
    if (!open) break;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, nullptr);
    open = wait();
  }
  if (open) {
    call->WritesDone(nullptr);
    wait();
    grpc::ByteBuffer reply;
    do call->Read(&reply, nullptr);
    while (wait());
  }
  grpc::Status status;
  call->Finish(&status, nullptr);
  wait();
  return status;
}

// Sends one request of each of `methods` (built by Fill) and prints "RESULT <method> <code>
// <message>" for each.
void SendEach(const std::shared_ptr<grpc::Channel>& channel, const Flags& victim,
              std::vector<const pb::MethodDescriptor*> methods) {
  // Close last: were it let through, it would end the session that the others aim at.
  std::stable_partition(methods.begin(), methods.end(),
                        [](const pb::MethodDescriptor* m) { return m->name() != "Close"; });
  grpc::GenericStub stub(channel);
  pb::DynamicMessageFactory factory(pb::DescriptorPool::generated_pool());
  for (const pb::MethodDescriptor* method : methods) {
    std::vector<std::string> messages;
    std::unique_ptr<pb::Message> request(factory.GetPrototype(method->input_type())->New());
    Fill(*request, victim, /*last_oneof_member=*/false);
    messages.push_back(request->SerializeAsString());
    if (method->client_streaming()) {  // Upload: the header, then a chunk
      std::unique_ptr<pb::Message> chunk(factory.GetPrototype(method->input_type())->New());
      Fill(*chunk, victim, /*last_oneof_member=*/true);
      messages.push_back(chunk->SerializeAsString());
    }
    const std::string path = absl::StrCat("/", method->service()->full_name(), "/", method->name());
    const grpc::Status status = Call(stub, path, messages);
    std::cout << "RESULT " << method->full_name() << " " << status.error_code() << " "
              << status.error_message() << "\n";
  }
}

int Attack(const std::shared_ptr<grpc::Channel>& channel, const Flags& victim) {
  SendEach(channel, victim, gpukit::testing::MethodsNamingASession());

  auto sessions = SessionService::NewStub(channel);
  gpukit::v1::OpenSessionRequest open;
  open.set_tenant(victim.tenant);
  open.set_lease_ms(60000);
  gpukit::v1::OpenSessionResponse opened;
  grpc::ClientContext open_context;
  open_context.set_deadline(Deadline());
  Authorize(open_context);
  grpc::Status status = sessions->Open(&open_context, open, &opened);
  if (!status.ok()) return Fail("Open: " + status.error_message());
  std::cout << "OWN " << opened.session_id() << "\n";

  auto admin = AdminService::NewStub(channel);
  gpukit::v1::ListSessionsResponse listed;
  grpc::ClientContext list_context;
  list_context.set_deadline(Deadline());
  Authorize(list_context);
  status = admin->ListSessions(&list_context, {}, &listed);
  if (!status.ok()) return Fail("ListSessions: " + status.error_message());
  for (const auto& session : listed.sessions())
    std::cout << "LISTED " << session.session_id() << "\n";

  gpukit::v1::ListTasksResponse tasks;
  grpc::ClientContext tasks_context;
  tasks_context.set_deadline(Deadline());
  Authorize(tasks_context);
  status = admin->ListTasks(&tasks_context, {}, &tasks);
  if (!status.ok()) return Fail("ListTasks: " + status.error_message());
  for (const auto& task : tasks.tasks()) std::cout << "TASK " << task.session_id() << "\n";

  gpukit::v1::ListTenantsResponse tenants;
  grpc::ClientContext tenants_context;
  tenants_context.set_deadline(Deadline());
  Authorize(tenants_context);
  status = admin->ListTenants(&tenants_context, {}, &tenants);
  if (!status.ok()) return Fail("ListTenants: " + status.error_message());
  for (const auto& tenant : tenants.tenants()) std::cout << "TENANT " << tenant.tenant() << "\n";
  return 0;
}

int Open(const std::shared_ptr<grpc::Channel>& channel, const Flags& flags) {
  auto sessions = SessionService::NewStub(channel);
  gpukit::v1::OpenSessionRequest open;
  open.set_tenant(flags.tenant);
  open.set_partition(flags.partition);
  open.set_lease_ms(60000);
  gpukit::v1::OpenSessionResponse opened;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  Authorize(context);
  grpc::Status status = sessions->Open(&context, open, &opened);
  if (!status.ok()) {
    // A refusal is an answer the test checks, not a failure to run.
    std::cout << "REFUSED " << status.error_code() << " " << status.error_message() << "\n";
    return 0;
  }
  std::cout << "GRANTED " << opened.tenant() << "\n";
  auto arrays = ArrayService::NewStub(channel);
  gpukit::v1::CreateArrayRequest create;
  create.set_session_id(opened.session_id());
  create.set_dtype(gpukit::v1::DTYPE_FLOAT32);
  create.add_shape(4);
  gpukit::v1::CreateArrayResponse created;
  grpc::ClientContext create_context;
  create_context.set_deadline(Deadline());
  Authorize(create_context);
  status = arrays->Create(&create_context, create, &created);
  if (!status.ok()) return Fail("Create: " + status.error_message());
  std::cout << "OPENED " << opened.session_id() << " " << created.array().handle() << "\n";
  return 0;
}

int Use(const std::shared_ptr<grpc::Channel>& channel, const Flags& flags) {
  auto sessions = SessionService::NewStub(channel);
  gpukit::v1::KeepAliveRequest keep;
  keep.set_session_id(flags.session);
  gpukit::v1::KeepAliveResponse kept;
  grpc::ClientContext keep_context;
  keep_context.set_deadline(Deadline());
  Authorize(keep_context);
  std::cout << "USE KeepAlive " << sessions->KeepAlive(&keep_context, keep, &kept).error_code()
            << "\n";
  auto arrays = ArrayService::NewStub(channel);
  gpukit::v1::DescribeArrayRequest describe;
  describe.set_session_id(flags.session);
  describe.set_handle(flags.array);
  gpukit::v1::DescribeArrayResponse described;
  grpc::ClientContext describe_context;
  describe_context.set_deadline(Deadline());
  Authorize(describe_context);
  std::cout << "USE Describe "
            << arrays->Describe(&describe_context, describe, &described).error_code() << "\n";
  return 0;
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
    } else if (name == "--as-uid") {
      if (!absl::SimpleAtoi(value, &flags.as_uid)) return Fail("--as-uid needs a number");
    } else if (name == "--session") {
      flags.session = value;
    } else if (name == "--array") {
      flags.array = value;
    } else if (name == "--kernel") {
      flags.kernel = value;
    } else if (name == "--token") {
      Token() = value;
    } else if (name == "--tenant") {
      flags.tenant = value;
    } else if (name == "--partition") {
      flags.partition = value;
    } else {
      return Fail("unknown flag " + name);
    }
  }
  if (flags.addr.empty() || flags.as_uid < 0) return Fail("--addr and --as-uid are required");
  // Drop to the foreign uid before gRPC opens anything: groups first, then gid, then uid.
  const auto uid = static_cast<uid_t>(flags.as_uid);
  if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) {
    return Fail(absl::StrCat("cannot become uid ", uid, " (run as root)"));
  }
  if (getuid() != uid || geteuid() != uid) return Fail("still not the foreign uid");

  auto channel = grpc::CreateChannel(flags.addr, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    return Fail("cannot connect to " + flags.addr + " (socket mode or directory permissions?)");
  }
  if (flags.mode == "attack") return Attack(channel, flags);
  if (flags.mode == "open") return Open(channel, flags);
  if (flags.mode == "every") {
    SendEach(channel, flags, gpukit::testing::EveryMethod());
    return 0;
  }
  if (flags.mode == "use") return Use(channel, flags);
  return Fail("unknown --mode " + flags.mode);
}
