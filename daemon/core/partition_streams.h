// PartitionStreams: the streams each partition's sessions run on, a set per partition and
// QoS class, so that one partition's queued work never waits behind another's in stream
// order and the device time measured between a task's two events holds only its own
// partition's work.
//
// A set holds `streams_per_class` streams of the device, created with the class's priority
// (Guaranteed high, Burstable normal, BestEffort low) the first time a session of that
// partition and class asks for one; Acquire then hands out its streams round robin.
// BestEffort streams may also be confined to a share of the device's SMs
// (`best_effort_sm_share`, StreamOptions::sm_share: a green context on a GPU), so that the
// other SMs are always free of BestEffort work when Guaranteed or Burstable work arrives.
// Each partition's streams are made in its SM placement (sm_placement.h: every SM unless
// partitions of its device reserve SMs), BestEffort's share taken within it; when the
// placement Acquire is given differs from the one the partition's sets were made with, the
// sets are replaced: later sessions get streams of the new placement, while sessions that
// hold the old ones keep them (and their SMs) until they close. A
// lease keeps its set alive: the table holds one reference per set until the partition is
// removed, every session holds another (OpenSessionParams::stream_owner), and whoever drops
// the last one destroys the set's streams.
//
//   PartitionStreams streams(/*streams_per_class=*/2);
//   GPUKIT_ASSIGN_OR_RETURN(StreamLease lease,
//                           streams.Acquire(admission.partition, device, admission.qos));
//   params.stream = lease.stream;
//   params.stream_owner = std::move(lease.owner);
//   ...
//   std::vector<std::shared_ptr<const void>> gone = streams.Remove("team-a");
//   // unlock, then let `gone` drop: the streams are destroyed once no session holds them
//
// Destroying a stream waits for its queued work, so the last reference to a set must drop
// where no lock is held (see StreamLease).
//
// Thread safety: the table is not thread-safe; its owner serializes calls (Core does so
// under the lock that also orders session admission against partition deletion). Leases
// may be dropped on any thread.
#ifndef GPUKIT_DAEMON_CORE_PARTITION_STREAMS_H_
#define GPUKIT_DAEMON_CORE_PARTITION_STREAMS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/sm_placement.h"
#include "daemon/scheduler/qos.h"
#include "runtime/device.h"

namespace gpukit {

// One stream of a partition's set, and a reference that keeps the set alive. The holder
// of the last reference destroys the set's streams when it drops it, which waits for their
// queued work: drop it where no lock is held.
struct StreamLease {
  StreamId stream;
  std::shared_ptr<const void> owner;
};

class PartitionStreams {
 public:
  // `streams_per_class` must be >= 1; `best_effort_sm_share` in (0, 1] (1: every SM).
  explicit PartitionStreams(int streams_per_class, double best_effort_sm_share = 1);
  PartitionStreams(const PartitionStreams&) = delete;
  PartitionStreams& operator=(const PartitionStreams&) = delete;
  // Drops the table's references; sets that no lease holds any more are destroyed here.
  ~PartitionStreams() = default;

  // The next stream, round robin, of `partition`'s set for `qos` on `device`, creating the
  // set on first use. A partition is told apart by its name and its device, so a partition
  // deleted and made again on another device never gets the old device's streams. Errors:
  // the device's, from CreateStream (the streams created before the failure are destroyed).
  // `placement` is the partition's SM placement now: sets made in another are forgotten
  // first, their table references moved to `replaced` for the caller to drop outside its
  // locks (dropped here when it is null).
  absl::StatusOr<StreamLease> Acquire(absl::string_view partition, Device& device, QosClass qos,
                                      const SmPlacement& placement = {},
                                      std::vector<std::shared_ptr<const void>>* replaced = nullptr);

  // The most SMs any stream of `partition`'s sets on `device` may run on (Device::
  // StreamSmCount of each set's first stream); 0 when it has no set made in `placement`, or
  // the device cannot tell. O(1).
  int SmCount(absl::string_view partition, const Device& device,
              const SmPlacement& placement) const;

  // Forgets `partition`'s sets on every device and returns the table's references to them,
  // for the caller to drop outside its locks: the streams are destroyed when the last
  // session using them is gone. Nothing when the partition never had a session.
  std::vector<std::shared_ptr<const void>> Remove(absl::string_view partition);
  // Forgets every set, likewise.
  std::vector<std::shared_ptr<const void>> RemoveAll();

  // Sets the table holds (a partition and class that has had a session), for tests.
  int set_count() const;

 private:
  class StreamSet;
  struct Entry {
    std::shared_ptr<StreamSet> by_qos[3];  // by QosClass; null until first used
    uint64_t next[3] = {0, 0, 0};          // round robin position, by QosClass
    SmPlacement placement;                 // what its sets were made in
  };
  using Key = std::pair<std::string, const Device*>;

  const int streams_per_class_;
  const double best_effort_sm_share_;
  absl::flat_hash_map<Key, Entry> entries_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_PARTITION_STREAMS_H_
