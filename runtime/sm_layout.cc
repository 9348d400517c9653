#include "runtime/sm_layout.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace gpukit {
namespace {

// Slack for shares computed as differences of fractions (0.3 - 0.1 + 0.1 may miss 0.3 by an
// ulp), in groups of group_sms: far below a group of any GPU, far above double rounding.
constexpr double kFractionSlack = 1e-9;

// The group boundary whose SMs before it are nearest to `fraction` of the SMs the groups
// hold, ties going to the later one. Both placements that meet at a fraction place it here,
// so they never share a group. Counted in equal groups (SMs / group_sms), so that a layout
// without a last group rounds fraction x equal_groups() as it always did.
int Boundary(const SmLayout& layout, double fraction) {
  const int equal = layout.equal_groups();
  const double rest = static_cast<double>(layout.rest_sms) / layout.group_sms;  // in groups
  const double at = fraction * (equal + rest);
  // The nearest of the equal groups' boundaries 0..equal, halves rounding up.
  const int nearest = static_cast<int>(
      std::clamp(std::floor(at + 0.5 + kFractionSlack), 0.0, static_cast<double>(equal)));
  // Past the last equal group, the end of the last group (equal + rest) may be nearer.
  if (layout.rest_sms > 0 && nearest == equal &&
      (equal + rest) - at <= at - equal + 2 * kFractionSlack) {
    return equal + 1;
  }
  return nearest;
}

}  // namespace

int SmLayout::SmsBefore(int group) const {
  const int equal = equal_groups();
  if (group <= equal) return group * group_sms;
  return equal * group_sms + rest_sms;
}

absl::Status CheckSmLayout(const SmLayout& layout) {
  if (layout.group_sms < 1 || layout.rest_sms < 0 || layout.equal_groups() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SM layout of ", layout.sm_count, " SMs in groups of ", layout.group_sms, " (and ",
        layout.rest_sms, " in a last group) has no group to place streams on"));
  }
  if (layout.SmsBefore(layout.group_count()) > layout.sm_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SM layout's ", layout.equal_groups(), " groups of ", layout.group_sms, " SMs and ",
        layout.rest_sms, " in a last group exceed its sm_count = ", layout.sm_count));
  }
  return absl::OkStatus();
}

int GroupSmsFor(int min_partition_sms, int alignment_sms) {
  const int align = std::max(1, alignment_sms);
  const int minimum = std::max(align, min_partition_sms);
  return (minimum + align - 1) / align * align;
}

absl::StatusOr<SmGroupRange> PlaceSmGroups(const SmLayout& layout, double first, double share) {
  GPUKIT_RETURN_IF_ERROR(CheckSmLayout(layout));
  const int groups = layout.group_count();
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
  range.first = Boundary(layout, first);
  const int end = Boundary(layout, first + share);
  if (end > range.first) {
    range.count = end - range.first;
  } else {
    // Both ends at one boundary: the group that starts there (the last at the device's end).
    range.first = std::min(range.first, groups - 1);
    range.count = 1;
  }
  return range;
}

int PlacedSmCount(const SmLayout& layout, const SmGroupRange& groups) {
  if (groups.first == 0 && groups.count >= layout.group_count()) return layout.sm_count;
  return layout.SmsBefore(groups.first + groups.count) - layout.SmsBefore(groups.first);
}

int SharedSmCount(const SmLayout& layout, double share) {
  if (share >= 1 || layout.group_sms <= 0) return layout.sm_count;
  const int group = layout.group_sms;
  const int sms = std::max(group, static_cast<int>(share * layout.sm_count) / group * group);
  return std::min(sms, layout.sm_count);
}

}  // namespace gpukit
