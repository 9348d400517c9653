#include "daemon/scheduler/sm_ranges.h"

#include <algorithm>
#include <vector>

namespace gpukit {

absl::flat_hash_map<std::string, SmPlacement> PlaceSms(absl::Span<const PartitionSpec> partitions) {
  absl::flat_hash_map<std::string, SmPlacement> placed;
  std::vector<const PartitionSpec*> reserved;
  double total_share = 0;
  for (const PartitionSpec& p : partitions) {
    total_share += p.compute_share;
    if (p.reserve_sms) reserved.push_back(&p);
  }
  if (reserved.empty()) {
    for (const PartitionSpec& p : partitions) placed[p.name] = SmPlacement{};
    return placed;
  }
  std::sort(reserved.begin(), reserved.end(),
            [](const PartitionSpec* a, const PartitionSpec* b) { return a->name < b->name; });
  const double scale = 1 / std::max(1.0, total_share);
  // The least a placement is given where rounding left nothing: the device gives it a group.
  constexpr double kLeastShare = 1e-9;
  double end = 0;
  for (const PartitionSpec* p : reserved) {
    const double share = std::max(kLeastShare, std::min(p->compute_share * scale, 1 - end));
    placed[p->name] = SmPlacement{.first = std::min(end, 1 - share), .share = share};
    end = std::min(1.0, end + share);
  }
  // Shared partitions exist only beside reserved shares summing below 1 (all shares fit in
  // 1 after scaling, and each is above 0), so the rest is never empty for them.
  for (const PartitionSpec& p : partitions) {
    if (p.reserve_sms) continue;
    placed[p.name] = end < 1 ? SmPlacement{.first = end, .share = 1 - end} : SmPlacement{};
  }
  return placed;
}

}  // namespace gpukit
