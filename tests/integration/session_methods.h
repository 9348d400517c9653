// The gpukit.v1 RPCs whose request names a session, found by walking the generated protos'
// descriptors: a request message with a session_id field, or with a message field that has
// one (Upload's header). A new RPC that names a session is found the same way, so the
// ownership test (session_ownership_test.cc, foreign_client.cc) cannot forget it.
//
//   for (const google::protobuf::MethodDescriptor* method : MethodsNamingASession()) {
//     ... method->full_name() is "gpukit.v1.ArrayService.Describe" ...
//   }
//
// Thread safety: pure functions over the generated pool.
#ifndef GPUKIT_TESTS_INTEGRATION_SESSION_METHODS_H_
#define GPUKIT_TESTS_INTEGRATION_SESSION_METHODS_H_

#include <string>
#include <vector>

#include "gpukit/v1/admin.pb.h"
#include "gpukit/v1/array.pb.h"
#include "gpukit/v1/compute.pb.h"
#include "gpukit/v1/session.pb.h"

namespace gpukit::testing {

// Every proto file of gpukit.v1 that declares services.
inline const std::vector<std::string>& GpukitServiceFiles() {
  static const auto* files =
      new std::vector<std::string>{"gpukit/v1/session.proto", "gpukit/v1/array.proto",
                                   "gpukit/v1/compute.proto", "gpukit/v1/admin.proto"};
  return *files;
}

// True if `message` has a string field session_id, directly or in a message field.
inline bool NamesASession(const google::protobuf::Descriptor& message) {
  for (int i = 0; i < message.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& field = *message.field(i);
    if (field.name() == "session_id") return true;
    if (field.type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && !field.is_map()) {
      const google::protobuf::Descriptor& inner = *field.message_type();
      for (int j = 0; j < inner.field_count(); ++j) {
        if (inner.field(j)->name() == "session_id") return true;
      }
    }
  }
  return false;
}

// Every method of every gpukit.v1 service, in the order the protos declare them.
inline std::vector<const google::protobuf::MethodDescriptor*> EveryMethod() {
  // Touch a message of each file, so that the generated pool has built them.
  (void)v1::OpenSessionRequest::descriptor();
  (void)v1::CreateArrayRequest::descriptor();
  (void)v1::RunOpRequest::descriptor();
  (void)v1::ListSessionsRequest::descriptor();
  std::vector<const google::protobuf::MethodDescriptor*> methods;
  const google::protobuf::DescriptorPool& pool =
      *google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : GpukitServiceFiles()) {
    const google::protobuf::FileDescriptor* file = pool.FindFileByName(name);
    if (file == nullptr) continue;
    for (int s = 0; s < file->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor& service = *file->service(s);
      for (int m = 0; m < service.method_count(); ++m) methods.push_back(service.method(m));
    }
  }
  return methods;
}

// Every method of every gpukit.v1 service whose request names a session. Empty if the
// generated descriptors are missing (a test should check the count).
inline std::vector<const google::protobuf::MethodDescriptor*> MethodsNamingASession() {
  std::vector<const google::protobuf::MethodDescriptor*> methods;
  for (const google::protobuf::MethodDescriptor* method : EveryMethod()) {
    if (NamesASession(*method->input_type())) methods.push_back(method);
  }
  return methods;
}

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_SESSION_METHODS_H_
