// Status propagation helpers for absl::Status / absl::StatusOr.
//
// Debian's abseil (20220623) predates absl's own status macros, so gpukit defines the two
// it needs once, here. Usage:
//
//   absl::StatusOr<Shape> Infer(...) {
//     GPUKIT_RETURN_IF_ERROR(ValidateShape(shape, "shape"));
//     GPUKIT_ASSIGN_OR_RETURN(int64_t n, ElementCount(shape));
//     ...
//   }
#ifndef GPUKIT_RUNTIME_BASE_STATUS_MACROS_H_
#define GPUKIT_RUNTIME_BASE_STATUS_MACROS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define GPUKIT_STATUS_CONCAT_INNER_(a, b) a##b
#define GPUKIT_STATUS_CONCAT_(a, b) GPUKIT_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if not OK.
#define GPUKIT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status gpukit_status_ = (expr);          \
    if (!gpukit_status_.ok()) return gpukit_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise moves the
// value into `lhs`, which may be a declaration (`auto x`) or an existing variable.
#define GPUKIT_ASSIGN_OR_RETURN(lhs, rexpr) \
  GPUKIT_ASSIGN_OR_RETURN_IMPL_(GPUKIT_STATUS_CONCAT_(gpukit_statusor_, __LINE__), lhs, rexpr)

#define GPUKIT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

namespace gpukit {

// `status` with `prefix` before its message ("inputs[1]: ..."), keeping its code and its
// payloads (the admission reason travels as one). OK stays OK.
inline absl::Status PrefixStatus(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  absl::Status prefixed(status.code(), absl::StrCat(prefix, status.message()));
  status.ForEachPayload([&](absl::string_view type_url, const absl::Cord& payload) {
    prefixed.SetPayload(type_url, payload);
  });
  return prefixed;
}

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_STATUS_MACROS_H_
