#include "daemon/core/fault_ledger.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpukit {

absl::Time FaultLedger::HoldEnd(const std::deque<absl::Time>& faults) const {
  const absl::Time now = clock_.Now();
  int64_t recent = 0;
  for (absl::Time t : faults) {
    if (now - t < options_.window) ++recent;
  }
  if (recent < 2 || faults.empty()) return absl::InfinitePast();
  absl::Duration hold = options_.first_hold;
  for (int64_t i = 2; i < recent && hold < options_.max_hold; ++i) hold *= 2;
  return faults.back() + std::min(hold, options_.max_hold);
}

void FaultLedger::Record(WorkFault fault) {
  fault.time = clock_.Now();
  absl::MutexLock lock(&mu_);
  // An executor that died is not taken for the tenant's doing (the OOM killer, an operator);
  // it is only named as the last fault.
  if (!fault.tenant.empty() && fault.kind != "exited") {
    std::deque<absl::Time>& faults = faults_[fault.tenant];
    any_tenant_fault_.store(true, std::memory_order_release);
    faults.push_back(fault.time);
    while (!faults.empty() && fault.time - faults.front() >= options_.window) faults.pop_front();
  }
  last_[fault.device] = std::move(fault);
}

absl::Status FaultLedger::CheckLaunch(absl::string_view tenant) const {
  if (!any_tenant_fault_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto it = faults_.find(tenant);
  if (it == faults_.end()) return absl::OkStatus();
  const absl::Time end = HoldEnd(it->second);
  const absl::Time now = clock_.Now();
  if (end <= now) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "tenant \"", tenant, "\": its work faulted the device ", it->second.size(), " times in ",
      absl::FormatDuration(options_.window), ", each costing every tenant an executor restart; "
      "its launches are held back for ", absl::FormatDuration(absl::Ceil(end - now, absl::Milliseconds(100))),
      " more"));
}

std::optional<WorkFault> FaultLedger::LastFault(int device) const {
  absl::MutexLock lock(&mu_);
  auto it = last_.find(device);
  if (it == last_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> FaultLedger::HeldBack() const {
  std::vector<std::string> held;
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  for (const auto& [tenant, faults] : faults_) {
    const absl::Time end = HoldEnd(faults);
    if (end <= now) continue;
    held.push_back(absl::StrCat(tenant, ": ", faults.size(), " faults in ",
                                absl::FormatDuration(options_.window), ", held back ",
                                absl::FormatDuration(absl::Ceil(end - now, absl::Milliseconds(100))),
                                " more"));
  }
  std::sort(held.begin(), held.end());
  return held;
}

}  // namespace gpukit
