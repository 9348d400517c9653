// Sessions: who owns what, and for how long.
//
// A Session is one client's identity (tenant, partition, client facts) and the owner of
// every array and compiled kernel it creates. A session lives while its lease is renewed:
// every request through the session and every KeepAlive pushes the deadline out by the
// lease; when the client closes it or the deadline passes (the client died), SessionManager
// removes it and drops its arrays and kernels, whose destructors free device memory, return
// reservations and unload device modules. Those still used by work in flight are freed
// when that work lets go of them.
//
// Admission is the scheduler's: the caller admits the session there first and hands the
// admission to Open; closing a session ends it in the scheduler, which cancels its waiting
// tasks.
//
//   SessionManager sessions(clock, options, scheduler);
//   GPUKIT_RETURN_IF_ERROR(ValidateOpenSessionParams(params));
//   GPUKIT_ASSIGN_OR_RETURN(SessionAdmission admission,
//                           scheduler.AdmitSession(id, params.partition, params.resources,
//                                                  params.tenant));
//   GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, sessions.Open(id, params, admission));
//   GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> again, sessions.Touch(s->id()));
//   sessions.ExpireLeases();  // called periodically by the daemon, directly by tests
//
// Thread safety: SessionManager and Session are thread-safe.
#ifndef GPUKIT_DAEMON_SESSION_SESSION_MANAGER_H_
#define GPUKIT_DAEMON_SESSION_SESSION_MANAGER_H_

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/session/device_array.h"
#include "daemon/session/host_region.h"
#include "daemon/session/principal.h"
#include "runtime/device.h"
#include "runtime/jit/kernel_cache.h"

namespace gpukit {

struct ClientDescription {
  std::string name;
  std::string library_version;
  std::string hostname;
  int64_t pid = 0;
};

struct SessionOptions {
  absl::Duration default_lease = absl::Seconds(30);
  // Requested leases are clamped into [min_lease, max_lease].
  absl::Duration min_lease = absl::Seconds(1);
  absl::Duration max_lease = absl::Minutes(10);
};

struct OpenSessionParams {
  std::string tenant;
  std::string partition;  // empty: "default"
  ClientDescription client;
  // Who opened it, as the transport identified them (the service layer fills it in): every
  // later request naming the session is checked against it (AccessPolicy).
  Principal owner;
  absl::Duration lease = absl::ZeroDuration();  // zero: the default
  ResourceSpec resources;                       // empty: the partition's defaults
  StreamId stream;                              // where the session's work runs
  // Keeps `stream` alive while the session does; the session holds it until it is
  // destroyed (not merely closed: work in flight may still run on the stream). Dropping the
  // last reference may wait for the device, so SessionManager never drops a session while
  // it holds its lock.
  std::shared_ptr<const void> stream_owner;
};

// Checks the tenant name (1-63 of [A-Za-z0-9._-]), client fields and lease. INVALID_ARGUMENT.
absl::Status ValidateOpenSessionParams(const OpenSessionParams& params);

// A kernel a session compiled (CompileKernel): the compiled module, shared with the JIT's
// cache, and, once it has been launched, that module loaded on the session's device with
// the functions looked up so far. Loading waits for the first launch, so compiling uses no
// device and a kernel never launched costs the device nothing.
//
// Whoever drops the last reference (the session, when the kernel is freed or the session
// ends, or a launch in flight) unloads the module. A launch holds its reference until its
// work has completed, so a module is never unloaded under a running kernel.
//
//   auto kernel = std::make_shared<SessionKernel>(NewOpaqueId("k-"), device, compiled.kernel,
//                                                 "sm_90");
//   GPUKIT_ASSIGN_OR_RETURN(size_t entry, kernel->FindEntry("scale<float>"));
//   GPUKIT_ASSIGN_OR_RETURN(FunctionId function, kernel->Function(entry));  // loads once
//
// Thread safety: thread-safe. Function holds the kernel's lock while it loads the module, so
// concurrent first launches load it once.
class SessionKernel {
 public:
  // `compiled` was compiled for `arch`; `device` must outlive the kernel.
  SessionKernel(std::string handle, Device& device, std::shared_ptr<const CompiledKernel> compiled,
                std::string arch);
  SessionKernel(const SessionKernel&) = delete;
  SessionKernel& operator=(const SessionKernel&) = delete;
  // Unloads the module if it was loaded; an error (a faulted device) is logged.
  ~SessionKernel();

