#include "daemon/session/session_manager.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/session/access_policy.h"
#include "runtime/base/names.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"
#include <sys/random.h>

namespace gpukit {
namespace {

constexpr size_t kMaxNameLength = 253;  // client names, host names

absl::Status RegionNotFound(absl::string_view handle) {
  return absl::NotFoundError(absl::StrCat("host memory region \"",
                                          absl::CHexEscape(handle.substr(0, 80)),
                                          "\" not found in this session"));
}

}  // namespace

absl::Status ValidateOpenSessionParams(const OpenSessionParams& params) {
  if (params.tenant.empty()) {
    return absl::InvalidArgumentError("tenant is empty; name the tenant the session acts for");
  }
  if (params.tenant.size() > kMaxTenantLength) {
    return absl::InvalidArgumentError(absl::StrCat("tenant is ", params.tenant.size(),
                                                   " characters long; at most ", kMaxTenantLength,
                                                   " are allowed"));
  }
  if (!std::all_of(params.tenant.begin(), params.tenant.end(), IsNameChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant \"", absl::CHexEscape(params.tenant),
                     "\" may contain only letters, digits, '.', '_' and '-'"));
  }
  for (const auto& [field, value] :
       {std::pair<absl::string_view, const std::string&>{"client.name", params.client.name},
        {"client.library_version", params.client.library_version},
        {"client.hostname", params.client.hostname}}) {
    if (value.size() > kMaxNameLength) {
      return absl::InvalidArgumentError(absl::StrCat(field, " is ", value.size(),
                                                     " characters long; at most ", kMaxNameLength,
                                                     " are allowed"));
    }
  }
  if (params.lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_ms = ", absl::ToInt64Milliseconds(params.lease), " must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status SessionNotFoundError(absl::string_view session_id) {
  return absl::NotFoundError(absl::StrCat("session \"", absl::CHexEscape(session_id.substr(0, 80)),
                                          "\" not found (closed, expired or never opened)"));
}

std::string NewOpaqueId(absl::string_view prefix) {
  // Random bytes come from getrandom in batches of 32 ids per thread: a system call per id
  // (0.4-0.5 us on the build machine, against 0.05 us per id in batches) was part of every
  // RunOp, which names its output array with an id. The bytes are the kernel's CSPRNG
  // output either way; gpukitd never forks, so no two processes share a batch.
  constexpr size_t kIdBytes = 16;
  struct RandomBatch {
    unsigned char bytes[32 * kIdBytes];
    size_t used = sizeof(bytes);
  };
  thread_local RandomBatch batch;
  if (batch.used == sizeof(batch.bytes)) {
    size_t filled = 0;
    while (filled < sizeof(batch.bytes)) {
      ssize_t n = getrandom(batch.bytes + filled, sizeof(batch.bytes) - filled, 0);
      if (n > 0) filled += static_cast<size_t>(n);
    }
    batch.used = 0;
  }
  unsigned char* bytes = batch.bytes + batch.used;
  batch.used += kIdBytes;
  constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix.size() + 2 * kIdBytes, '\0');
  std::memcpy(id.data(), prefix.data(), prefix.size());
  char* out = id.data() + prefix.size();
  for (size_t i = 0; i < kIdBytes; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  std::memset(bytes, 0, kIdBytes);  // a used id's bytes do not linger
  return id;
}

SessionKernel::SessionKernel(std::string handle, Device& device,
                             std::shared_ptr<const CompiledKernel> compiled, std::string arch)
    : handle_(std::move(handle)),
      device_(device),
      compiled_(std::move(compiled)),
      arch_(std::move(arch)),
      functions_(compiled_->entries.size()) {}

SessionKernel::~SessionKernel() {
  absl::MutexLock lock(&mu_);
  if (!module_) return;
  if (absl::Status unloaded = device_.UnloadModule(*module_); !unloaded.ok()) {
    spdlog::error("unloading the module of kernel {}: {}", handle_,
                  std::string(unloaded.message()));
  }
}

absl::StatusOr<size_t> SessionKernel::FindEntry(absl::string_view entry) const {
  const std::vector<std::string>& names = entries();
  if (entry.empty()) {
    if (names.size() == 1) return 0;
    return absl::InvalidArgumentError(absl::StrCat("entry is empty, but kernel ", handle_, " has ",
                                                   names.size(),
                                                   " entries: ", absl::StrJoin(names, ", ")));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == entry) return i;
  }
  return absl::NotFoundError(absl::StrCat("kernel ", handle_, " has no entry \"",
                                          absl::CHexEscape(entry.substr(0, 200)),
                                          "\"; its entries: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<FunctionId> SessionKernel::Function(size_t index) {
  if (index >= entries().size() || index >= lowered_names().size()) {
    return absl::OutOfRangeError(absl::StrCat("entry index ", index, " of kernel ", handle_,
                                              " with ", entries().size(), " entries"));
  }
  absl::MutexLock lock(&mu_);
  if (functions_[index]) return *functions_[index];
  if (!module_) {
    GPUKIT_ASSIGN_OR_RETURN(module_, device_.LoadModule(compiled_->cubin));
  }
  GPUKIT_ASSIGN_OR_RETURN(functions_[index],
                          device_.GetFunction(*module_, compiled_->lowered_names[index]));
  return *functions_[index];
}

Session::Session(std::string id, const OpenSessionParams& params, SessionAdmission admission,
                 absl::Time now, absl::Duration lease)
    : id_(std::move(id)),
      tenant_(params.tenant),
      partition_(admission.partition),
      client_(params.client),
      owner_(params.owner),
      opened_at_(now),
      lease_(lease),
      stream_(params.stream),
      stream_owner_(params.stream_owner),
      admission_(std::move(admission)),
      lease_deadline_(now + lease) {}

absl::StatusOr<std::shared_ptr<DeviceArray>> Session::FindArray(absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = arrays_.find(handle);
  if (it == arrays_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "array handle \"", absl::CHexEscape(handle.substr(0, 80)), "\" not found in this session"));
  }
  return it->second;
}

absl::Status Session::CheckArrayRoom(int max_arrays) const {
  absl::MutexLock lock(&mu_);
  return CheckArrayRoomLocked(max_arrays);
}

absl::Status Session::CheckArrayRoomLocked(int max_arrays) const {
  if (closed_) return absl::NotFoundError(absl::StrCat("session ", id_, " was closed"));
  // Retired arrays hold memory like live ones, so they count too.
  if (static_cast<int64_t>(arrays_.size() + retired_.size()) >= max_arrays) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            "session holds ", arrays_.size() + retired_.size(), " arrays (", retired_.size(),
            " of them freed but kept for a CUDA IPC handle until the session ends), its "
            "max_arrays_per_session")),
        RejectReason::kTooManyArrays);
  }
  return absl::OkStatus();
}

