// The executor channel's encoding (proto/gpukit/executor/executor.proto): messages as
// datagrams of a unix SOCK_SEQPACKET socket, statuses as replies, built-in op launches as
// RunOp messages. Shared by gpukitd's RemoteDevice and the executor's ExecutorServer.
//
// Thread safety: functions are thread-safe; a datagram is sent whole by one sendmsg, so
// threads may send on one socket at once.
#ifndef GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_PROTOCOL_H_
#define GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"
#include "gpukit/executor/executor.pb.h"
#include "runtime/base/unix_fd.h"
#include "runtime/device.h"
#include "runtime/executor/spin_wait.h"

namespace gpukit {

// The largest message either side sends (the socket keeps datagrams whole up to its buffer).
inline constexpr size_t kMaxExecutorMessageBytes = 60 * 1024;

// Sends `message` as one datagram, with `fd` attached when >= 0. INVALID_ARGUMENT for a
// message above kMaxExecutorMessageBytes; UNAVAILABLE when the peer is gone.
absl::Status SendExecutorMessage(int socket, const google::protobuf::MessageLite& message,
                                 int fd = -1);
// SendExecutorMessage in two steps: the datagram's bytes (INVALID_ARGUMENT above
// kMaxExecutorMessageBytes), then their send, for a sender that encodes outside its lock.
absl::StatusOr<std::string> EncodeExecutorMessage(const google::protobuf::MessageLite& message);
absl::Status SendExecutorBytes(int socket, const std::string& bytes, int fd = -1);
// Waits for the next datagram and parses it into `message`; returns its descriptor, if one
// came. While `activity` (when given) is Recent(), it polls the socket without sleeping, so a
// message that follows recent traffic is read without a wake-up; otherwise it sleeps in
// recvmsg, or, when `activity` has a bell, on the socket and the bell (a Ring makes it poll).
// UNAVAILABLE when the peer closed the channel; INTERNAL for bytes that do not parse.
absl::StatusOr<ScopedFd> ReceiveExecutorMessage(int socket, google::protobuf::MessageLite& message,
                                                const RecentActivity* activity = nullptr);

// A status as the executor's messages carry it: an absl::StatusCode as an int32 and a
// message. WireStatus maps a code outside absl's to UNKNOWN.
absl::Status WireStatus(int32_t code, std::string message);
void SetReplyStatus(const absl::Status& status, executor::Reply& reply);
absl::Status ReplyStatus(const executor::Reply& reply);
// An ElapsedNs-with-pairs reply's per-pair outcome: appends one pair's status and device time
// (0 unless the status is OK); PairStatus reads pair i's back (INTERNAL for an i the reply
// does not hold).
void AddPairOutcome(const absl::Status& status, int64_t elapsed_ns, executor::Reply& reply);
absl::Status PairStatus(const executor::Reply& reply, int i);

// OpLaunch <-> RunOp. Buffer ids travel as they are, without places (the encoder's caller
// adds those it knows); `decode_buffer` maps each id, with its place (segment 0 when none), to
// the device's buffer (NOT_FOUND for one it does not know).
void EncodeRunOp(const OpLaunch& launch, StreamId stream, executor::RunOp& out);
absl::StatusOr<OpLaunch> DecodeRunOp(
    const executor::RunOp& in,
    const std::function<absl::StatusOr<BufferId>(uint64_t id, const executor::Place& place)>&
        decode_buffer);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_PROTOCOL_H_
