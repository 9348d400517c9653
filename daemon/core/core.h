// Core: the daemon's one API, below gRPC. Services translate protobuf to these calls and
// back; nothing here knows protobuf or gRPC (Triton's "core" with thin frontends).
//
// It ties the layers together for each request: resolve the session (renewing its lease),
// resolve handles through it, admit memory, plan the op with the OpRegistry, run it on the
// session's stream, wait for completion and register the result with the session.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<Core> core,
//                           Core::Create(clock, std::move(devices), options));
//   GPUKIT_ASSIGN_OR_RETURN(SessionGrant s, core->OpenSession(params));
//   GPUKIT_ASSIGN_OR_RETURN(ArrayView a, core->CreateArray(s.session_id, {kFloat32, {4}}));
//
// Thread safety: every method is thread-safe; requests of one session may run concurrently
// (their device work is ordered on the session's stream).
#ifndef GPUKIT_DAEMON_CORE_CORE_H_
#define GPUKIT_DAEMON_CORE_CORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/session/session_manager.h"
#include "runtime/device.h"
#include "runtime/op_registry.h"

namespace gpukit {

struct CoreOptions {
  AdmissionLimits limits;
  SessionOptions sessions;
  // Streams per device that sessions are spread over (round robin). More streams let more
  // sessions' work run at once; on the CPU backend each is a worker thread.
  int streams_per_device = 4;
};

struct SessionGrant {
  std::string session_id;
  std::string partition;
  absl::Duration lease;
};

struct ArrayView {
  std::string handle;
  TensorDesc desc;
  int64_t bytes = 0;
  int device_index = 0;
};

// An operand of RunOp as the client named it.
struct OpInput {
  bool is_scalar = false;
  std::string handle;  // when !is_scalar
  ScalarValue scalar;  // when is_scalar
};

struct SessionSummary {
  std::string session_id;
  std::string tenant;
  std::string partition;
  ClientDescription client;
  int64_t arrays = 0;
  int64_t memory_bytes = 0;
  absl::Duration age;
  absl::Duration lease_remaining;
};

struct DeviceSummary {
  DeviceProperties properties;
  int64_t memory_used_bytes = 0;
};

class Core {
 public:
  // `devices` must not be empty. The clock must outlive the core.
  static absl::StatusOr<std::unique_ptr<Core>> Create(const Clock& clock,
                                                      std::vector<std::unique_ptr<Device>> devices,
                                                      const CoreOptions& options);
  ~Core();

  // Sessions.
  absl::StatusOr<SessionGrant> OpenSession(OpenSessionParams params);
  absl::StatusOr<absl::Duration> KeepAlive(absl::string_view session_id);
  absl::StatusOr<CloseStats> CloseSession(absl::string_view session_id);
  // Closes sessions whose lease lapsed; returns how many.
  int ExpireLeases();
  void CloseAllSessions();

  // Arrays. Every call renews the session's lease; foreign handles are NOT_FOUND.
  absl::StatusOr<ArrayView> CreateArray(absl::string_view session_id, const TensorDesc& desc);
  absl::StatusOr<ArrayView> DescribeArray(absl::string_view session_id, absl::string_view handle);
  // Returns the bytes freed.
  absl::StatusOr<int64_t> FreeArray(absl::string_view session_id, absl::string_view handle);
  // Copies `data` into the array at `offset` and waits for it. OUT_OF_RANGE past the end.
  absl::Status WriteArray(absl::string_view session_id, absl::string_view handle, int64_t offset,
                          absl::Span<const char> data);
  // Copies `out.size()` bytes from `offset` into `out` and waits for it.
  absl::Status ReadArray(absl::string_view session_id, absl::string_view handle, int64_t offset,
                         absl::Span<char> out);

  // Compute: runs a built-in op; the result is a new array of the session.
  absl::StatusOr<ArrayView> RunOp(absl::string_view session_id, absl::string_view op,
                                  absl::Span<const OpInput> inputs, const AttrMap& attrs);
  const OpRegistry& ops() const { return ops_; }

  // Admin.
  std::vector<SessionSummary> ListSessions() const;
  std::vector<DeviceSummary> ListDevices() const;
  int session_count() const { return sessions_.count(); }
  int64_t array_count() const;
  absl::string_view backend() const;
  const Device& device(int index) const { return *devices_[index].device; }
  int device_count() const { return static_cast<int>(devices_.size()); }

 private:
  struct DeviceSlot {
    std::unique_ptr<Device> device;
    std::unique_ptr<MemoryLedger> ledger;
    std::vector<StreamId> streams;
  };

  Core(const Clock& clock, const CoreOptions& options);
  // Admits and allocates an array on device 0 (partitions pick devices later).
  absl::StatusOr<std::shared_ptr<DeviceArray>> Allocate(const Session& session,
                                                        const TensorDesc& desc);
  static ArrayView View(const DeviceArray& array);

  const Clock& clock_;
  const CoreOptions options_;
  const OpRegistry& ops_;
  std::vector<DeviceSlot> devices_;
  SessionManager sessions_;
  std::atomic<uint64_t> next_stream_{0};
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_CORE_H_
