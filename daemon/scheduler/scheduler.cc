#include "daemon/scheduler/scheduler.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/scheduler/device_time_estimate.h"
#include "daemon/scheduler/sm_ranges.h"
#include "daemon/scheduler/task_queue.h"
#include "daemon/scheduler/token_bucket.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {

// A session as the scheduler accounts for it. Reached through its ticket only.
struct SessionAccount {
  std::string id;
  std::shared_ptr<PartitionState> partition;
  int device_index = 0;
  QosClass qos = QosClass::kBestEffort;
  ResourceSpec resources;
  std::shared_ptr<TenantUsage> tenant;  // its fields are guarded by the scheduler's mutex
  // Guarded by the scheduler's mutex.
  int64_t used_bytes = 0;
  bool ended = false;
  absl::Duration device_time;
  int64_t tasks_finished = 0;
  DeviceTimeEstimates estimates;  // per task name, learned at Finish
};

struct Task {
  TaskInfo info;
  QueueKey key;
  std::shared_ptr<PartitionState> partition;
  SessionTicket session;
  // Estimated device time, counted in its device's in-flight sums and charged to its
  // partition's buckets from admission; `settled` once Finish replaced the charge.
  absl::Duration estimate;
  bool settled = false;
  // The share clock of the SMs it ran on (its partition's or its device's), its reading
  // when the task started, and the fraction of the device's SMs those are.
  ShareClock* clock = nullptr;
  double clock_at_start = 0;
  double sm_fraction = 1;
};

struct PartitionState {
  PartitionState(const PartitionSpec& s, absl::Duration burst, absl::Time now)
      : spec(s), share(s.compute_share, burst, now), cap(CapRate(s), burst, now) {
    UpdateSpareSlots();
  }
  static double CapRate(const PartitionSpec& s) {
    return s.bandwidth_cap > 0 ? s.bandwidth_cap : 1.0;
  }
  // TokenBucket::Charge and Settle, on both buckets. They apply to the balance as of the
  // bucket's last accrual, which is whenever anyone last looked (ListPartitions, another
  // partition's pump): both buckets accrue to `now` first, so the charge lands at `now`.
  void ChargeBuckets(absl::Duration estimate, absl::Time now) {
    share.BalanceNs(now);
    cap.BalanceNs(now);
    share.Charge(estimate);
    cap.Charge(estimate);
  }
  void SettleBuckets(absl::Duration charged, absl::Duration used, absl::Time now) {
    share.BalanceNs(now);
    cap.BalanceNs(now);
    share.Settle(charged, used);
    cap.Settle(charged, used);
  }

  PartitionSpec spec;
  bool deleted = false;
  // The fraction of its device's SMs its streams run on (PlaceSms), and, when it reserves
  // them, the tasks running there (no other partition's run on them).
  double sm_fraction = 1;
  ShareClock own_clock;
  absl::flat_hash_set<std::string> sessions;
  int64_t memory_used_bytes = 0;
  int64_t memory_requested_bytes = 0;
  double compute_requested = 0;
  TaskQueue queue;
  int running = 0;  // admitted or running
  // Whether fewer than half of spec.max_running_tasks tasks are running or queued (see
  // Scheduler::PartitionHasSpareSlots): written under the scheduler's lock by
  // UpdateSpareSlots wherever either count or the spec changes, read without it.
  std::atomic<bool> spare_slots{false};
  void UpdateSpareSlots() {
    spare_slots.store(running + static_cast<int>(queue.size()) < spec.max_running_tasks / 2,
                      std::memory_order_relaxed);
  }
  int guaranteed_queued = 0;
  absl::Time last_finish = absl::InfinitePast();  // when Finish last ended one of its tasks
  TokenBucket share;
  TokenBucket cap;  // consulted only when the partition has a bandwidth cap
  int64_t admitted_total = 0;
  int64_t succeeded_total = 0;
  int64_t failed_total = 0;
  DeviceTimeByQos device_time_by_qos{};  // its sum is the device_time_total listed
  std::array<int64_t, kRejectReasonCount> rejected{};
  // Time with work queued that pacing (share or cap) held back, as of the last pump that
  // changed it, and since when it is held now (InfinitePast: not held).
  absl::Duration throttled_total;
  absl::Time throttled_since = absl::InfinitePast();
  bool paced = false;  // the current pump's finding, applied by NoteThrottled
  void NoteThrottled(absl::Time now) {
    if (paced && throttled_since == absl::InfinitePast()) {
      throttled_since = now;
    } else if (!paced && throttled_since != absl::InfinitePast()) {
      throttled_total += now - throttled_since;
      throttled_since = absl::InfinitePast();
    }
  }
  absl::Duration Throttled(absl::Time now) const {
    return throttled_since == absl::InfinitePast() ? throttled_total
                                                   : throttled_total + (now - throttled_since);
  }
};

namespace {

// The entry of `tenant` in `tenants`, made empty if it has none.
std::shared_ptr<TenantUsage>& TenantEntry(
    absl::flat_hash_map<std::string, std::shared_ptr<TenantUsage>>& tenants,
    absl::string_view tenant) {
  std::shared_ptr<TenantUsage>& usage = tenants[tenant];
  if (usage == nullptr) {
    usage = std::make_shared<TenantUsage>();
    usage->tenant = std::string(tenant);
  }
  return usage;
}

absl::Status UnknownPartition(absl::string_view name) {
  return absl::NotFoundError(
      absl::StrCat("partition \"", absl::CHexEscape(name.substr(0, 80)), "\" does not exist"));
}

absl::Status SessionEnded(const SessionAccount& account) {
  return absl::NotFoundError(absl::StrCat("session ", account.id, " has ended"));
}

constexpr int kMaxPriority = 100;
// How often AwaitAdmission looks at its `cancelled` callback while it waits.
constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(5);

}  // namespace

