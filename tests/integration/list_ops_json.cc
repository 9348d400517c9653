// gpukit_list_ops_json ADDRESS: prints a running gpukitd's ListOps answer as JSON (protobuf's
// JSON mapping: field names in lowerCamelCase, enums by name, every field present), for the
// Python op conformance test (tests/python/test_op_conformance.py), which walks the op table
// the daemon reports. The Python client has no ListOps of its own, and the test must see the
// answer of the daemon it runs the ops on (which backends run which ops).
//
// Exit status 0 with the JSON on stdout; 1 with the error on stderr.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "grpcpp/grpcpp.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " ADDRESS (e.g. unix:///run/gpukit/gpukitd.sock)\n";
    return 1;
  }
  std::unique_ptr<gpukit::v1::ComputeService::Stub> compute = gpukit::v1::ComputeService::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  gpukit::v1::ListOpsResponse response;
  const grpc::Status status = compute->ListOps(&context, gpukit::v1::ListOpsRequest(), &response);
  if (!status.ok()) {
    std::cerr << "ListOps at " << argv[1] << ": " << status.error_message() << "\n";
    return 1;
  }
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(response, &json, options).ok()) {
    std::cerr << "cannot print the answer as JSON\n";
    return 1;
  }
  std::cout << json << "\n";
  return 0;
}
