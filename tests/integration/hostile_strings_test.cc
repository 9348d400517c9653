// Hostile string fields, written from the proto alone: the test walks the descriptors of every
// gpukit.v1 service, finds every string field of every request (recursively: nested messages,
// repeated fields, map keys and values, oneof members), and sends each RPC with that one field
// holding control characters, and holding 1 MiB. The daemon must answer INVALID_ARGUMENT naming
// the field, in a short message that does not echo the value; its log must stay free of raw
// control characters; and it must serve the next client. A string field added to the proto
// later is covered by this test without a change to it.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The protos whose services gpukitd serves.
constexpr const char* kProtoFiles[] = {"gpukit/v1/session.proto", "gpukit/v1/array.proto",
                                       "gpukit/v1/compute.proto", "gpukit/v1/admin.proto"};
// Fields the daemon's string rule leaves out, each with its own bound elsewhere.
constexpr const char* kExemptFields[] = {"gpukit.v1.CompileKernelRequest.source",
                                        "gpukit.v1.KernelHeader.source"};

// One string field of one RPC's request, and how to reach it from the request.
struct StringField {
  std::string method;  // "/gpukit.v1.SessionService/Open"
  const Descriptor* request = nullptr;
  // Fields from the request down to the string; a map field's step goes into the entry.
  std::vector<const FieldDescriptor*> steps;
  // The field's path as the daemon names it: "client.name", "entries[0]", "attrs key",
  // "attrs[\"k\"].string_value" (a string-valued map's value: "labels[\"k\"]").
  std::string path;
};

bool IsExempt(const FieldDescriptor& field) {
  for (const char* exempt : kExemptFields) {
    if (field.full_name() == exempt) return true;
  }
  return false;
}

void CollectStrings(const StringField& prefix, const Descriptor& message, int depth,
                    std::vector<StringField>* out) {
  ASSERT_LT(depth, 8) << "message nesting too deep at " << prefix.path;
  for (int i = 0; i < message.field_count(); ++i) {
    const FieldDescriptor* field = message.field(i);
    StringField next = prefix;
    next.steps.push_back(field);
    const std::string name =
        prefix.path.empty() ? field->name() : absl::StrCat(prefix.path, ".", field->name());
    if (field->is_map()) {
      const FieldDescriptor* key = field->message_type()->map_key();
      const FieldDescriptor* value = field->message_type()->map_value();
      if (key->type() == FieldDescriptor::TYPE_STRING) {
        StringField key_case = next;
        key_case.steps.push_back(key);
        key_case.path = absl::StrCat(name, " key");
        out->push_back(key_case);
      }
      const std::string entry = key->type() == FieldDescriptor::TYPE_STRING
                                    ? absl::StrCat(name, "[\"k\"]")
                                    : absl::StrCat(name, "[0]");
      StringField value_case = next;
      value_case.steps.push_back(value);
      if (value->type() == FieldDescriptor::TYPE_STRING) {
        value_case.path = entry;
        out->push_back(value_case);
      } else if (value->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        value_case.path = entry;
        CollectStrings(value_case, *value->message_type(), depth + 1, out);
      }
      continue;
    }
    next.path = field->is_repeated() ? absl::StrCat(name, "[0]") : name;
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!IsExempt(*field)) out->push_back(next);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectStrings(next, *field->message_type(), depth + 1, out);
    }
  }
}

std::vector<StringField> AllRequestStringFields() {
  std::vector<StringField> fields;
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* file_name : kProtoFiles) {
    const google::protobuf::FileDescriptor* file = pool->FindFileByName(file_name);
    EXPECT_NE(file, nullptr) << file_name;
    if (file == nullptr) continue;
    for (int s = 0; s < file->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        StringField root;
        root.method = absl::StrCat("/", service->full_name(), "/", service->method(m)->name());
        root.request = service->method(m)->input_type();
        CollectStrings(root, *root.request, 0, &fields);
      }
    }
  }
  return fields;
}

// Sets the field `steps` lead to (creating the messages and entries on the way) to `value`.
// A map entry gets the key "k" unless the key is the field being set.
void SetPath(Message* message, const std::vector<const FieldDescriptor*>& steps, size_t step,
             const std::string& value) {
  const FieldDescriptor* field = steps[step];
  const google::protobuf::Reflection* reflection = message->GetReflection();
  if (step + 1 == steps.size()) {
    if (field->is_repeated()) {
      reflection->AddString(message, field, value);
    } else {
      reflection->SetString(message, field, value);
    }
    return;
  }
  Message* child = field->is_repeated() ? reflection->AddMessage(message, field)
                                        : reflection->MutableMessage(message, field);
  if (field->is_map()) {
    const FieldDescriptor* key = field->message_type()->map_key();
    if (key->type() == FieldDescriptor::TYPE_STRING && steps[step + 1] != key) {
      child->GetReflection()->SetString(child, key, "k");
    }
  }
  SetPath(child, steps, step + 1, value);
}

// Sends `request` as the whole of a call to `method` (for a streaming method, its one message,
// then the half-close) and returns the daemon's status.
grpc::Status CallWith(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const Message& request) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &buffer, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

bool HasRawControl(absl::string_view text) {
  for (char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\n') || byte == 0x7f) return true;
  }
  return absl::StrContains(text, "\xc2\x9b");
}

class HostileStringsTest : public DaemonTest {
 protected:
  // Every line gpukitd can write, so that the log check below sees the most.
  std::string DaemonConfigJson() const override { return R"({"logLevel": "debug"})"; }
};