// ---- MemoryReservation ---------------------------------------------------------------

MemoryReservation::MemoryReservation(Scheduler* scheduler, SessionTicket account, int64_t bytes)
    : scheduler_(scheduler), account_(std::move(account)), bytes_(bytes) {}

MemoryReservation::MemoryReservation(MemoryReservation&& other) noexcept
    : scheduler_(std::exchange(other.scheduler_, nullptr)),
      account_(std::move(other.account_)),
      bytes_(std::exchange(other.bytes_, 0)) {}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    Release();
    scheduler_ = std::exchange(other.scheduler_, nullptr);
    account_ = std::move(other.account_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryReservation::Release() {
  if (scheduler_ != nullptr) {
    if (MemoryReturnBatch* batch = MemoryReturnBatch::Current()) {
      batch->returns_.push_back({scheduler_, std::move(account_), bytes_});
    } else {
      scheduler_->ReturnMemory(*account_, bytes_);
    }
  }
  scheduler_ = nullptr;
  account_.reset();
  bytes_ = 0;
}

MemoryReturnBatch*& MemoryReturnBatch::Current() {
  thread_local MemoryReturnBatch* current = nullptr;
  return current;
}

MemoryReturnBatch::MemoryReturnBatch() {
  if (Current() == nullptr) {
    Current() = this;
    outermost_ = true;
  }
}

MemoryReturnBatch::~MemoryReturnBatch() {
  if (!outermost_) return;
  Current() = nullptr;
  // One lock for each run of returns to one scheduler (a daemon has one).
  for (size_t i = 0; i < returns_.size();) {
    Scheduler& scheduler = *returns_[i].scheduler;
    absl::MutexLock lock(&scheduler.mu_);
    for (; i < returns_.size() && returns_[i].scheduler == &scheduler; ++i) {
      scheduler.ReturnMemoryLocked(*returns_[i].account, returns_[i].bytes);
    }
  }
  // The tickets go after the lock: a session's last reference may end with them.
}

void Scheduler::ReturnMemory(SessionAccount& account, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  ReturnMemoryLocked(account, bytes);
}

void Scheduler::ReturnMemoryLocked(SessionAccount& account, int64_t bytes) {
  account.used_bytes -= bytes;
  account.partition->memory_used_bytes -= bytes;
  account.tenant->memory_used_bytes -= bytes;
  devices_[account.device_index].used_bytes -= bytes;
}

// ---- Construction and partitions -----------------------------------------------------

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const Clock& clock, std::vector<DeviceCapacity> devices,
    const std::vector<PartitionSpec>& partitions, const SchedulerOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("the scheduler needs a device");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].index != static_cast<int>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", i, "].index = ", devices[i].index, " must be ", i));
    }
  }
  if (options.pacing_burst <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("pacing burst must be > 0");
  }
  if (options.pacing_anticipation < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pacing anticipation = ", absl::FormatDuration(options.pacing_anticipation),
                     " must be >= 0"));
  }
  if (options.best_effort_in_flight <= absl::ZeroDuration() ||
      options.burstable_in_flight <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in-flight bounds must be > 0; best_effort_in_flight = ",
        absl::FormatDuration(options.best_effort_in_flight),
        ", burstable_in_flight = ", absl::FormatDuration(options.burstable_in_flight)));
  }
  if (options.task_history < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task history = ", options.task_history, " must be >= 0"));
  }
  std::unique_ptr<Scheduler> scheduler(new Scheduler(clock, std::move(devices), options));
  for (const PartitionSpec& spec : partitions) {
    GPUKIT_RETURN_IF_ERROR(scheduler->CreatePartition(spec));
  }
  return scheduler;
}

Scheduler::Scheduler(const Clock& clock, std::vector<DeviceCapacity> devices,
                     const SchedulerOptions& options)
    : clock_(clock),
      options_(options),
      dispatch_limits_{.best_effort_in_flight = options.best_effort_in_flight,
                       .burstable_in_flight = options.burstable_in_flight,
                       .pacing_anticipation = options.pacing_anticipation} {
  for (const DeviceCapacity& d : devices) devices_.push_back({.capacity_bytes = d.memory_bytes});
  dispatch_.limits = dispatch_limits_;
}

Scheduler::~Scheduler() = default;

