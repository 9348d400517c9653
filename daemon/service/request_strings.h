// The one rule for the strings a client sends: every string field of every gpukit.v1 request
// (names, ids, handles, op and attribute names, client facts, partition names, ...) holds at
// most kMaxRequestStringBytes bytes of printable UTF-8. Checked at the service edge, before a
// handler reads anything else, so that no later layer stores, logs or echoes a string that
// could rewrite an operator's terminal or a log line, or that costs memory out of proportion.
// Fields with their own stricter rules (tenant and partition names: [A-Za-z0-9._-], at most 63)
// keep them; this is the floor under all of them.
//
//   grpc::Status MyService::Call(grpc::ServerContext* context, const v1::CallRequest* request,
//                                v1::CallResponse* response) {
//     if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
//     // (ValidateStrings, in convert.h, is this check as a grpc::Status)
//     ...
//
// Printable means no code point of C0 (U+0000-U+001F), DEL (U+007F) or C1 (U+0080-U+009F),
// no bidirectional override or isolate (U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and no
// line or paragraph separator (U+2028, U+2029); anything else in valid UTF-8 is allowed.
// protobuf's own parser already refuses a proto3 string that is not UTF-8 (before any
// handler runs); the check repeats it for completeness.
//
// Exempt: CompileKernelRequest.source (program text, with newlines; the kernel compiler has
// its own bounds). Bytes fields (array data) are not strings and are not looked at.
//
// Cost: one walk of the message's set fields that may hold a string, through protobuf
// reflection, over a list of those fields made once per message type (a lock taken once per
// call finds it); one pass over each string's bytes, which decodes UTF-8 only where a byte is
// not printable ASCII; a field's path is spelled out only for an error. 1.0-1.6 us for a
// RunOp `add` request, 1.6-2.2 us with two attributes (reflection copies a map into entries),
// on the loaded 2-core build machine before the per-type lists; nothing per upload chunk (only
// the Upload header is checked).
//
// Thread safety: safe from any thread (the per-type lists are built under a lock).
#ifndef GPUKIT_DAEMON_SERVICE_REQUEST_STRINGS_H_
#define GPUKIT_DAEMON_SERVICE_REQUEST_STRINGS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "gpukit/v1/compute.pb.h"

namespace gpukit::service {

// Longest string a request field may hold, in bytes.
inline constexpr size_t kMaxRequestStringBytes = 256;

// OK, or INVALID_ARGUMENT naming the field by its path in the request and what is wrong,
// without echoing the value: "client.name holds control character U+001B at byte 4; strings
// in requests must be printable UTF-8", "attrs[\"axis\"].string_value is 1048576 bytes long;
// at most 256 are allowed".
absl::Status ValidateRequestStrings(const google::protobuf::Message& request);

// ValidateRequestStrings for a SubmitRequest, the request of the pipelined ops' hot path: the
// same check, the same errors, through the generated accessors instead of reflection (a run
// op with attributes still goes through reflection). About 4,500 instructions per op of a
// chain of adds (an add and a free) less than the walk. request_strings_test fails when a
// string field appears under SubmitRequest that this does not read.
absl::Status ValidateSubmitRequestStrings(const v1::SubmitRequest& request);

// The check of one value, for callers outside a request (`field` names it in the error).
absl::Status ValidateRequestString(absl::string_view field, absl::string_view value);

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_REQUEST_STRINGS_H_