absl::Status Session::AddArray(std::shared_ptr<DeviceArray> array, int max_arrays) {
  absl::MutexLock lock(&mu_);
  GPUKIT_RETURN_IF_ERROR(CheckArrayRoomLocked(max_arrays));
  memory_bytes_ += array->bytes();
  arrays_.emplace(array->handle(), std::move(array));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DeviceArray>> Session::RemoveArray(absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = arrays_.find(handle);
  if (it == arrays_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "array handle \"", absl::CHexEscape(handle.substr(0, 80)), "\" not found in this session"));
  }
  std::shared_ptr<DeviceArray> array = std::move(it->second);
  arrays_.erase(it);
  memory_bytes_ -= array->bytes();
  if (array->kept_until_session_end()) retired_.push_back(array);
  return array;
}

absl::StatusOr<std::shared_ptr<SessionKernel>> Session::FindKernel(absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = kernels_.find(handle);
  if (it == kernels_.end()) {
    return absl::NotFoundError(absl::StrCat("kernel handle \"",
                                            absl::CHexEscape(handle.substr(0, 80)),
                                            "\" not found in this session"));
  }
  return it->second;
}

absl::Status Session::CheckKernelRoom(int max_kernels) const {
  absl::MutexLock lock(&mu_);
  return CheckKernelRoomLocked(max_kernels);
}

absl::Status Session::CheckKernelRoomLocked(int max_kernels) const {
  if (closed_) return absl::NotFoundError(absl::StrCat("session ", id_, " was closed"));
  if (static_cast<int64_t>(kernels_.size()) >= max_kernels) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session holds ", kernels_.size(), " kernels, its limit; free one first"));
  }
  return absl::OkStatus();
}