absl::Status Scheduler::CheckDeviceLocked(int device_index) const {
  if (device_index < 0 || device_index >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("device ", device_index,
                                                   " does not exist; the daemon has ",
                                                   devices_.size(), " device(s)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PartitionState*> Scheduler::FindPartitionLocked(absl::string_view name) const {
  auto it = partitions_.find(name);
  if (it == partitions_.end()) return UnknownPartition(name);
  return it->second.get();
}

std::vector<PartitionSpec> Scheduler::OtherSpecsLocked(absl::string_view except) const {
  std::vector<PartitionSpec> specs;
  for (const auto& [name, p] : partitions_) {
    if (name != except) specs.push_back(p->spec);
  }
  return specs;
}

absl::Status Scheduler::CreatePartition(const PartitionSpec& spec) {
  GPUKIT_RETURN_IF_ERROR(ValidatePartitionSpec(spec));
  absl::MutexLock lock(&mu_);
  GPUKIT_RETURN_IF_ERROR(CheckDeviceLocked(spec.device_index));
  if (partitions_.contains(spec.name)) {
    return absl::AlreadyExistsError(absl::StrCat("partition \"", spec.name, "\" already exists"));
  }
  const Decision fits =
      AdmitPartition(spec, OtherSpecsLocked(spec.name), devices_[spec.device_index].capacity_bytes);
  if (!fits.admitted) return fits.ToStatus();
  partitions_.emplace(spec.name,
                      std::make_shared<PartitionState>(spec, options_.pacing_burst, clock_.Now()));
  PlaceSmsLocked(spec.device_index);
  return absl::OkStatus();
}

absl::StatusOr<PartitionSpec> Scheduler::UpdatePartition(absl::string_view name,
                                                         const PartitionFieldMask& mask,
                                                         const PartitionSpec& values) {
  absl::MutexLock lock(&mu_);
  GPUKIT_ASSIGN_OR_RETURN(PartitionState * p, FindPartitionLocked(name));
  // Merged under the lock: what another update set in between stays.
  const PartitionSpec spec = ApplyPartitionFields(p->spec, mask, values);
  GPUKIT_RETURN_IF_ERROR(ValidatePartitionSpec(spec));
  const Decision fits =
      AdmitPartition(spec, OtherSpecsLocked(spec.name), devices_[spec.device_index].capacity_bytes);
  if (!fits.admitted) return fits.ToStatus();
  const absl::Time now = clock_.Now();
  p->spec = spec;
  p->UpdateSpareSlots();
  p->share.SetRate(spec.compute_share, now);
  p->cap.SetRate(PartitionState::CapRate(spec), now);
  PlaceSmsLocked(spec.device_index);
  PumpLocked(now);  // a raised limit may let waiting tasks go
  return spec;
}

absl::StatusOr<std::vector<std::string>> Scheduler::DeletePartition(absl::string_view name,
                                                                    bool force) {
  absl::MutexLock lock(&mu_);
  auto it = partitions_.find(name);
  if (it == partitions_.end()) return UnknownPartition(name);
  PartitionState& p = *it->second;
  std::vector<std::string> sessions(p.sessions.begin(), p.sessions.end());
  std::sort(sessions.begin(), sessions.end());
  if (!sessions.empty() && !force) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "partition \"", name, "\" has ", sessions.size(),
            " open session(s); close them first or delete with force, which closes them")),
        RejectReason::kPartitionBusy);
  }
  p.deleted = true;
  const int device_index = p.spec.device_index;
  partitions_.erase(it);
  PlaceSmsLocked(device_index);
  return sessions;
}

std::vector<PartitionStatus> Scheduler::ListPartitions() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  std::vector<PartitionStatus> list;
  for (const auto& [name, p] : partitions_) {
    PartitionStatus s;
    s.spec = p->spec;
    s.sessions = static_cast<int>(p->sessions.size());
    s.memory_used_bytes = p->memory_used_bytes;
    s.memory_requested_bytes = p->memory_requested_bytes;
    s.compute_requested = p->compute_requested;
    s.queued = p->queue.size();
    s.running = p->running;
    s.admitted_total = p->admitted_total;
    s.succeeded_total = p->succeeded_total;
    s.failed_total = p->failed_total;
    for (absl::Duration d : p->device_time_by_qos) s.device_time_total += d;
    s.device_time_by_qos = p->device_time_by_qos;
    s.rejected = p->rejected;
    s.pacing_balance = absl::Nanoseconds(p->share.BalanceNs(now));
    s.throttled_total = p->Throttled(now);
    list.push_back(std::move(s));
  }
  std::sort(list.begin(), list.end(), [](const PartitionStatus& a, const PartitionStatus& b) {
    if (a.spec.device_index != b.spec.device_index) {
      return a.spec.device_index < b.spec.device_index;
    }
    return a.spec.name < b.spec.name;
  });
  return list;
}

absl::StatusOr<PartitionSpec> Scheduler::GetPartition(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  GPUKIT_ASSIGN_OR_RETURN(PartitionState * p, FindPartitionLocked(name));
  return p->spec;
}

void Scheduler::CountLocked(PartitionState& p, RejectReason reason) {
  ++p.rejected[static_cast<int>(reason)];
}

// ---- Sessions ------------------------------------------------------------------------

absl::StatusOr<SessionAdmission> Scheduler::AdmitSession(absl::string_view session_id,
                                                         absl::string_view partition,
                                                         const ResourceSpec& requested,
                                                         absl::string_view tenant) {
  GPUKIT_RETURN_IF_ERROR(ValidateResourceSpec(requested));
  absl::MutexLock lock(&mu_);
  const absl::string_view name = partition.empty() ? kDefaultPartition : partition;
  auto it = partitions_.find(name);
  if (it == partitions_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, p] : partitions_) names.push_back(n);
    std::sort(names.begin(), names.end());
    return absl::NotFoundError(
        absl::StrCat("partition \"", absl::CHexEscape(name.substr(0, 80)),
                     "\" does not exist; the daemon has: ", absl::StrJoin(names, ", ")));
  }
  PartitionState& p = *it->second;
  const ResourceSpec resources =
      WithDefaultedRequests(requested.empty() ? p.spec.session_defaults : requested);
  SessionSnapshot snapshot;
  snapshot.daemon_sessions = sessions_;
  snapshot.max_sessions = options_.limits.max_sessions;
  snapshot.partition_sessions = static_cast<int>(p.sessions.size());
  snapshot.partition_max_sessions = p.spec.max_sessions;
  snapshot.resources = resources;
  snapshot.partition_memory_requested_bytes = p.memory_requested_bytes;
  snapshot.partition_memory_quota_bytes = p.spec.memory_quota_bytes;
  snapshot.partition_compute_requested = p.compute_requested;
  snapshot.partition_compute_share = p.spec.compute_share;
  const Decision decision = ::gpukit::AdmitSession(snapshot);
  if (!decision.admitted) {
    CountLocked(p, decision.reason);
    return decision.ToStatus();
  }
  auto account = std::make_shared<SessionAccount>();
  account->id = std::string(session_id);
  account->partition = it->second;
  account->device_index = p.spec.device_index;
  account->qos = DeriveQos(resources);
  account->resources = resources;
  if (!tenants_.contains(tenant) && tenants_.size() >= static_cast<size_t>(kMaxTenants)) {
    FoldIdleTenantLocked();
  }
  std::shared_ptr<TenantUsage>& tenant_usage = TenantEntry(tenants_, tenant);
  ++tenant_usage->sessions;
  account->tenant = tenant_usage;
  p.sessions.insert(account->id);
  ++devices_[p.spec.device_index].sessions[static_cast<int>(account->qos)];
  p.memory_requested_bytes += resources.memory_request_bytes.value_or(0);
  p.compute_requested += resources.compute_request.value_or(0);
  ++sessions_;
  return SessionAdmission{account, p.spec.name, p.spec.device_index, account->qos, resources};
}

