#include "daemon/core/partition_streams.h"

#include <algorithm>

#include "absl/status/status.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {

// The streams of one partition and class: owns them and destroys them with itself.
class PartitionStreams::StreamSet {
 public:
  explicit StreamSet(Device& device) : device_(device) {}
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;
  // Waits for each stream's queued work (DestroyStream does), then destroys it. Nothing
  // enqueues any more: every session that could has let go of the set.
  ~StreamSet() {
    for (StreamId stream : streams_) {
      if (absl::Status destroyed = device_.DestroyStream(stream); !destroyed.ok()) {
        spdlog::error("destroying stream {} of device {}: {}", stream.value,
                      device_.properties().index, std::string(destroyed.message()));
      }
    }
  }

  // Adds `count` streams made with `options`. On error the ones added so far stay owned, and
  // go with the set.
  absl::Status Fill(int count, const StreamOptions& options) {
    for (int i = 0; i < count; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(StreamId stream, device_.CreateStream(options));
      streams_.push_back(stream);
    }
    if (!streams_.empty()) sm_count_ = device_.StreamSmCount(streams_.front()).value_or(0);
    return absl::OkStatus();
  }

  // SMs its streams may run on; 0 when the device cannot tell.
  int sm_count() const { return sm_count_; }

  StreamId stream(uint64_t index) const { return streams_[index % streams_.size()]; }

 private:
  Device& device_;
  std::vector<StreamId> streams_;
  int sm_count_ = 0;
};

PartitionStreams::PartitionStreams(int streams_per_class, double best_effort_sm_share)
    : streams_per_class_(streams_per_class), best_effort_sm_share_(best_effort_sm_share) {}

absl::StatusOr<StreamLease> PartitionStreams::Acquire(
    absl::string_view partition, Device& device, QosClass qos, const SmPlacement& placement,
    std::vector<std::shared_ptr<const void>>* replaced) {
  Entry& entry = entries_[Key(std::string(partition), &device)];
  if (!(entry.placement == placement)) {
    std::vector<std::shared_ptr<const void>> old;
    for (std::shared_ptr<StreamSet>& set : entry.by_qos) {
      if (set != nullptr) old.push_back(std::move(set));
    }
    if (!old.empty()) {
      spdlog::info(
          "partition {} on device {}: SM placement changed; its new sessions get new "
          "streams, open ones keep theirs",
          std::string(partition), device.properties().index);
    }
    entry = Entry{.placement = placement};
    if (replaced != nullptr) {
      for (std::shared_ptr<const void>& set : old) replaced->push_back(std::move(set));
    }
  }
  const int c = static_cast<int>(qos);
  if (entry.by_qos[c] == nullptr) {
    // Created under the caller's lock: creating a stream waits for no device work, and a
    // set that failed half way holds only idle streams, so destroying it waits for nothing.
    auto set = std::make_shared<StreamSet>(device);
    const StreamOptions options = StreamOptionsFor(placement, qos, best_effort_sm_share_);
    GPUKIT_RETURN_IF_ERROR(set->Fill(streams_per_class_, options));
    entry.by_qos[c] = std::move(set);
    spdlog::debug("streams created: partition={} device={} qos={} streams={} sms={}",
                  std::string(partition), device.properties().index, std::string(QosName(qos)),
                  streams_per_class_, entry.by_qos[c]->sm_count());
  }
  return StreamLease{entry.by_qos[c]->stream(entry.next[c]++), entry.by_qos[c]};
}

std::vector<std::shared_ptr<const void>> PartitionStreams::Remove(absl::string_view partition) {
  std::vector<std::shared_ptr<const void>> dropped;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first != partition) {
      ++it;
      continue;
    }
    for (std::shared_ptr<StreamSet>& set : it->second.by_qos) {
      if (set != nullptr) dropped.push_back(std::move(set));
    }
    entries_.erase(it++);
  }
  return dropped;
}

std::vector<std::shared_ptr<const void>> PartitionStreams::RemoveAll() {
  std::vector<std::shared_ptr<const void>> dropped;
  for (auto& [key, entry] : entries_) {
    for (std::shared_ptr<StreamSet>& set : entry.by_qos) {
      if (set != nullptr) dropped.push_back(std::move(set));
    }
  }
  entries_.clear();
  return dropped;
}

int PartitionStreams::SmCount(absl::string_view partition, const Device& device,
                              const SmPlacement& placement) const {
  auto it = entries_.find(Key(std::string(partition), &device));
  if (it == entries_.end() || !(it->second.placement == placement)) return 0;
  int sms = 0;
  for (const std::shared_ptr<StreamSet>& set : it->second.by_qos) {
    if (set != nullptr) sms = std::max(sms, set->sm_count());
  }
  return sms;
}

int PartitionStreams::set_count() const {
  int count = 0;
  for (const auto& [key, entry] : entries_) {
    for (const std::shared_ptr<StreamSet>& set : entry.by_qos) count += set != nullptr;
  }
  return count;
}

}  // namespace gpukit
