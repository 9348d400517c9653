#include "runtime/sm_layout.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpukit {
namespace {

// Slack for shares computed as differences of fractions (0.3 - 0.1 + 0.1 may miss 0.3 by an
// ulp): far below a group of any GPU, far above double rounding.
constexpr double kFractionSlack = 1e-9;

// The group boundary nearest to `fraction` of `groups`, halves rounding up. Both placements
// that meet at a boundary round it here, so they never share a group.
int Boundary(double fraction, int groups) {
  const double at = std::floor(fraction * groups + 0.5 + kFractionSlack);
  return static_cast<int>(std::clamp(at, 0.0, static_cast<double>(groups)));
}

}  // namespace

int GroupSmsFor(int min_partition_sms, int alignment_sms) {
  const int align = std::max(1, alignment_sms);
  const int minimum = std::max(align, min_partition_sms);
  return (minimum + align - 1) / align * align;
}

absl::StatusOr<SmGroupRange> PlaceSmGroups(const SmLayout& layout, double first, double share) {
  const int groups = layout.group_count();
  if (groups < 1) {
    return absl::InvalidArgumentError(absl::StrCat("SM layout of ", layout.sm_count,
                                                   " SMs in groups of ", layout.group_sms,
                                                   " has no group to place streams on"));
  }
  if (!(share > 0 && share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream sm_share = ", share, " must be in (0, 1]"));
  }
  if (!(first >= 0 && first < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream sm_first = ", first, " must be in [0, 1)"));
  }
  if (first + share > 1 + kFractionSlack) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream sm_first + sm_share = ", first, " + ", share, " must be at most 1"));
  }
  SmGroupRange range;
  range.first = Boundary(first, groups);
  const int end = Boundary(first + share, groups);
  if (end > range.first) {
    range.count = end - range.first;
  } else {
    // Less than half a group: the one its start rounds to (the last when it rounds past it).
    range.first = std::min(range.first, groups - 1);
    range.count = 1;
  }
  return range;
}

int PlacedSmCount(const SmLayout& layout, const SmGroupRange& groups) {
  if (groups.first == 0 && groups.count >= layout.group_count()) return layout.sm_count;
  return groups.count * layout.group_sms;
}

int SharedSmCount(const SmLayout& layout, double share) {
  if (share >= 1 || layout.group_sms <= 0) return layout.sm_count;
  const int group = layout.group_sms;
  const int sms = std::max(group, static_cast<int>(share * layout.sm_count) / group * group);
  return std::min(sms, layout.sm_count);
}

}  // namespace gpukit
