// SmLayout: how a device's SMs are cut into the groups that stream placements are made of, and
// the arithmetic every backend shares to turn a stream's SM options into SMs.
//
// A device splits its SMs once into `equal_groups()` groups of `group_sms` SMs, the smallest
// part the hardware can give a stream on its own (on CUDA the green context granularity: the
// driver's minimum partition size rounded up to its co-scheduling alignment), and, where the
// split leaves SMs over and the backend can use them, a last group of its own size, the
// `rest_sms` of the split's remainder (smaller or larger than group_sms). An H100's 132 SMs
// make 16 groups of 8 and a last group of 4; an H200 split 15 groups of 8 and a last group of
// 12. Without a last group (rest_sms 0) the SMs of no group run only unplaced streams.
//
// A placement (StreamOptions::sm_first and sm_share, fractions of the SMs the groups hold:
// every SM with a last group) takes the groups between two group boundaries: each end goes
// to the boundary whose count of SMs before it is nearest to its fraction of those SMs, a tie
// to the later one. Two placements that meet at a fraction never share a group, because both
// place their common boundary the same way. A placement whose two ends go to the same
// boundary (narrower than half a group, or than half the last group near the device's end)
// still gets one group, the one that starts there (the last at the device's end), and only
// such a placement may share a group with its neighbour. A placement of every group gets every SM
// of the device, the ungrouped ones included (a plain stream on CUDA). Without a last group
// this is the nearest whole group of the fraction x equal_groups(), halves rounding up.
//
//   SmLayout h100{.sm_count = 132, .group_sms = 8, .rest_sms = 4};  // 16 groups of 8, 1 of 4
//   GPUKIT_ASSIGN_OR_RETURN(SmGroupRange g, PlaceSmGroups(h100, /*first=*/0.8, /*share=*/0.2));
//   // 0.8 x 132 = 105.6 SMs is nearest to 104 (group 13): g = {first 13, count 4}, 28 SMs
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_RUNTIME_SM_LAYOUT_H_
#define GPUKIT_RUNTIME_SM_LAYOUT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpukit {

struct SmLayout {
  int sm_count = 0;   // SMs of the device, > 0
  int group_sms = 1;  // SMs of one equal group, in [1, sm_count]
  // Equal groups the device was split into, when the split gave fewer than
  // (sm_count - rest_sms) / group_sms (a driver may, for its cluster rules); 0: that many.
  int groups = 0;
  // SMs of a last group after the equal ones, made of the split's remainder; 0: no such
  // group. equal_groups() x group_sms + rest_sms must not exceed sm_count.
  int rest_sms = 0;
  int equal_groups() const {
    if (groups > 0) return groups;
    return group_sms > 0 ? (sm_count - rest_sms) / group_sms : 0;
  }
  // Every group, the last one of rest_sms included.
  int group_count() const { return equal_groups() + (rest_sms > 0 ? 1 : 0); }
  // SMs of groups [0, group), for `group` in [0, group_count()].
  int SmsBefore(int group) const;
};

// OK when `layout` has at least one group and its groups fit its SMs; else INVALID_ARGUMENT
// naming the values. Costs a few arithmetic operations.
absl::Status CheckSmLayout(const SmLayout& layout);

// The group granularity of a GPU whose driver reports `min_partition_sms` (the smallest
// group it cuts) and `alignment_sms` (the co-scheduling alignment): the minimum rounded up
// to the alignment, at least 1.
int GroupSmsFor(int min_partition_sms, int alignment_sms);

// Groups [first, first + count) of a layout.
struct SmGroupRange {
  int first = 0;
  int count = 0;
  friend bool operator==(const SmGroupRange&, const SmGroupRange&) = default;
};

// The groups a placement of [first, first + share) gets (see the file comment). Costs a few
// arithmetic operations. INVALID_ARGUMENT naming the value for a layout CheckSmLayout
// refuses, a share outside (0, 1], a first outside [0, 1) or first + share above 1 (by more
// than rounding).
absl::StatusOr<SmGroupRange> PlaceSmGroups(const SmLayout& layout, double first, double share);

// The SMs a placement's groups hold: every SM of the device when they are all the groups,
// else the sum of their SMs (the last group's rest_sms where the range includes it).
int PlacedSmCount(const SmLayout& layout, const SmGroupRange& groups);

// The SMs an unplaced stream with `share` gets (StreamOptions::sm_share without sm_first,
// one green context per SM count, as a CUDA device makes them): every SM for a share of 1,
// else share x sm_count rounded down to whole groups, at least one group (every SM if that
// reaches sm_count). `share` must be in (0, 1].
int SharedSmCount(const SmLayout& layout, double share);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_SM_LAYOUT_H_