  const std::string& handle() const { return handle_; }
  Device& device() const { return device_; }
  const std::string& arch() const { return arch_; }
  // Entries as the client named them, and their symbols in the module, index for index.
  const std::vector<std::string>& entries() const { return compiled_->entries; }
  const std::vector<std::string>& lowered_names() const { return compiled_->lowered_names; }

  // The index of `entry` in entries(); "" names the only entry of a one-entry kernel.
  // NOT_FOUND for a name the kernel does not have, INVALID_ARGUMENT for "" when it has
  // several.
  absl::StatusOr<size_t> FindEntry(absl::string_view entry) const;
  // The device function of entries()[index], loading the module on first use and looking
  // each function up once. Errors: the device's (FAILED_PRECONDITION on a backend without
  // device code, INVALID_ARGUMENT for an image the driver refuses); a failed load is tried
  // again by the next call.
  absl::StatusOr<FunctionId> Function(size_t index);

 private:
  const std::string handle_;
  Device& device_;
  const std::shared_ptr<const CompiledKernel> compiled_;
  const std::string arch_;

  mutable absl::Mutex mu_;
  std::optional<ModuleId> module_ ABSL_GUARDED_BY(mu_);
  std::vector<std::optional<FunctionId>> functions_ ABSL_GUARDED_BY(mu_);  // by entry
};

// NVRTC's log of a compile, and whether the compile failed.
struct CompileLog {
  std::string text;
  bool failed = false;
};

class Session {
 public:
  Session(std::string id, const OpenSessionParams& params, SessionAdmission admission,
          absl::Time now, absl::Duration lease);

  const std::string& id() const { return id_; }
  const std::string& tenant() const { return tenant_; }
  const std::string& partition() const { return partition_; }
  const ClientDescription& client() const { return client_; }
  const Principal& owner() const { return owner_; }
  absl::Time opened_at() const { return opened_at_; }
  absl::Duration lease() const { return lease_; }
  StreamId stream() const { return stream_; }
  // The scheduler's view: its ticket, QoS class, resources and device.
  const SessionAdmission& admission() const { return admission_; }
  const SessionTicket& ticket() const { return admission_.ticket; }

  // NOT_FOUND `array handle "h" not found in this session` for unknown, freed and
  // foreign handles alike (a session must not learn about another session's handles).
  absl::StatusOr<std::shared_ptr<DeviceArray>> FindArray(absl::string_view handle) const;
  // Adds an array; NOT_FOUND if the session has closed meanwhile, RESOURCE_EXHAUSTED
  // (reason kTooManyArrays) if it already holds `max_arrays`. On error the array is dropped,
  // which frees it. The check is here, under the session's lock, so that concurrent
  // requests cannot together exceed the limit.
  absl::Status AddArray(std::shared_ptr<DeviceArray> array,
                        int max_arrays = std::numeric_limits<int>::max());
  // The same check ahead of time, so a request is refused before it allocates or runs
  // anything (AddArray still decides).
  absl::Status CheckArrayRoom(int max_arrays) const;
  absl::StatusOr<std::shared_ptr<DeviceArray>> RemoveArray(absl::string_view handle);

  // Kernels, with the same rules as arrays: NOT_FOUND `kernel handle "h" not found in this
  // session` for unknown, freed and foreign handles alike; AddKernel refuses (and drops the
  // kernel) with NOT_FOUND once the session has closed and RESOURCE_EXHAUSTED "session holds
  // N kernels, its limit" when it already holds `max_kernels`.
  absl::StatusOr<std::shared_ptr<SessionKernel>> FindKernel(absl::string_view handle) const;
  absl::Status AddKernel(std::shared_ptr<SessionKernel> kernel,
                         int max_kernels = std::numeric_limits<int>::max());
  absl::Status CheckKernelRoom(int max_kernels) const;
  absl::StatusOr<std::shared_ptr<SessionKernel>> RemoveKernel(absl::string_view handle);
  int kernel_count() const;
  // The log of the session's last compile (CompileKernel), kept for GetCompileLog: a failed
  // compile's message may be cut to fit a gRPC status, the log here is whole (as bounded by
  // the compiler).
  void SetCompileLog(CompileLog log);
  CompileLog compile_log() const;

  // Host memory regions (RegisterHostMemory), with the same rules: NOT_FOUND `host memory
  // region "h" not found in this session`; AddRegion refuses with NOT_FOUND once the session
  // has closed and RESOURCE_EXHAUSTED at `max_regions`.
  absl::StatusOr<std::shared_ptr<HostRegion>> FindRegion(absl::string_view handle) const;
  absl::Status AddRegion(std::shared_ptr<HostRegion> region, int max_regions);
  absl::StatusOr<std::shared_ptr<HostRegion>> RemoveRegion(absl::string_view handle);