void Scheduler::EndSession(const SessionTicket& ticket) {
  absl::MutexLock lock(&mu_);
  if (ticket->ended) return;
  ticket->ended = true;
  --sessions_;
  --ticket->tenant->sessions;
  PartitionState& p = *ticket->partition;
  p.sessions.erase(ticket->id);
  --devices_[ticket->device_index].sessions[static_cast<int>(ticket->qos)];
  p.memory_requested_bytes -= ticket->resources.memory_request_bytes.value_or(0);
  p.compute_requested -= ticket->resources.compute_request.value_or(0);
  if (p.sessions.empty()) p.compute_requested = 0;  // no floating-point residue
  const absl::Time now = clock_.Now();
  std::vector<TaskRef> waiting;
  for (const auto& [id, task] : live_) {
    if (task->session == ticket && TaskTransitionAllowed(task->info.state, TaskState::kCancelled)) {
      waiting.push_back(task);  // Queued or Admitted: a running task ends at its Finish
    }
  }
  for (const TaskRef& task : waiting) {
    // Allowed (checked above); a refusal would be a bug, which TransitionLocked logged.
    EndTaskLocked(*task, TaskState::kCancelled, now, "the session ended").IgnoreError();
  }
  PumpLocked(now);
}

bool Scheduler::HigherClassSessionOpen(const SessionTicket& ticket) const {
  absl::MutexLock lock(&mu_);
  return HigherClassSessionOpenLocked(*ticket);
}

bool Scheduler::PartitionHasSpareSlots(const SessionTicket& ticket) const {
  return ticket->partition->spare_slots.load(std::memory_order_relaxed);
}

bool Scheduler::HigherClassSessionOpenLocked(const SessionAccount& account) const {
  const DeviceState& device = devices_[account.device_index];
  for (int c = 0; c < static_cast<int>(account.qos); ++c) {
    if (device.sessions[c] > 0) return true;
  }
  return false;
}

SessionUsage Scheduler::Usage(const SessionTicket& ticket) const {
  absl::MutexLock lock(&mu_);
  SessionUsage usage;
  usage.partition = ticket->partition->spec.name;
  usage.qos = ticket->qos;
  usage.resources = ticket->resources;
  usage.memory_used_bytes = ticket->used_bytes;
  usage.ended = ticket->ended;
  usage.tenant = ticket->tenant->tenant;
  usage.device_time = ticket->device_time;
  usage.tasks_finished = ticket->tasks_finished;
  return usage;
}

void Scheduler::FoldIdleTenantLocked() {
  // Idle: no session account refers to it any more (open, or ended but still held by a task
  // or a reservation), so nothing can charge it after the fold. The one with the least
  // device time goes: what it folds into is the least informative.
  auto victim = tenants_.end();
  for (auto it = tenants_.begin(); it != tenants_.end(); ++it) {
    if (it->first == kFoldedTenants || it->second.use_count() > 1) continue;
    if (victim == tenants_.end() ||
        it->second->device_time_total < victim->second->device_time_total) {
      victim = it;
    }
  }
  if (victim == tenants_.end()) return;  // every tenant is in use: keep them all
  const TenantUsage gone = *victim->second;
  tenants_.erase(victim);
  TenantUsage& folded = *TenantEntry(tenants_, kFoldedTenants);
  folded.device_time_total += gone.device_time_total;
  for (int i = 0; i < kQosClassCount; ++i)
    folded.device_time_by_qos[i] += gone.device_time_by_qos[i];
  folded.tasks_finished += gone.tasks_finished;
  folded.tasks_failed += gone.tasks_failed;
}

std::vector<TenantUsage> Scheduler::ListTenants() const {
  absl::MutexLock lock(&mu_);
  std::vector<TenantUsage> list;
  list.reserve(tenants_.size());
  for (const auto& [name, usage] : tenants_) list.push_back(*usage);
  std::sort(list.begin(), list.end(),
            [](const TenantUsage& a, const TenantUsage& b) { return a.tenant < b.tenant; });
  return list;
}

bool Scheduler::SpillEnabled(absl::string_view partition) const {
  absl::MutexLock lock(&mu_);
  auto it = partitions_.find(partition);
  return it != partitions_.end() && it->second->spec.spill;
}

int Scheduler::session_count() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

// ---- Memory --------------------------------------------------------------------------

absl::StatusOr<MemoryReservation> Scheduler::ReserveMemory(const SessionTicket& ticket,
                                                           int64_t bytes, ReclaimPlan* plan) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("reservation of ", bytes, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  GPUKIT_RETURN_IF_ERROR(TakeMemoryLocked(*ticket, bytes, plan));
  return MemoryReservation(this, ticket, bytes);
}