TEST_F(HostileStringsTest, WalkFindsTheStringFieldsOfEveryService) {
  const std::vector<StringField> fields = AllRequestStringFields();
  std::vector<std::string> paths;
  for (const StringField& field : fields) {
    paths.push_back(absl::StrCat(field.method, " ", field.path));
  }
  // A sample from each service and each kind of step: if the walk missed a kind, the test
  // below would pass without covering it.
  EXPECT_THAT(paths, ::testing::IsSupersetOf({
                         "/gpukit.v1.SessionService/Open tenant",
                         "/gpukit.v1.SessionService/Open client.name",
                         "/gpukit.v1.SessionService/Open client.hostname",
                         "/gpukit.v1.SessionService/Open client.library_version",
                         "/gpukit.v1.ArrayService/Upload header.session_id",
                         "/gpukit.v1.ArrayService/Upload header.handle",
                         "/gpukit.v1.ComputeService/RunOp op",
                         "/gpukit.v1.ComputeService/RunOp inputs[0].handle",
                         "/gpukit.v1.ComputeService/RunOp attrs key",
                         "/gpukit.v1.ComputeService/RunOp attrs[\"k\"].string_value",
                         "/gpukit.v1.ComputeService/Submit ops[0].run.inputs[0].handle",
                         "/gpukit.v1.ComputeService/Submit ops[0].free",
                         "/gpukit.v1.ComputeService/CompileKernel entries[0]",
                         "/gpukit.v1.ComputeService/LaunchKernel args[0].array",
                         "/gpukit.v1.AdminService/CreatePartition partition.name",
                         "/gpukit.v1.AdminService/UpdatePartition update_mask[0]",
                         "/gpukit.v1.AdminService/DeletePartition name",
                         "/gpukit.v1.AdminService/ListTasks partition",
                     }));
  EXPECT_THAT(paths, ::testing::Not(::testing::Contains(::testing::HasSubstr(" source"))));
}

struct HostileValue {
  std::string name;
  std::string value;
  std::string expected;  // in the daemon's message
};

TEST_F(HostileStringsTest, EveryRequestStringFieldRefusesControlCharactersAndHugeValues) {
  const std::vector<HostileValue> values = {
      {"escape sequence", "ok\x1b[2Jgone", "control character U+001B at byte 2"},
      {"bell", "a\a", "control character U+0007 at byte 1"},
      {"carriage return", "line\rfake log line", "control character U+000D at byte 4"},
      {"newline", "a\nb", "control character U+000A at byte 1"},
      {"NUL", std::string("a\0b", 3), "control character U+0000 at byte 1"},
      {"DEL", "a\x7f", "control character U+007F at byte 1"},
      {"C1 CSI",
       "a\xc2\x9b"
       "2J",
       "control character U+009B at byte 1"},
      {"right-to-left override", "a\xe2\x80\xae", "control character U+202E at byte 1"},
      {"1 MiB", std::string(size_t{1} << 20, 'a'), "is 1048576 bytes long; at most 256"},
  };
  const std::vector<StringField> fields = AllRequestStringFields();
  ASSERT_GT(fields.size(), 30u);
  for (const StringField& field : fields) {
    for (const HostileValue& value : values) {
      SCOPED_TRACE(absl::StrCat(field.method, " ", field.path, " = ", value.name));
      std::unique_ptr<Message> request(google::protobuf::MessageFactory::generated_factory()
                                           ->GetPrototype(field.request)
                                           ->New());
      SetPath(request.get(), field.steps, 0, value.value);
      const grpc::Status status = CallWith(api().channel(), field.method, *request);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
      EXPECT_THAT(status.error_message(), ::testing::HasSubstr(field.path));
      EXPECT_THAT(status.error_message(), ::testing::HasSubstr(value.expected));
      EXPECT_LT(status.error_message().size(), 512u);
      EXPECT_FALSE(HasRawControl(status.error_message())) << status.error_message();
    }
    // The daemon answers the next call.
    GPUKIT_ASSERT_OK(api().Status().status()) << field.method << " " << field.path;
  }
  EXPECT_FALSE(HasRawControl(daemon().Log())) << daemon().Log();
  ExpectDaemonServesAnotherClient();
}

TEST_F(HostileStringsTest, StringsThatAreNotUtf8AreRefusedBeforeTheHandler) {
  // protobuf's parser refuses a proto3 string that is not UTF-8 before gpukitd's code runs
  // (gRPC answers INTERNAL); the daemon must serve on and log no raw byte.
  v1::OpenSessionRequest request;
  request.set_tenant("t");
  request.mutable_client()->set_name("a\x9b[2J\xff");
  const grpc::Status status = CallWith(api().channel(), "/gpukit.v1.SessionService/Open", request);
  EXPECT_FALSE(status.ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse sessions, api().ListSessions());
  EXPECT_THAT(sessions.sessions(), ::testing::IsEmpty());
  EXPECT_FALSE(absl::StrContains(daemon().Log(), "\x9b")) << daemon().Log();
  ExpectDaemonServesAnotherClient();
}

TEST_F(HostileStringsTest, PrintableUnicodeNamesAreAccepted) {
  // The rule refuses controls, not languages: a client name in any script opens a session.
  v1::OpenSessionRequest request;
  request.set_tenant("t");
  request.mutable_client()->set_name("caf\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac-\xf0\x9f\x9a\x80");
  request.mutable_client()->set_hostname(std::string(253, 'h'));  // the most allowed
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::OpenSessionResponse opened, api().Open(request));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse sessions, api().ListSessions());
  ASSERT_EQ(sessions.sessions_size(), 1);
  EXPECT_EQ(sessions.sessions(0).client_name(), request.client().name());
  GPUKIT_EXPECT_OK(api().Close(opened.session_id()).status());
}

}  // namespace
}  // namespace gpukit::testing