absl::Status Session::AddKernel(std::shared_ptr<SessionKernel> kernel, int max_kernels) {
  absl::MutexLock lock(&mu_);
  GPUKIT_RETURN_IF_ERROR(CheckKernelRoomLocked(max_kernels));
  kernels_.emplace(kernel->handle(), std::move(kernel));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SessionKernel>> Session::RemoveKernel(absl::string_view handle) {
  std::shared_ptr<SessionKernel> kernel;
  {
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(handle);
    if (it == kernels_.end()) {
      return absl::NotFoundError(absl::StrCat("kernel handle \"",
                                              absl::CHexEscape(handle.substr(0, 80)),
                                              "\" not found in this session"));
    }
    kernel = std::move(it->second);
    kernels_.erase(it);
  }
  return kernel;
}

int Session::kernel_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(kernels_.size());
}

void Session::SetCompileLog(CompileLog log) {
  absl::MutexLock lock(&mu_);
  compile_log_ = std::move(log);
}

CompileLog Session::compile_log() const {
  absl::MutexLock lock(&mu_);
  return compile_log_;
}

absl::StatusOr<std::shared_ptr<HostRegion>> Session::FindRegion(absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(handle);
  if (it == regions_.end()) return RegionNotFound(handle);
  return it->second;
}

absl::Status Session::AddRegion(std::shared_ptr<HostRegion> region, int max_regions) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::NotFoundError(absl::StrCat("session ", id_, " was closed"));
  if (static_cast<int64_t>(regions_.size()) >= max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session holds ", regions_.size(), " host memory regions, its limit; unregister one"));
  }
  regions_.emplace(region->handle(), std::move(region));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostRegion>> Session::RemoveRegion(absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(handle);
  if (it == regions_.end()) return RegionNotFound(handle);
  std::shared_ptr<HostRegion> region = std::move(it->second);
  regions_.erase(it);
  return region;
}

std::vector<std::shared_ptr<DeviceArray>> Session::Arrays() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<DeviceArray>> arrays;
  arrays.reserve(arrays_.size());
  for (const auto& [handle, array] : arrays_) arrays.push_back(array);
  return arrays;
}

int Session::array_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(arrays_.size());
}

int64_t Session::memory_bytes() const {
  absl::MutexLock lock(&mu_);
  return memory_bytes_;
}

absl::Time Session::lease_deadline() const {
  absl::MutexLock lock(&mu_);
  return lease_deadline_;
}

void Session::Renew(absl::Time now) {
  absl::MutexLock lock(&mu_);
  lease_deadline_ = std::max(lease_deadline_, now + lease_);
}

Session::Holdings Session::CloseAndTake() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  Holdings holdings;
  holdings.arrays.reserve(arrays_.size());
  for (auto& [handle, array] : arrays_) holdings.arrays.push_back(std::move(array));
  arrays_.clear();
  for (std::shared_ptr<DeviceArray>& array : retired_) holdings.arrays.push_back(std::move(array));
  retired_.clear();
  memory_bytes_ = 0;
  for (auto& [handle, region] : regions_) holdings.regions.push_back(std::move(region));
  regions_.clear();
  holdings.kernels.reserve(kernels_.size());
  for (auto& [handle, kernel] : kernels_) holdings.kernels.push_back(std::move(kernel));
  kernels_.clear();
  return holdings;
}