absl::Status Scheduler::TakeMemoryLocked(SessionAccount& account, int64_t bytes,
                                         ReclaimPlan* plan) {
  if (account.ended) return SessionEnded(account);
  PartitionState& p = *account.partition;
  DeviceState& device = devices_[account.device_index];
  AllocationSnapshot s;
  s.bytes = bytes;
  s.max_array_bytes = options_.limits.max_array_bytes;
  s.session_used_bytes = account.used_bytes;
  s.session_limit_bytes = account.resources.memory_limit_bytes;
  s.partition_used_bytes = p.memory_used_bytes;
  s.partition_quota_bytes = p.spec.memory_quota_bytes;
  s.device_used_bytes = device.used_bytes;
  s.device_capacity_bytes = device.capacity_bytes;
  const AllocationDecision d = AdmitAllocation(s);
  if (!d.decision.admitted) {
    // A refusal that comes with a reclaim plan is counted by the caller only if reclaiming
    // does not make room (CountRefusal): a request that spilling satisfies was not refused.
    if (plan == nullptr || d.shortfall_bytes == 0) CountLocked(p, d.decision.reason);
    if (plan != nullptr && d.shortfall_bytes > 0) {
      const int64_t request = account.resources.memory_request_bytes.value_or(0);
      *plan = ReclaimPlan{
          account.device_index, d.shortfall_is_device_wide ? std::string() : p.spec.name,
          d.shortfall_bytes, Requester{account.qos, account.used_bytes + bytes <= request}};
    }
    return d.decision.ToStatus();
  }
  account.used_bytes += bytes;
  p.memory_used_bytes += bytes;
  account.tenant->memory_used_bytes += bytes;
  device.used_bytes += bytes;
  return absl::OkStatus();
}

void Scheduler::CountRefusal(const SessionTicket& ticket, RejectReason reason) {
  absl::MutexLock lock(&mu_);
  CountLocked(*ticket->partition, reason);
}

int64_t Scheduler::device_memory_used(int device_index) const {
  absl::MutexLock lock(&mu_);
  return devices_.at(device_index).used_bytes;
}

absl::Duration Scheduler::device_time_total(int device_index) const {
  absl::MutexLock lock(&mu_);
  if (device_index < 0 || device_index >= static_cast<int>(devices_.size())) {
    return absl::ZeroDuration();
  }
  return devices_[device_index].device_time_total;
}

// ---- Tasks ---------------------------------------------------------------------------

absl::StatusOr<TaskRef> Scheduler::Submit(const SessionTicket& ticket, const TaskRequest& request,
                                          SubmitNotes* notes) {
  // Made before the lock, which every session's requests take: what does not read the
  // scheduler's state (the allocation, the references, the name) is no one else's wait. A
  // session's partition and class are set at its admission and never change.
  auto task = std::make_shared<Task>();
  task->partition = ticket->partition;
  task->session = ticket;
  TaskInfo& info = task->info;
  // info.session_id and info.partition are filled when the task is listed: copying them
  // here would cost an allocation per task on the hot path.
  info.qos = ticket->qos;
  info.kind = request.kind;
  info.name = request.name;
  info.priority = std::clamp(request.priority, -kMaxPriority, kMaxPriority);
  absl::MutexLock lock(&mu_);  // released before `task` goes, if it is refused
  if (ticket->ended) return SessionEnded(*ticket);
  if (notes != nullptr) notes->higher_class_open = HigherClassSessionOpenLocked(*ticket);
  PartitionState& p = *ticket->partition;
  const absl::Time now = clock_.Now();
  const Decision decision = AdmitTask(p.queue.size(), p.spec.max_queued_tasks, p.spec.name);
  if (!decision.admitted) {
    CountLocked(p, decision.reason);
    return decision.ToStatus();
  }
  info.id = next_task_id_++;
  info.submitted = now;
  info.deadline = now + request.queue_timeout;  // InfiniteFuture for an infinite timeout
  GPUKIT_RETURN_IF_ERROR(TransitionLocked(*task, TaskState::kQueued, now));
  task->key = {info.qos, info.priority, info.id};
  live_.emplace(info.id, task);
  if (p.queue.empty() && p.running == 0 && now >= p.last_finish + options_.pacing_anticipation) {
    // p was idle: the debt the others ran up while it left them the device is forgiven
    // down to the burst, so a partition that ran alone for hours is not then held for hours.
    for (const auto& [name, holder] : partitions_) {
      PartitionState& other = *holder;
      if (&other == &p || other.spec.device_index != p.spec.device_index) continue;
      other.share.BalanceNs(now);
      other.share.LimitDebt(options_.pacing_burst);
    }
  }
  absl::Time ignored;
  if (p.queue.empty() && info.deadline > now && MayAdmitLocked(p, info.qos, now, &ignored)) {
    AdmitLocked(p, *task, now);  // nothing waits ahead of it: skip the queue
    if (notes != nullptr) notes->admitted = task->info.state == TaskState::kAdmitted;
    return task;
  }
  p.queue.Push(task->key, info.id);
  p.UpdateSpareSlots();
  if (info.qos == QosClass::kGuaranteed) ++p.guaranteed_queued;
  if (info.deadline != absl::InfiniteFuture()) deadlines_.insert({info.deadline, info.id});
  PumpLocked(now);
  return task;
}

absl::Time Scheduler::Pump() {
  absl::MutexLock lock(&mu_);
  return PumpLocked(clock_.Now());
}

