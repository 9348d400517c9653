// ExecutorServer: the device executor's side of the channel to gpukitd (gpukit-executor).
//
// The executor is a child process of gpukitd that holds one device (its CUDA context, streams,
// cuBLASLt and modules) and runs every copy, op and launch; gpukitd owns all memory and all
// state worth keeping, so when a kernel faults (a sticky CUDA error poisons the whole process)
// or the executor dies, gpukitd starts another and replays its tables into it
// (runtime/executor/remote_device.h). This class serves gpukitd's Requests
// (proto/gpukit/executor/executor.proto) on a Device:
//   - table requests (segments, buffers, streams, modules) run on the reading thread, in
//     order; work names a buffer of gpukitd's device pool by its place (executor::Place),
//     which the executor keeps a view of (a device buffer over that range of the segment),
//     made on first use and kept until its segment is unmapped, so that an op's output needs
//     no definition and no free of its own; an ElapsedNs with pairs goes to the completion thread
//     of its first pair's stream when that thread is idle (answered there at once: an event its
//     stream's thread has not recorded yet has not completed), so the reader rarely calls the
//     device for it (a WaitEvent with pairs answers them where its wait ends);
//   - stream work (copies, ops, launches, events) goes to the stream's own thread, so that one
//     stream's work never waits for another's (the CPU device runs work on the enqueueing
//     thread), and a wait goes on to the stream's completion thread, so that waiting never
//     holds up the next enqueue;
//   - an error that enqueueing returns is reported by the next WaitEvent on the stream;
//   - when a wait fails and the device reports a sticky fault (Device::CheckHealth), the
//     server sends a Fault and Serve returns: the process must exit, nothing it holds is
//     worth keeping.
// Ids in requests are gpukitd's; the server keeps the device's ids beside them.
//
//   ExecutorServer server(*device, std::move(socket));
//   absl::Status why = server.Serve();  // returns when gpukitd hangs up or the device faults
//
// Thread safety: Serve is called once, from one thread; it starts and joins the others.
#ifndef GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_SERVER_H_
#define GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_SERVER_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "runtime/base/unix_fd.h"
#include "runtime/device.h"

namespace gpukit {

struct ExecutorServerOptions {
  // Views of gpukitd's device pool (executor::Place) kept at most: past it, every view is
  // dropped at once and made again as work names its place. A view costs the device a table
  // entry, and a pool whose blocks come in many sizes and offsets over time would otherwise
  // grow the table without end.
  size_t most_views = size_t{1} << 16;
};

class ExecutorServer {
 public:
  ExecutorServer(Device& device, ScopedFd socket, ExecutorServerOptions options = {});
  ~ExecutorServer();
  ExecutorServer(const ExecutorServer&) = delete;
  ExecutorServer& operator=(const ExecutorServer&) = delete;

  // Sends the Hello (what the device is), waits for Activate (a standby waits here until
  // gpukitd promotes it), then serves. Returns OK when gpukitd closed the channel, the fault
  // when the device took one (after sending the Fault), other errors as the channel gives
  // them.
  absl::Status Serve();

  // The Hello that says the device could not be created, for gpukit-executor's start-up.
  static void SendStartFailure(int socket, const absl::Status& status);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_SERVER_H_
