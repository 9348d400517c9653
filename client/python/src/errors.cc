#include "client/python/src/errors.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpukit/client.h"  // gpukit::RejectReason

namespace gpukit::python {
namespace py = pybind11;
namespace {

struct ErrorClass {
  absl::StatusCode code;
  const char* name;
  const char* doc;
};

// The codes a gpukit call can end with (docs/api.md, Errors), each with its class. Codes not
// listed (UNKNOWN, ABORTED, UNAUTHENTICATED, ...) raise the base class.
constexpr ErrorClass kErrorClasses[] = {
    {absl::StatusCode::kInvalidArgument, "InvalidArgument",
     "The request breaks a rule: a shape, dtype, attribute, broadcasting, or a kernel that "
     "does not compile (the message holds NVRTC's log)."},
    {absl::StatusCode::kNotFound, "NotFound",
     "An unknown, closed or expired session (also one that ended while the request ran: its "
     "work is lost), or an array or kernel handle the session does not have (freed, or "
     "another session's)."},
    {absl::StatusCode::kAlreadyExists, "AlreadyExists", "The thing to create exists already."},
    {absl::StatusCode::kResourceExhausted, "ResourceExhausted",
     "Admission refused the request; ``reason`` names why "
     "(\"REASON_SESSION_LIMIT_EXCEEDED\", \"REASON_DEVICE_MEMORY_EXHAUSTED\", ...). "
     "Without a reason, a gRPC limit: a message too large, or no server thread free for the "
     "request (\"Server Threadpool Exhausted\": try again later)."},
    {absl::StatusCode::kFailedPrecondition, "FailedPrecondition",
     "The daemon cannot do this in its present state, e.g. a kernel launch on the CPU "
     "backend, or compiling without NVRTC."},
    {absl::StatusCode::kPermissionDenied, "PermissionDenied",
     "The caller may not do this: another tenant than its own, a partition its tenant may "
     "not use, or an admin's call."},
    {absl::StatusCode::kUnauthenticated, "Unauthenticated",
     "Over TCP, the call carried no valid bearer token (``token=`` or ``$GPUKIT_TOKEN``)."},
    {absl::StatusCode::kDeadlineExceeded, "DeadlineExceeded",
     "The call's deadline, or its task's queue timeout, passed."},
    {absl::StatusCode::kUnavailable, "Unavailable",
     "No daemon answers at the address, or it is shutting down."},
    {absl::StatusCode::kInternal, "Internal", "The daemon or the client failed internally."},
    {absl::StatusCode::kCancelled, "Cancelled",
     "The request's task was cancelled (by an operator, or by the client going away)."},
    {absl::StatusCode::kUnimplemented, "Unimplemented",
     "The daemon does not implement this call or op."},
    {absl::StatusCode::kDataLoss, "DataLoss", "Device data was lost (planned)."},
    {absl::StatusCode::kAborted, "Aborted",
     "An op of a pipelined session that was not run: an earlier op failed since the last "
     "sync point (the message names it)."},
};

// The classes live as long as the process: the module holds them too, and a translator may
// run until the interpreter ends. Plain PyObject pointers, so nothing is released after
// Python has finalised.
PyObject* g_base_error = nullptr;
std::vector<std::pair<absl::StatusCode, PyObject*>>* g_error_classes = nullptr;

PyObject* ClassFor(absl::StatusCode code) {
  for (const auto& [class_code, type] : *g_error_classes) {
    if (class_code == code) return type;
  }
  return g_base_error;
}

void SetPythonError(const absl::Status& status) {
  PyObject* type = ClassFor(status.code());
  const std::string reason = RejectReason(status);
  const std::string message(status.message());
  const std::string text =
      reason.empty() ? message : absl::StrCat(message, " (reason ", reason, ")");
  py::object error = py::reinterpret_borrow<py::object>(type)(text);
  error.attr("code") = py::str(absl::StatusCodeToString(status.code()));
  error.attr("message") = py::str(message);
  error.attr("reason") = reason.empty() ? py::object(py::none()) : py::object(py::str(reason));
  PyErr_SetObject(type, error.ptr());
}

PyObject* NewErrorClass(py::module_& module, const char* name, PyObject* base, const char* doc,
                        absl::string_view code) {
  const std::string qualified =
      absl::StrCat(module.attr("__name__").cast<std::string>(), ".", name);
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (type == nullptr) throw py::error_already_set();
  py::handle handle(type);
  handle.attr("code") = py::str(std::string(code));
  handle.attr("reason") = py::none();
  handle.attr("message") = py::str("");
  module.add_object(name, py::reinterpret_borrow<py::object>(handle));
  return type;  // the new reference is kept for the process's life
}

}  // namespace

void RegisterErrors(py::module_& module) {
  g_base_error = NewErrorClass(
      module, "Error", PyExc_Exception,
      "Base class of every error a gpukit call raises.\n\n"
      "Attributes\n----------\n"
      "code : str\n    The gRPC status code's name, e.g. \"NOT_FOUND\".\n"
      "message : str\n    The daemon's (or the client's) message.\n"
      "reason : str or None\n    The admission reason (the daemon's \"gpukit-reason\" "
      "trailer), e.g. \"REASON_SESSION_LIMIT_EXCEEDED\"; None when the call carries none.\n",
      "UNKNOWN");
  g_error_classes = new std::vector<std::pair<absl::StatusCode, PyObject*>>();
  for (const ErrorClass& error_class : kErrorClasses) {
    g_error_classes->emplace_back(
        error_class.code, NewErrorClass(module, error_class.name, g_base_error, error_class.doc,
                                        absl::StatusCodeToString(error_class.code)));
  }
  py::register_exception_translator([](std::exception_ptr exception) {
    try {
      if (exception) std::rethrow_exception(exception);
    } catch (const StatusError& error) {
      SetPythonError(error.status());
    }
  });
}

}  // namespace gpukit::python