absl::Time Scheduler::PumpLocked(absl::Time now) {
  // Expire what waited past its deadline, wherever it is in its queue.
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = live_.find(id);
    if (it != live_.end() && TaskTransitionAllowed(it->second->info.state, TaskState::kExpired)) {
      EndTaskLocked(*it->second, TaskState::kExpired, now,
                    "its deadline passed while it waited in the queue")
          .IgnoreError();  // allowed (checked); a refusal is a bug, logged
    }
  }
  // A partition in debt yields to others of its device (dispatch_policy.h, rule 4); what
  // they admit changes whether it must. Partitions are visited in hash order, so pass again
  // until a pass admits nothing: the last pass sees settled state and its `next` is complete.
  absl::Time next;
  bool admitted = true;
  while (admitted) {
    admitted = false;
    next = deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
    for (const auto& [name, holder] : partitions_) {
      PartitionState& p = *holder;
      p.paced = false;
      while (!p.queue.empty() && MayAdmitLocked(p, p.queue.front().key.qos, now, &next, &p.paced)) {
        // A refusal (a bug, logged) leaves the head where it is: stop, or it would spin.
        if (!AdmitLocked(p, *live_.at(p.queue.front().task_id), now)) break;
        admitted = true;
      }
    }
  }
  // The last pass saw settled state: whether pacing holds each partition's queue now.
  for (const auto& [name, holder] : partitions_) holder->NoteThrottled(now);
  return next;
}

const DispatchSnapshot& Scheduler::DispatchSnapshotLocked(PartitionState& p, QosClass qos,
                                                          absl::Time now) {
  DispatchSnapshot& s = dispatch_;
  const int device_index = p.spec.device_index;
  const DeviceState& device = devices_[device_index];
  s.now = now;
  s.in_flight = device.in_flight;
  for (int c = 0; c < kQosClassCount; ++c) {
    s.in_flight_estimate[c] = absl::Nanoseconds(device.in_flight_estimate_ns[c]);
  }
  s.qos = qos;
  s.partitions.clear();
  // In partitions_'s order, which the policy's rule 4 reports the first claim of.
  auto add = [&](PartitionState& q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (&q == &p) s.candidate = s.partitions.size();
    s.partitions.push_back(DispatchPartition{
        .name = q.spec.name,
        .running = q.running,
        .max_running_tasks = q.spec.max_running_tasks,
        .queued = q.queue.size(),
        .guaranteed_queued = q.guaranteed_queued,
        .capped = q.spec.bandwidth_cap > 0,
        .cap_ready_at = q.spec.bandwidth_cap > 0 ? q.cap.ReadyAt(now) : now,
        .share_ready_at = q.share.ReadyAt(now),
        .last_finish = q.last_finish,
        .reserved_sms = q.spec.reserve_sms,
    });
  };
  for (const auto& [name, holder] : partitions_) {
    if (holder->spec.device_index == device_index) add(*holder);
  }
  if (p.deleted) {
    // A task submitted by a session of a partition being deleted: the partition is no
    // longer in partitions_, and its queue is never pumped, so its queued Guaranteed work
    // is not active on the device.
    add(p);
    s.partitions.back().guaranteed_queued = 0;
  }
  return s;
}

bool Scheduler::MayAdmitLocked(PartitionState& p, QosClass qos, absl::Time now, absl::Time* next,
                               bool* paced) {
  const DispatchDecision decision = DecideDispatch(DispatchSnapshotLocked(p, qos, now));
  // A wait for an event (a finish, a cancel: they pump) has no ready time.
  *next = std::min(*next, decision.ready_at);
  if (paced != nullptr && decision.paced()) *paced = true;
  return decision.admit;
}

absl::Duration Scheduler::InFlightBound(QosClass qos) const {
  return dispatch_limits_.InFlightBound(qos);
}

absl::Status Scheduler::TransitionLocked(Task& task, TaskState to, absl::Time now) {
  const TaskState from = task.info.state;
  if (absl::Status allowed = CheckTaskTransition(task.info.id, from, to); !allowed.ok()) {
    // The message names the task and both states.
    spdlog::error("task state change refused: partition={} {}", task.partition->spec.name,
                  std::string(allowed.message()));
    return allowed;
  }
  task.info.state = to;
  switch (to) {
    case TaskState::kAdmitted:
      task.info.admitted = now;
      break;
    case TaskState::kRunning:
      task.info.started = now;
      break;
    default:
      if (IsTerminal(to)) task.info.finished = now;
      break;
  }
  return absl::OkStatus();
}

bool Scheduler::AdmitLocked(PartitionState& p, Task& task, absl::Time now) {
  if (!TransitionLocked(task, TaskState::kAdmitted, now).ok()) return false;
  if (p.queue.Remove(task.key)) {
    if (task.info.deadline != absl::InfiniteFuture()) {
      deadlines_.erase({task.info.deadline, task.info.id});
    }
    if (task.info.qos == QosClass::kGuaranteed) --p.guaranteed_queued;
  }
  ++p.running;
  p.UpdateSpareSlots();
  ++p.admitted_total;
  task.estimate = task.session->estimates.Estimate(task.info.name, InFlightBound(task.info.qos));
  DeviceState& device = devices_[p.spec.device_index];
  const int c = static_cast<int>(task.info.qos);
  ++device.in_flight[c];
  device.in_flight_estimate_ns[c] += absl::ToInt64Nanoseconds(task.estimate);
  p.ChargeBuckets(task.estimate, now);
  return true;
}

void ShareClock::Advance(absl::Time now) {
  if (running == 0) {
    ns = 0;  // no task holds a reading: start again, exactly
  } else if (now > last) {
    ns += absl::ToDoubleNanoseconds(now - last) / static_cast<double>(running);
  }
  last = std::max(last, now);
}

ShareClock& Scheduler::ClockOfLocked(PartitionState& p) {
  return p.spec.reserve_sms ? p.own_clock : devices_[p.spec.device_index].shared_clock;
}