  // Every array the session holds (a snapshot).
  std::vector<std::shared_ptr<DeviceArray>> Arrays() const;
  int array_count() const;
  // Bytes of all its arrays, resident or spilled.
  int64_t memory_bytes() const;
  absl::Time lease_deadline() const;

 private:
  friend class SessionManager;
  // What a closed session held, for its closer to drop.
  struct Holdings {
    std::vector<std::shared_ptr<DeviceArray>> arrays;
    std::vector<std::shared_ptr<SessionKernel>> kernels;
    std::vector<std::shared_ptr<HostRegion>> regions;
  };

  void Renew(absl::Time now);
  // Marks the session closed and hands over its arrays and kernels.
  Holdings CloseAndTake();
  absl::Status CheckArrayRoomLocked(int max_arrays) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckKernelRoomLocked(int max_kernels) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string id_;
  const std::string tenant_;
  const std::string partition_;
  const ClientDescription client_;
  const Principal owner_;
  const absl::Time opened_at_;
  const absl::Duration lease_;
  const StreamId stream_;
  const std::shared_ptr<const void> stream_owner_;  // keeps stream_ alive
  const SessionAdmission admission_;

  mutable absl::Mutex mu_;
  absl::Time lease_deadline_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::shared_ptr<DeviceArray>> arrays_ ABSL_GUARDED_BY(mu_);
  // Arrays removed whose memory must live until the session ends (legacy IPC exports: see
  // DeviceArray::MarkShared); still charged to the session.
  std::vector<std::shared_ptr<DeviceArray>> retired_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<SessionKernel>> kernels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<HostRegion>> regions_ ABSL_GUARDED_BY(mu_);
  CompileLog compile_log_ ABSL_GUARDED_BY(mu_);
};

struct CloseStats {
  std::string session_id;
  std::string tenant;
  int64_t arrays_freed = 0;
  int64_t bytes_freed = 0;
  int64_t kernels_freed = 0;
};

class SessionManager {
 public:
  // `scheduler` must outlive the manager.
  SessionManager(const Clock& clock, const SessionOptions& options, Scheduler& scheduler);

  // Registers a session the scheduler admitted as `id`. Validates `params` first (and ends
  // the admission if they are bad).
  absl::StatusOr<std::shared_ptr<Session>> Open(const std::string& id,
                                                const OpenSessionParams& params,
                                                SessionAdmission admission);
  // Finds a live session and renews its lease. NOT_FOUND for unknown, closed or expired
  // (deadline passed, even if the reaper has not run yet) sessions.
  absl::StatusOr<std::shared_ptr<Session>> Touch(absl::string_view session_id);
  // A session that is still registered, without renewing its lease: live, or lapsed and
  // not yet reaped (Close still closes those). For checking who may use a session before the
  // request touches it. NOT_FOUND (SessionNotFoundError) for unknown and closed sessions.
  absl::StatusOr<std::shared_ptr<const Session>> Find(absl::string_view session_id) const;
  absl::StatusOr<CloseStats> Close(absl::string_view session_id);
  // Closes every session whose lease deadline has passed.
  std::vector<CloseStats> ExpireLeases();
  std::vector<CloseStats> CloseAll();

  std::vector<std::shared_ptr<Session>> List() const;
  int count() const;
  const Clock& clock() const { return clock_; }

 private:
  // Ends the session and moves what it held into `doomed`, which the caller declares before
  // taking mu_ so that it is destroyed after mu_ is released: destroying arrays, kernels and
  // host regions frees device memory and may wait for the device, and no other session's
  // lookup may wait behind that. The caller likewise drops its last reference to the session
  // after releasing mu_.
  CloseStats CloseLocked(const std::shared_ptr<Session>& session,
                         std::vector<Session::Holdings>& doomed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  const SessionOptions options_;
  Scheduler& scheduler_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

// NOT_FOUND `session "<id>" not found (closed, expired or never opened)`: what every
// request naming a session that is not there gets, and, word for word, what a caller gets for
// a session it may not use (so the answer tells nothing about other callers' sessions).
absl::Status SessionNotFoundError(absl::string_view session_id);

// A random, unguessable id: `prefix` followed by 32 hex digits (128 bits from getrandom,
// fetched in batches). Thread-safe.
std::string NewOpaqueId(absl::string_view prefix);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_SESSION_MANAGER_H_
