// ComputeService.Submit: a session's pipelined ops (compute.proto has the contract), on
// gRPC's callback API.
//
// An open stream holds no thread of gRPC's synchronous pool (capped at server.maxThreads:
// hundreds of idle streams there would starve the unary calls). It is a reactor
// (array_streams.h says why and how) plus one std::thread of its own, the stream's worker:
// processing a request may block (admission in the partition's queue, the in-flight cap,
// a sync point waiting for the device), which neither gRPC's few callback threads nor the
// shared WorkerPool may do for long. OnReadDone hands each request to the worker; it runs the
// request's ops in order through the session's OpPipeline (op_pipeline.h), their work held
// in batches for the device (burst_batcher.h), builds one
// SubmitResponse of their OpResults (with `synced` and `error` when the request ends with a
// sync point, after OpPipeline::Sync) and queues it for writing; one write is outstanding at
// a time, and OnWriteDone starts the next.
//
// Responses: the first is the stream's `handle_prefix` alone, sent once the first request
// named an open session the caller may use; then one per request that carries ops or a
// sync point (a request with neither gets none).
//
// Memory: a stream keeps the request and response messages it is done with (up to a few of
// each) and reads or builds the next ones into them, so that a long stream reuses their
// parts (ops, results, strings) instead of allocating and freeing them for every request.
//
// Flow control: the reactor reads ahead at most kMaxQueuedRequests requests and the worker
// leaves requests unread while kMaxQueuedResponses answers wait to be sent, so a client that
// sends faster than the device runs (OpPipeline caps the ops in flight), or that does not
// read, is held by gRPC's flow control, and the daemon holds a bounded amount per stream.
//
// End: on the client's half-close the worker answers what it read, waits for the ops to
// run and finishes OK. On an error of the stream itself (see compute.proto) it stops,
// waits for the ops queued to run and finishes with that error. When the client goes away
// (cancelled, or a write fails) it stops reading and answering, waits for the ops queued
// to run (their tasks end, their pins drop; their results stay in the session) and
// finishes. OnDone, gRPC's last call, joins the worker and deletes the reactor.
//
// Thread safety: the reactions and the worker share the read and write queues under the
// reactor's mutex; the OpPipeline is the worker's alone.
#ifndef GPUKIT_DAEMON_SERVICE_SUBMIT_STREAM_H_
#define GPUKIT_DAEMON_SERVICE_SUBMIT_STREAM_H_

#include "daemon/core/core.h"
#include "daemon/service/access_guard.h"
#include "daemon/service/submit_session.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::service {

// Requests read ahead of the worker, and answers waiting to be sent, per stream.
inline constexpr int kMaxQueuedRequests = 4;
inline constexpr int kMaxQueuedResponses = 4;

// A new Submit stream's reactor; gRPC owns it (ComputeServiceImpl::Submit returns it).
grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>* NewSubmitReactor(
    Core& core, const AccessGuard& guard, grpc::CallbackServerContext* context);

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_SUBMIT_STREAM_H_