void Scheduler::PlaceSmsLocked(int device_index) {
  std::vector<PartitionSpec> specs;
  for (const auto& [name, p] : partitions_) {
    if (p->spec.device_index == device_index) specs.push_back(p->spec);
  }
  const absl::flat_hash_map<std::string, SmPlacement> placed = PlaceSms(specs);
  for (const auto& [name, p] : partitions_) {
    if (p->spec.device_index != device_index) continue;
    auto it = placed.find(name);
    p->sm_fraction = it != placed.end() ? it->second.share : 1;
  }
}

absl::Duration Scheduler::OwnDeviceTimeLocked(const Task& task, absl::Duration device_time,
                                              absl::Time now) {
  task.clock->Advance(now);
  const absl::Duration span = now - task.info.started;
  // A run that took no time on the scheduler's clock says nothing about sharing.
  if (span <= absl::ZeroDuration()) return device_time * task.sm_fraction;
  const double mean_share = std::clamp(
      (task.clock->ns - task.clock_at_start) / absl::ToDoubleNanoseconds(span), 0.0, 1.0);
  return device_time * (mean_share * task.sm_fraction);
}

void Scheduler::ReleaseInFlightLocked(Task& task, TaskState was, absl::Time now) {
  PartitionState& p = *task.partition;
  DeviceState& device = devices_[p.spec.device_index];
  if (was == TaskState::kRunning) {
    task.clock->Advance(now);
    --task.clock->running;
  }
  const int c = static_cast<int>(task.info.qos);
  --device.in_flight[c];
  device.in_flight_estimate_ns[c] -= absl::ToInt64Nanoseconds(task.estimate);
  if (!task.settled) {  // it never ran: its estimate comes back
    p.SettleBuckets(task.estimate, absl::ZeroDuration(), now);
    task.settled = true;
  }
}

absl::Status Scheduler::EndTaskLocked(Task& task, TaskState state, absl::Time now,
                                      absl::string_view error) {
  PartitionState& p = *task.partition;
  const TaskState was = task.info.state;
  GPUKIT_RETURN_IF_ERROR(TransitionLocked(task, state, now));
  const bool guaranteed = task.info.qos == QosClass::kGuaranteed;
  if (was == TaskState::kQueued) {
    p.queue.Remove(task.key);
    if (task.info.deadline != absl::InfiniteFuture()) {
      deadlines_.erase({task.info.deadline, task.info.id});
    }
    if (guaranteed) --p.guaranteed_queued;
  } else if (was == TaskState::kAdmitted || was == TaskState::kRunning) {
    --p.running;
    ReleaseInFlightLocked(task, was, now);
  }
  p.UpdateSpareSlots();
  task.info.error = std::string(error);
  switch (state) {
    case TaskState::kSucceeded:
      ++p.succeeded_total;
      break;
    case TaskState::kFailed:
      ++p.failed_total;
      break;
    case TaskState::kCancelled:
      CountLocked(p, RejectReason::kCancelled);
      break;
    case TaskState::kExpired:
      CountLocked(p, RejectReason::kDeadlineExceeded);
      break;
    default:
      break;
  }
  if (options_.task_history > 0) {
    if (static_cast<int>(history_.size()) >= options_.task_history) history_.pop_front();
    auto it = live_.find(task.info.id);
    history_.push_back(it->second);  // an ended task no longer changes: no copy needed
  }
  live_.erase(task.info.id);
  return absl::OkStatus();
}

absl::Status Scheduler::AwaitAdmission(const TaskRef& task,
                                       const std::function<bool()>& cancelled) {
  auto not_queued = [](Task* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return t->info.state != TaskState::kQueued;
  };
  absl::MutexLock lock(&mu_);
  while (true) {
    switch (task->info.state) {
      case TaskState::kAdmitted:
      case TaskState::kRunning:
        return absl::OkStatus();
      case TaskState::kCancelled:
        return WithReason(absl::CancelledError(absl::StrCat("task ", task->info.id,
                                                            " was cancelled: ", task->info.error)),
                          RejectReason::kCancelled);
      case TaskState::kExpired:
        return WithReason(absl::DeadlineExceededError(absl::StrCat(
                              "task ", task->info.id, " waited ",
                              absl::FormatDuration(task->info.finished - task->info.submitted),
                              " in the queue of partition \"", task->partition->spec.name,
                              "\" and its deadline passed")),
                          RejectReason::kDeadlineExceeded);
      case TaskState::kQueued:
        break;
      default:  // Succeeded or Failed: only reachable if the caller finished it already
        return absl::FailedPreconditionError(
            absl::StrCat("task ", task->info.id, " has already ended"));
    }
    if (cancelled()) {
      GPUKIT_RETURN_IF_ERROR(
          EndTaskLocked(*task, TaskState::kCancelled, clock_.Now(), "its client cancelled it"));
      PumpLocked(clock_.Now());
      continue;
    }
    const absl::Time now = clock_.Now();
    const absl::Time next = PumpLocked(now);
    if (task->info.state != TaskState::kQueued) continue;
    const absl::Duration wait =
        std::min(std::max(next - now, absl::Microseconds(50)), kCancelPollInterval);
    mu_.AwaitWithTimeout(absl::Condition(+not_queued, task.get()), wait);
  }
}

absl::Status Scheduler::Start(const TaskRef& task) {
  absl::MutexLock lock(&mu_);
  return StartLocked(*task);
}

absl::StatusOr<MemoryReservation> Scheduler::StartWithMemory(const TaskRef& task, int64_t bytes,
                                                             ReclaimPlan* plan) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("reservation of ", bytes, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  SessionAccount& account = *task->session;
  // Nothing is reserved for a task that may not start (StartLocked says why).
  if (!TaskTransitionAllowed(task->info.state, TaskState::kRunning)) return StartLocked(*task);
  GPUKIT_RETURN_IF_ERROR(TakeMemoryLocked(account, bytes, plan));
  if (absl::Status started = StartLocked(*task); !started.ok()) {  // a bug: Admitted was checked
    ReturnMemoryLocked(account, bytes);
    return started;
  }
  return MemoryReservation(this, task->session, bytes);
}

