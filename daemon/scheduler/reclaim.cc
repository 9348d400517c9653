#include "daemon/scheduler/reclaim.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace gpukit {

std::vector<size_t> ChooseVictims(absl::Span<const ReclaimCandidate> candidates,
                                  int64_t shortfall_bytes, const Requester& requester) {
  if (shortfall_bytes <= 0) return {};
  const bool may_take_best_effort = requester.qos != QosClass::kBestEffort;
  // A BestEffort session has no request to be within, so it takes nothing whatever it says.
  const bool may_take_burstable_excess =
      requester.qos == QosClass::kGuaranteed ||
      (requester.qos == QosClass::kBurstable && requester.within_request);

  std::vector<size_t> best_effort;
  std::vector<size_t> burstable;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const ReclaimCandidate& c = candidates[i];
    if (c.qos == QosClass::kBestEffort && may_take_best_effort) best_effort.push_back(i);
    if (c.qos == QosClass::kBurstable && may_take_burstable_excess &&
        c.session_used_bytes > c.session_request_bytes) {
      burstable.push_back(i);
    }
  }
  auto lru = [&](size_t a, size_t b) {
    if (candidates[a].last_used != candidates[b].last_used) {
      return candidates[a].last_used < candidates[b].last_used;
    }
    return a < b;  // deterministic among equals
  };
  std::sort(best_effort.begin(), best_effort.end(), lru);
  std::sort(burstable.begin(), burstable.end(), lru);

  std::vector<size_t> victims;
  int64_t freed = 0;
  for (size_t i : best_effort) {
    if (freed >= shortfall_bytes) break;
    victims.push_back(i);
    freed += candidates[i].bytes;
  }
  // A Burstable session gives up arrays only while it stays above its request: an array
  // that would take it below is skipped (a smaller, older one may still fit).
  absl::flat_hash_map<uint64_t, int64_t> burstable_used;
  for (size_t i : burstable) {
    if (freed >= shortfall_bytes) break;
    const ReclaimCandidate& c = candidates[i];
    auto [it, inserted] = burstable_used.try_emplace(c.session_key, c.session_used_bytes);
    if (it->second - c.bytes < c.session_request_bytes) continue;
    it->second -= c.bytes;
    victims.push_back(i);
    freed += c.bytes;
  }
  if (freed < shortfall_bytes) return {};
  return victims;
}

}  // namespace gpukit
