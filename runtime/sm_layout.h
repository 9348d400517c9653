// SmLayout: how a device's SMs are cut into the groups that stream placements are made of, and
// the arithmetic every backend shares to turn a stream's SM options into SMs.
//
// A device splits its SMs once into `group_count()` equal groups of `group_sms` SMs, the
// smallest part the hardware can give a stream on its own (on CUDA the green context
// granularity: the driver's minimum partition size rounded up to its co-scheduling alignment;
// an H100's 132 SMs make 16 groups of 8 and 4 SMs that no group holds). A placement
// (StreamOptions::sm_first and sm_share, fractions of the groups) takes the groups whose
// index range [first * G, (first + share) * G) covers, each boundary rounded to the nearest
// group. Two placements that do not overlap as fractions never share a group, because both
// round their common boundary the same way; a placement too small to reach half a group
// still gets one (the group its start rounds to), and only such a placement may share a group
// with its neighbour. A placement of every group gets every SM of the device, the ungrouped
// ones included (a plain stream on CUDA).
//
//   SmLayout h100{.sm_count = 132, .group_sms = 8};
//   GPUKIT_ASSIGN_OR_RETURN(SmGroupRange g, PlaceSmGroups(h100, /*first=*/0.8, /*share=*/0.2));
//   // g = {first 13, count 3}: 24 SMs
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_RUNTIME_SM_LAYOUT_H_
#define GPUKIT_RUNTIME_SM_LAYOUT_H_

#include "absl/status/statusor.h"

namespace gpukit {

struct SmLayout {
  int sm_count = 0;   // SMs of the device, > 0
  int group_sms = 1;  // SMs of one group, in [1, sm_count]
  // Groups the device was split into, when the split gave fewer than sm_count / group_sms
  // (a driver may, for its cluster rules); 0: sm_count / group_sms.
  int groups = 0;
  int group_count() const {
    if (groups > 0) return groups;
    return group_sms > 0 ? sm_count / group_sms : 0;
  }
};

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
// arithmetic operations. INVALID_ARGUMENT naming the value for a layout without groups, a
// share outside (0, 1], a first outside [0, 1) or first + share above 1 (by more than
// rounding).
absl::StatusOr<SmGroupRange> PlaceSmGroups(const SmLayout& layout, double first, double share);

// The SMs a placement's groups hold: every SM of the device when they are all the groups,
// else count x group_sms.
int PlacedSmCount(const SmLayout& layout, const SmGroupRange& groups);

// The SMs an unplaced stream with `share` gets (StreamOptions::sm_share without sm_first,
// one green context per SM count, as a CUDA device makes them): every SM for a share of 1,
// else share x sm_count rounded down to whole groups, at least one group (every SM if that
// reaches sm_count). `share` must be in (0, 1].
int SharedSmCount(const SmLayout& layout, double share);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_SM_LAYOUT_H_
