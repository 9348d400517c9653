// ArrayService's streaming RPCs, Upload and Download, on gRPC's callback API.
//
// On the synchronous API an open stream held one of gpukitd's threads for as long as it was
// open, busy or not: 3000 idle upload streams held 3017 threads. Here a stream is a reactor,
// an object that gRPC calls when the stream's next message has arrived (Upload) or its last
// one has been sent (Download); between those calls a stream costs its reactor's memory
// and no thread. ArrayServiceImpl (services.h) returns a new reactor from its Upload and
// Download methods; gRPC owns it from then on, and it deletes itself when gRPC is done with
// it (OnDone).
//
//   grpc::ServerReadReactor<v1::UploadRequest>* Upload(grpc::CallbackServerContext* context,
//                                                      v1::UploadResponse* response) override {
//     return NewUploadReactor(core_, guard_, workers_, context, response);
//   }
//
// Where the work runs: reactions run on gRPC's callback threads, which are few (two on a
// 2-core host) and shared by every stream of the daemon and the health service, so a
// reaction must not block. It checks the message, resolves the header (a lookup) and
// returns. A chunk's write into the array (Upload) or read out of it (Download) is a task of
// the session's partition that waits for admission in the partition's queue, for as long as
// the partition is busy, and for one copy of at most kMaxChunkBytes (4 MiB): that runs on a
// WorkerPool thread (worker_pool.h), which resumes the stream when it is done. Measured
// before this was so, on the 2-core build machine: two uploads whose chunks waited in a
// queue stalled every other stream of the daemon. The wait ends at the call's deadline or
// when the client goes away. Nothing waits for the client.
//
// Leases: every message of a stream counts as activity on its session, as a unary request
// does: the header (Upload's first message, or the Download request) and each chunk renew
// the lease (Core's calls do). An open stream on which nothing moves does not: a client that
// holds an upload open past its lease without sending loses the session, and the stream then
// fails with NOT_FOUND at its next chunk or at its end, never OK (a client that needs longer
// pauses sends KeepAlive, as libgpukit's background thread does).
//
// Thread safety: gRPC runs one reaction of a stream at a time (each reactor has at most one
// read or write outstanding), so a reactor's state needs no lock. The Core is thread-safe.
#ifndef GPUKIT_DAEMON_SERVICE_ARRAY_STREAMS_H_
#define GPUKIT_DAEMON_SERVICE_ARRAY_STREAMS_H_

#include "daemon/core/core.h"
#include "daemon/service/access_guard.h"
#include "daemon/service/worker_pool.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::service {

// ArrayService.Upload: the first message carries the header (session and array), each
// later one a chunk, in order from offset 0; the stream ends OK when the client half-closes
// having written exactly the array's bytes and the session still holds the array then.
// Errors: INVALID_ARGUMENT (an empty stream, a first message without a header, a later one
// without a chunk, chunks out of order or above kMaxChunkBytes, past the array's end, or
// fewer bytes than the array has), NOT_FOUND (session or array unknown, or the session ended
// before the stream did: its bytes went into an array that is freed), and the Core's (the
// queue's RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED, ...).
// `workers` runs the chunks' writes.
// Both check the request's strings and who may name its session (`guard`) first.
grpc::ServerReadReactor<v1::UploadRequest>* NewUploadReactor(Core& core, const AccessGuard& guard,
                                                             WorkerPool& workers,
                                                             grpc::CallbackServerContext* context,
                                                             v1::UploadResponse* response);

// ArrayService.Download: the array's bytes as chunks of at most request.chunk_bytes (0 or
// above kMaxChunkBytes: kMaxChunkBytes), the first carrying the array's description; an
// empty array sends one message with an empty chunk. Each chunk is read when the previous
// one has been sent, so a slow reader holds one chunk in gpukitd, not the array. Errors:
// INVALID_ARGUMENT (chunk_bytes < 0), NOT_FOUND (session or array unknown, or the session
// ended while the stream ran), CANCELLED (the client stopped reading), and the Core's.
// `workers` runs the chunks' reads.
grpc::ServerWriteReactor<v1::DownloadResponse>* NewDownloadReactor(
    Core& core, const AccessGuard& guard, WorkerPool& workers,
    grpc::CallbackServerContext* context, const v1::DownloadRequest& request);

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_ARRAY_STREAMS_H_
