#include "daemon/core/sm_placement.h"

namespace gpukit {

StreamPriority PriorityOf(QosClass qos) {
  switch (qos) {
    case QosClass::kGuaranteed:
      return StreamPriority::kHigh;
    case QosClass::kBurstable:
      return StreamPriority::kNormal;
    case QosClass::kBestEffort:
      return StreamPriority::kLow;
  }
  return StreamPriority::kNormal;
}

StreamOptions StreamOptionsFor(const SmPlacement& placement, QosClass qos,
                               double best_effort_sm_share) {
  StreamOptions options;
  options.priority = PriorityOf(qos);
  options.sm_first = placement.first;
  options.sm_share = placement.share;
  if (qos == QosClass::kBestEffort) options.sm_share *= best_effort_sm_share;
  return options;
}

}  // namespace gpukit
