// GoogleTest printers for the scheduler's scoped enums, shared by the scheduler_test sources:
// without them a failure would dump the enums as bytes. They must sit in the enums' own
// namespace for GoogleTest to find them.
#ifndef GPUKIT_TESTS_UNIT_SCHEDULER_SCHEDULER_PRINTERS_H_
#define GPUKIT_TESTS_UNIT_SCHEDULER_SCHEDULER_PRINTERS_H_

#include <ostream>

#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/reason.h"
#include "daemon/scheduler/task.h"

namespace gpukit {

inline void PrintTo(TaskState state, std::ostream* os) { *os << TaskStateName(state); }
inline void PrintTo(QosClass qos, std::ostream* os) { *os << QosName(qos); }
inline void PrintTo(RejectReason reason, std::ostream* os) { *os << RejectReasonName(reason); }

}  // namespace gpukit

#endif  // GPUKIT_TESTS_UNIT_SCHEDULER_SCHEDULER_PRINTERS_H_
