// Building blocks of the Submit protocol's tests (submit_test.cc over gRPC,
// submit_socket_test.cc over the submit socket): float arrays as bytes, pipelined ops,
// requests.
//
//   v1::SubmitRequest request = SubmitRequestOf({RunOf("add", {x, x}), FreeOf(x)}, /*sync=*/1);
#ifndef GPUKIT_TESTS_INTEGRATION_SUBMIT_REQUESTS_H_
#define GPUKIT_TESTS_INTEGRATION_SUBMIT_REQUESTS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpukit/v1/compute.pb.h"
#include "tests/integration/raw_api.h"

namespace gpukit::testing {

inline std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// A run op of `op` on the arrays `handles`.
inline v1::PipelinedOp RunOf(const std::string& op, const std::vector<std::string>& handles) {
  v1::PipelinedOp pipelined;
  pipelined.mutable_run()->set_op(op);
  for (const std::string& handle : handles) {
    *pipelined.mutable_run()->add_inputs() = HandleOperand(handle);
  }
  return pipelined;
}

inline v1::PipelinedOp FreeOf(const std::string& handle) {
  v1::PipelinedOp pipelined;
  pipelined.set_free(handle);
  return pipelined;
}

// A request of `ops`, with a sync point of token `sync` after them when it is > 0.
inline v1::SubmitRequest SubmitRequestOf(const std::vector<v1::PipelinedOp>& ops,
                                         uint64_t sync = 0) {
  v1::SubmitRequest request;
  for (const v1::PipelinedOp& op : ops) *request.add_ops() = op;
  request.set_sync(sync);
  return request;
}

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_SUBMIT_REQUESTS_H_