SessionManager::SessionManager(const Clock& clock, const SessionOptions& options,
                               Scheduler& scheduler)
    : clock_(clock), options_(options), scheduler_(scheduler) {}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Open(const std::string& id,
                                                              const OpenSessionParams& params,
                                                              SessionAdmission admission) {
  if (absl::Status status = ValidateOpenSessionParams(params); !status.ok()) {
    scheduler_.EndSession(admission.ticket);
    return status;
  }
  const absl::Duration lease =
      params.lease == absl::ZeroDuration()
          ? options_.default_lease
          : std::clamp(params.lease, options_.min_lease, options_.max_lease);
  absl::MutexLock lock(&mu_);
  auto session = std::make_shared<Session>(id, params, std::move(admission), clock_.Now(), lease);
  sessions_.emplace(session->id(), session);
  spdlog::info(
      "session opened: session={} tenant={} partition={} qos={} client={} pid={} lease_ms={} "
      "owner=\"{}\"",
      session->id(), session->tenant(), session->partition(),
      std::string(QosName(session->admission().qos)), params.client.name, params.client.pid,
      absl::ToInt64Milliseconds(lease), params.owner.Describe());
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Touch(absl::string_view session_id) {
  const absl::Time now = clock_.Now();
  // Shared: the map is only read (every op of every session comes here; the lease renews
  // under the session's own lock), and a close, which takes mu_ exclusively, still orders
  // with it.
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || it->second->lease_deadline() < now) {
    return SessionNotFoundError(session_id);
  }
  it->second->Renew(now);
  return it->second;
}

absl::StatusOr<std::shared_ptr<const Session>> SessionManager::Find(
    absl::string_view session_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return SessionNotFoundError(session_id);
  return std::shared_ptr<const Session>(it->second);
}

CloseStats SessionManager::CloseLocked(const std::shared_ptr<Session>& session,
                                       std::vector<Session::Holdings>& doomed) {
  sessions_.erase(session->id());
  scheduler_.EndSession(session->ticket());
  Session::Holdings holdings = session->CloseAndTake();
  CloseStats stats;
  stats.session_id = session->id();
  stats.tenant = session->tenant();
  stats.arrays_freed = static_cast<int64_t>(holdings.arrays.size());
  for (const auto& array : holdings.arrays) stats.bytes_freed += array->bytes();
  stats.kernels_freed = static_cast<int64_t>(holdings.kernels.size());
  // Not dropped here: freeing buffers, unloading modules and unregistering host memory may
  // wait for the device, and every other session's lookup waits for mu_.
  doomed.push_back(std::move(holdings));
  return stats;
}

absl::StatusOr<CloseStats> SessionManager::Close(absl::string_view session_id) {
  // Declared before the lock, so dropped after it is released: destroying a session may
  // destroy its streams, and its holdings free device memory, both of which wait for the
  // device. Buffers and modules not in use by work in flight are freed then.
  std::shared_ptr<Session> closed;
  std::vector<Session::Holdings> doomed;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return SessionNotFoundError(session_id);
  closed = it->second;
  CloseStats stats = CloseLocked(closed, doomed);
  spdlog::info(
      "session closed: session={} tenant={} arrays_freed={} bytes_freed={} kernels_freed={}",
      stats.session_id, stats.tenant, stats.arrays_freed, stats.bytes_freed, stats.kernels_freed);
  return stats;
}

std::vector<CloseStats> SessionManager::ExpireLeases() {
  const absl::Time now = clock_.Now();
  std::vector<CloseStats> closed;
  std::vector<std::shared_ptr<Session>> expired;  // dropped after the lock (see Close)
  std::vector<Session::Holdings> doomed;          // likewise
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) {
    if (session->lease_deadline() < now) expired.push_back(session);
  }
  for (const auto& session : expired) {
    closed.push_back(CloseLocked(session, doomed));
    spdlog::warn(
        "session lease expired: session={} tenant={} arrays_freed={} bytes_freed={} "
        "kernels_freed={}",
        closed.back().session_id, closed.back().tenant, closed.back().arrays_freed,
        closed.back().bytes_freed, closed.back().kernels_freed);
  }
  return closed;
}

std::vector<CloseStats> SessionManager::CloseAll() {
  std::vector<CloseStats> closed;
  std::vector<std::shared_ptr<Session>> all;  // dropped after the lock (see Close)
  std::vector<Session::Holdings> doomed;      // likewise
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) all.push_back(session);
  for (const auto& session : all) closed.push_back(CloseLocked(session, doomed));
  return closed;
}

std::vector<std::shared_ptr<Session>> SessionManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> list;
  for (const auto& [id, session] : sessions_) list.push_back(session);
  std::sort(list.begin(), list.end(),
            [](const auto& a, const auto& b) { return a->opened_at() < b->opened_at(); });
  return list;
}

int SessionManager::count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace gpukit