absl::Status Scheduler::StartLocked(Task& task) {
  if (!TaskTransitionAllowed(task.info.state, TaskState::kRunning)) {  // not Admitted
    const absl::Status status = absl::CancelledError(
        absl::StrCat("task ", task.info.id, " is ", TaskStateName(task.info.state),
                     ", not Admitted: ", task.info.error));
    return task.info.state == TaskState::kCancelled ? WithReason(status, RejectReason::kCancelled)
                                                    : status;
  }
  const absl::Time now = clock_.Now();
  GPUKIT_RETURN_IF_ERROR(TransitionLocked(task, TaskState::kRunning, now));
  PartitionState& p = *task.partition;
  ShareClock& clock = ClockOfLocked(p);
  clock.Advance(now);
  ++clock.running;
  task.clock = &clock;
  task.clock_at_start = clock.ns;
  task.sm_fraction = p.sm_fraction;
  return absl::OkStatus();
}

void Scheduler::Finish(const TaskRef& task, const absl::Status& result,
                       absl::Duration device_time) {
  Finish({TaskEnd{task, result, device_time}});
}

void Scheduler::Finish(absl::Span<const TaskEnd> ends) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  for (const TaskEnd& end : ends) FinishLocked(end, now);
  PumpLocked(now);
}

void Scheduler::FinishLocked(const TaskEnd& task_end, absl::Time now) {
  const TaskRef& task = task_end.task;
  const absl::Status& result = task_end.result;
  const absl::Duration device_time = task_end.device_time;
  const TaskState state = task->info.state;
  const TaskState end = result.ok() ? TaskState::kSucceeded : TaskState::kFailed;
  // Not Admitted or Running: it ended already (a request that lost a race with Cancel, or a
  // second Finish). Checked first, so that nothing below is charged for it.
  if (!TaskTransitionAllowed(state, end)) return;
  PartitionState& p = *task->partition;
  // Pacing charges the task's own part of the device's time: tasks running at once share
  // the device, and the time each measures includes the others'.
  const absl::Duration own =
      state == TaskState::kRunning ? OwnDeviceTimeLocked(*task, device_time, now) : device_time;
  p.SettleBuckets(task->estimate, own, now);
  task->settled = true;
  // Only work that ran to success teaches the estimate: a failure may have stopped early.
  if (state == TaskState::kRunning && result.ok()) {
    task->session->estimates.Learn(task->info.name, device_time);
  }
  AccountFinishLocked(*task, device_time, !result.ok());
  p.last_finish = now;
  task->info.device_time = device_time;
  // Allowed (checked above); a refusal would be a bug, which TransitionLocked logged.
  EndTaskLocked(*task, end, now, result.ok() ? absl::string_view() : result.message())
      .IgnoreError();
}

void Scheduler::AccountFinishLocked(Task& task, absl::Duration device_time, bool failed) {
  const int qos = static_cast<int>(task.info.qos);
  PartitionState& p = *task.partition;
  p.device_time_by_qos[qos] += device_time;
  devices_[p.spec.device_index].device_time_total += device_time;
  SessionAccount& session = *task.session;
  session.device_time += device_time;
  ++session.tasks_finished;
  TenantUsage& tenant = *session.tenant;
  tenant.device_time_total += device_time;
  tenant.device_time_by_qos[qos] += device_time;
  ++tenant.tasks_finished;
  if (failed) ++tenant.tasks_failed;
}

absl::Status TaskNotFoundError(uint64_t task_id) {
  return absl::NotFoundError(
      absl::StrCat("task ", task_id, " is not waiting or running (unknown or finished)"));
}

absl::Status Scheduler::Cancel(uint64_t task_id, absl::string_view why) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(task_id);
  if (it == live_.end()) return TaskNotFoundError(task_id);
  TaskRef task = it->second;
  if (task->info.state == TaskState::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", task_id, " is running; work on the device cannot be stopped midway"));
  }
  const absl::Time now = clock_.Now();
  GPUKIT_RETURN_IF_ERROR(EndTaskLocked(*task, TaskState::kCancelled, now, why));
  PumpLocked(now);
  return absl::OkStatus();
}

TaskState Scheduler::StateOf(const TaskRef& task) const {
  absl::MutexLock lock(&mu_);
  return task->info.state;
}

uint64_t Scheduler::IdOf(const TaskRef& task) const {
  absl::MutexLock lock(&mu_);
  return task->info.id;
}

std::vector<TaskInfo> Scheduler::ListTasks(const TaskFilter& filter) const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskInfo> list;
  auto wanted = [&](const Task& task) {
    return (!filter.partition || task.partition->spec.name == *filter.partition) &&
           (!filter.state || task.info.state == *filter.state);
  };
  auto full = [&] { return filter.limit > 0 && static_cast<int>(list.size()) >= filter.limit; };
  auto add = [&](const Task& task) {
    list.push_back(task.info);
    list.back().session_id = task.session->id;
    list.back().partition = task.partition->spec.name;
  };
  std::vector<const Task*> live;
  for (const auto& [id, task] : live_) {
    if (wanted(*task)) live.push_back(task.get());
  }
  std::sort(live.begin(), live.end(),
            [](const Task* a, const Task* b) { return a->info.id < b->info.id; });
  for (const Task* task : live) {
    if (full()) return list;
    add(*task);
  }
  for (auto it = history_.rbegin(); it != history_.rend() && !full(); ++it) {
    if (wanted(**it)) add(**it);
  }
  return list;
}

}  // namespace gpukit
