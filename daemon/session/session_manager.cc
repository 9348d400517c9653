#include "daemon/session/session_manager.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/names.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"
#include <sys/random.h>

namespace gpukit {
namespace {

constexpr size_t kMaxTenantLength = 63;
constexpr size_t kMaxNameLength = 253;  // client names, host names

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

std::string NewOpaqueId(absl::string_view prefix) {
  unsigned char bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return absl::StrCat(
      prefix, absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), 16)));
}

Session::Session(std::string id, const OpenSessionParams& params, SessionAdmission admission,
                 absl::Time now, absl::Duration lease)
    : id_(std::move(id)),
      tenant_(params.tenant),
      partition_(admission.partition),
      client_(params.client),
      opened_at_(now),
      lease_(lease),
      stream_(params.stream),
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
  if (static_cast<int64_t>(arrays_.size()) >= max_arrays) {
    return WithReason(absl::ResourceExhaustedError(absl::StrCat(
                          "session holds ", arrays_.size(), " arrays, its max_arrays_per_session")),
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
  return array;
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

std::vector<std::shared_ptr<DeviceArray>> Session::CloseAndTakeArrays() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  std::vector<std::shared_ptr<DeviceArray>> arrays;
  arrays.reserve(arrays_.size());
  for (auto& [handle, array] : arrays_) arrays.push_back(std::move(array));
  arrays_.clear();
  memory_bytes_ = 0;
  return arrays;
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
      "session opened: session={} tenant={} partition={} qos={} client={} pid={} lease_ms={}",
      session->id(), session->tenant(), session->partition(),
      std::string(QosName(session->admission().qos)), params.client.name, params.client.pid,
      absl::ToInt64Milliseconds(lease));
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Touch(absl::string_view session_id) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || it->second->lease_deadline() < now) {
    return absl::NotFoundError(absl::StrCat("session \"",
                                            absl::CHexEscape(session_id.substr(0, 80)),
                                            "\" not found (closed, expired or never opened)"));
  }
  it->second->Renew(now);
  return it->second;
}

CloseStats SessionManager::CloseLocked(std::shared_ptr<Session> session) {
  sessions_.erase(session->id());
  scheduler_.EndSession(session->ticket());
  std::vector<std::shared_ptr<DeviceArray>> arrays = session->CloseAndTakeArrays();
  CloseStats stats{session->id(), session->tenant(), static_cast<int64_t>(arrays.size()), 0};
  for (const auto& array : arrays) stats.bytes_freed += array->bytes();
  return stats;  // `arrays` drops here: buffers not in use by work in flight are freed now
}

absl::StatusOr<CloseStats> SessionManager::Close(absl::string_view session_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("session \"", absl::CHexEscape(session_id.substr(0, 80)), "\" not found"));
  }
  CloseStats stats = CloseLocked(it->second);
  spdlog::info("session closed: session={} tenant={} arrays_freed={} bytes_freed={}",
               stats.session_id, stats.tenant, stats.arrays_freed, stats.bytes_freed);
  return stats;
}

std::vector<CloseStats> SessionManager::ExpireLeases() {
  const absl::Time now = clock_.Now();
  std::vector<CloseStats> closed;
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> expired;
  for (const auto& [id, session] : sessions_) {
    if (session->lease_deadline() < now) expired.push_back(session);
  }
  for (auto& session : expired) {
    closed.push_back(CloseLocked(std::move(session)));
    spdlog::warn("session lease expired: session={} tenant={} arrays_freed={} bytes_freed={}",
                 closed.back().session_id, closed.back().tenant, closed.back().arrays_freed,
                 closed.back().bytes_freed);
  }
  return closed;
}

std::vector<CloseStats> SessionManager::CloseAll() {
  std::vector<CloseStats> closed;
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> all;
  for (const auto& [id, session] : sessions_) all.push_back(session);
  for (auto& session : all) closed.push_back(CloseLocked(std::move(session)));
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
