// DType between its API form (gpukit.v1.DType) and the C++ one (gpukit::DType), shared by
// the daemon's services and the clients so the mapping exists once.
#ifndef GPUKIT_PROTO_DTYPE_CONVERT_H_
#define GPUKIT_PROTO_DTYPE_CONVERT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpukit/v1/common.pb.h"
#include "runtime/base/dtype.h"

namespace gpukit {

// INVALID_ARGUMENT naming `field` for DTYPE_UNSPECIFIED and unknown numbers:
// "dtype = 42 is not a known dtype".
absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field);
v1::DType DTypeToProto(DType dtype);

}  // namespace gpukit

#endif  // GPUKIT_PROTO_DTYPE_CONVERT_H_
