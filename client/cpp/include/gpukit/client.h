// libgpukit: the C++ client of gpukitd.
//
// A Client is one session with the daemon: it opens the session when it connects, keeps its
// lease alive from a background thread, and closes it (freeing everything the session
// holds) when destroyed. An Array is a handle to device memory owned by that session; it
// frees the memory when it goes out of scope.
//
//   gpukit::ClientOptions options;             // default socket or $GPUKIT_ADDR
//   options.partition = "inference";           // the tenant is the caller's own
//   auto client = gpukit::Client::Connect(options);
//   if (!client.ok()) { /* client.status() says why */ }
//   auto a = (*client)->FromVector<float>({1, 2, 3, 4}, {2, 2});
//   auto b = (*client)->FromVector<float>({10, 20}, {2});
//   auto c = (*client)->Add(*a, *b);            // broadcasting: [[11, 22], [13, 24]]
//   auto values = c->ToVector<float>();
//
// Custom kernels are CUDA C++ that the daemon compiles (NVRTC, cached) and launches on the
// session's arrays; compiling works on any daemon, launching needs one with a GPU:
//
//   const int n = 1 << 20;  // x and y: float32 Arrays of n elements
//   auto saxpy = (*client)->CompileKernel(R"(
//       extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
//         int i = blockIdx.x * blockDim.x + threadIdx.x;
//         if (i < n) y[i] += a * x[i];
//       })", {"saxpy"});
//   auto device_time = (*client)->LaunchKernel(*saxpy, "", {(n + 255) / 256}, {256}, 0,
//                                              {2.0f, *x, *y, n});
//
// Errors are absl::Status with the daemon's gRPC code and message; RejectReason() gives
// the admission reason ("REASON_DEVICE_MEMORY_EXHAUSTED", ...) of a refused request.
//
// Cost: every call is one gRPC round trip (about 80 to 200 us on a unix socket), except
// Array::Write/Read of plain bytes, which stream 4 MiB chunks, or, from 256 KiB up with a
// daemon on a unix socket, copy through host shared memory (see Array::Write); ops, which
// with a daemon on a unix socket go through its submit socket, a round trip without gRPC
// (about 55-60 us on the H200 host; ClientOptions::use_submit_socket); and frees
// (Array::Free and the destructor), which are queued on the session's Submit stream or submit
// socket and return without waiting for the daemon.
//
// Pipelined submission (ClientOptions::pipeline): ops are queued on the session's Submit
// stream (on gpukitd's submit socket where it offers one, else ComputeService.Submit) and
// return an Array at once, without a round trip (only
// the session's first op waits one, for the stream's handle prefix); its handle is known
// immediately, so it can be the next op's input, and its shape, dtype and size arrive with
// the daemon's answer (the accessors wait for it: usually it is there). The stream has a
// writer thread, which sends the ops queued while it was writing in one request, and a
// reader thread. Errors surface at Client::Sync, which names the op that failed:
//
//   options.pipeline = true;
//   auto client = gpukit::Client::Connect(options);
//   gpukit::Array x = *(*client)->FromVector<float>(values, {16});
//   for (int i = 0; i < 200; ++i) x = *(*client)->Add(x, 1.0f);  // 200 ops, no waits
//   absl::Status status = (*client)->Sync();  // "op #37 (add): ..." if one failed
//   auto result = x.ToVector<float>();
//
// Ordering: ops run in the order written, on the session's device stream. A call that sends
// a unary request naming the session's arrays (Array::Read/Write/Map, LaunchKernel, a unary
// RunOp, the HostMemory copies) first waits until every op already written has the daemon's
// answer (queued on the device), so it runs after them. If one of them was refused, that
// call is a sync point instead: it waits for the ops to run and returns the first failure
// since the previous sync point, naming the op, and the stream takes ops again (Sync does
// not report that failure a second time). A refused op's Array reports the refusal from
// status(), Read and ToVector (its shape is empty), and is not freed.
//
// Thread safety: a Client and its Arrays may be used from several threads at once. Ops
// from several threads run in the order they were queued; Sync answers for every op queued
// before it, from any thread. An Array must not be used after its Client's
// session has been closed (calls then return NOT_FOUND); destroying it afterwards is
// harmless.
#ifndef GPUKIT_CLIENT_CPP_INCLUDE_GPUKIT_CLIENT_H_
#define GPUKIT_CLIENT_CPP_INCLUDE_GPUKIT_CLIENT_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/base/dtype.h"  // gpukit::DType and DTypeOf<T>, shared with the daemon

namespace gpukit {

// A session's resource requests and limits (see docs/api.md, Scheduler). Leave all unset
// for the partition's defaults. The daemon derives the QoS class from them as Kubernetes
// does: Guaranteed when memory and compute have limits equal to their requests, BestEffort
// when nothing is set, Burstable otherwise.
struct ResourceRequirements {
  std::optional<int64_t> memory_request_bytes;
  std::optional<int64_t> memory_limit_bytes;
  std::optional<double> compute_request;  // share of the device, 0..1
  std::optional<double> compute_limit;
};

// How an op waits in its partition's queue.
struct TaskOptions {
  // Higher first among the partition's tasks of the same QoS class; -100 to 100.
  int priority = 0;
  // Longest wait in the queue; past it the call fails with DEADLINE_EXCEEDED. Zero: no limit
  // beyond the call timeout.
  absl::Duration queue_timeout = absl::ZeroDuration();
};

struct ClientOptions {
  // gRPC target: "unix:///path.sock" or "host:port". Empty: $GPUKIT_ADDR, else the
  // default socket (see gpukitd --help).
  std::string address;
  // Tenant the session acts for (1-63 of [A-Za-z0-9._-]). Empty (the default): the
  // caller's own, which gpukitd derives from its uid and groups (docs/security.md); only
  // admins may name another. Over TCP a tenant must be named.
  std::string tenant;
  // Partition; empty: $GPUKIT_PARTITION when set (gpukit-device-plugin sets it in a
  // Kubernetes container), else "default".
  std::string partition;
  // Bearer token for a daemon reached over TCP (sent as "authorization: Bearer <token>";
  // the daemon maps it to a tenant). Empty: $GPUKIT_TOKEN, if set. Not needed on a unix
  // socket, where the daemon knows the caller's uid.
  std::string token;
  // PEM file of the CA that signed the daemon's TLS certificate; set: the TCP channel uses
  // TLS. Empty: a plain channel (a daemon serves one only on loopback with --insecure-tcp).
  std::string tls_ca_file;
  // PEM files of this client's certificate and key, for a daemon that requires client
  // certificates (access.tls.clientCaFile); both or neither, with tls_ca_file.
  std::string tls_cert_file;
  std::string tls_key_file;
  ResourceRequirements resources;
  // Queueing of every op this client runs, unless a call gives its own.
  TaskOptions task;
  // Shown to operators in `gpukitctl sessions`; empty: the program's name.
  std::string client_name;
  // Lease to ask for; zero: the daemon's default. The client renews it at a third of the
  // granted lease while it lives.
  absl::Duration lease = absl::ZeroDuration();
  // Deadline of each call.
  absl::Duration call_timeout = absl::Seconds(60);
  // How long Connect waits for the daemon to accept a connection.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Whether Array::Write, Array::Read and Client::FromBytes may move their bytes through host
  // shared memory instead of gRPC messages (see Array::Write). It only ever applies to a
  // daemon reached over a unix socket; false: always gRPC messages.
  bool use_shared_memory = true;
  // Whether ops (RunOp, Add, Sum, ...) go through the session's Submit stream and return at
  // once, their errors surfacing at Client::Sync (see the top of this file). False: each op
  // is one round trip that returns the result or its error. Frees use the stream either way.
  bool pipeline = false;
  // Whether a synchronous session's ops and frees, and a pipelined session's stream, go
  // through gpukitd's submit socket, a unix socket beside its gRPC socket that carries them
  // without gRPC (the daemon offers it to callers on its unix socket; docs/api.md, "The
  // submit socket"). The ops' results and errors are the same; a synchronous caller's thread
  // polls for the answer for a while instead of sleeping (GPUKIT_CLIENT_SPIN_US, 20 ms by
  // default on hosts of 8 or more cores). False: gRPC, as for a daemon that offers no socket.
  bool use_submit_socket = true;
};

namespace internal {
class SessionState;
class ArrayResult;
}  // namespace internal

class Array;
class HostMemory;

// An array's device memory mapped into this process (Array::Map): a CUdeviceptr of this
// process, on the CUDA device `device_index` (in its primary context).
struct DeviceMapping {
  uint64_t device_pointer = 0;
  int64_t size_bytes = 0;
  int device_index = 0;
};

// An operand of an op: an array or a scalar.
class Operand {
 public:
  Operand(const Array& array) : value_(&array) {}               // NOLINT: implicit by design
  Operand(double value) : value_(value) {}                      // NOLINT
  Operand(float value) : value_(static_cast<double>(value)) {}  // NOLINT
  Operand(int64_t value) : value_(value) {}                     // NOLINT
  Operand(int value) : value_(static_cast<int64_t>(value)) {}   // NOLINT
  const std::variant<const Array*, double, int64_t>& value() const { return value_; }

 private:
  std::variant<const Array*, double, int64_t> value_;
};

// Grid or block dimensions of a kernel launch: Dim3{256} is 256 x 1 x 1.
struct Dim3 {
  uint32_t x = 1;
  uint32_t y = 1;
  uint32_t z = 1;
};

// A kernel the daemon compiled for this client's session (Client::CompileKernel). A plain
// value: copies name the same kernel, and none frees it; the session frees it at
// Client::FreeKernel or when it closes. A session holds a limited number of kernels (the
// daemon's limits.maxKernelsPerSession), so free those no longer needed.
struct Kernel {
  std::string handle;                      // "k-..."
  std::vector<std::string> entries;        // as requested: "saxpy", "scale<float>"
  std::vector<std::string> lowered_names;  // their symbols in the compiled module
  std::string arch;                        // what it was compiled for, e.g. "sm_90"
  std::string origin;                      // "compiled", or a cache: "memory", "disk"
  double compile_ms = 0;                   // NVRTC's time; 0 for a cache hit
  std::string log;                         // NVRTC's warnings, if any
};

// An argument of a kernel launch: an array (passed as its device pointer) or a scalar passed
// by value with exactly the size of its C++ type, which must be the kernel parameter's type
// (write 2.0f for a float parameter, int64_t{n} for a long long one).
class KernelArgument {
 public:
  using Value = std::variant<const Array*, float, double, int32_t, int64_t, uint32_t, uint64_t>;
  KernelArgument(const Array& array) : value_(&array) {}  // NOLINT: implicit by design
  KernelArgument(float value) : value_(value) {}          // NOLINT
  KernelArgument(double value) : value_(value) {}         // NOLINT
  KernelArgument(int32_t value) : value_(value) {}        // NOLINT
  KernelArgument(int64_t value) : value_(value) {}        // NOLINT
  KernelArgument(uint32_t value) : value_(value) {}       // NOLINT
  KernelArgument(uint64_t value) : value_(value) {}       // NOLINT
  const Value& value() const { return value_; }

 private:
  Value value_;
};

// Value of an op attribute (see docs/api.md for each op's attributes).
using Attr = std::variant<int64_t, double, bool, DType, std::vector<int64_t>, std::string>;
using Attrs = std::vector<std::pair<std::string, Attr>>;

class Array {
 public:
  Array(Array&& other) noexcept = default;
  Array& operator=(Array&& other) noexcept;
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;
  // Queues the free of the device memory on the session's Submit stream, without waiting
  // for the daemon (errors are ignored: the session may be gone). An array whose op the
  // daemon refused holds nothing and is not freed.
  ~Array();

  // The handle is known at once, also for the result of a pipelined op that the daemon has
  // not answered yet. shape(), dtype(), size_bytes() and element_count() of such an array
  // wait for the daemon's answer (it comes once the op is queued, not run); for an array
  // whose op was refused they are empty ({}, float32, 0): status() says why.
  const std::string& handle() const { return handle_; }
  const std::vector<int64_t>& shape() const;
  DType dtype() const;
  int64_t size_bytes() const;
  int64_t element_count() const;
  // OK for an array that exists: made by a unary call, or by a pipelined op the daemon
  // accepted; otherwise the refusal, "op #12 (add): ..." with the daemon's code (waits for
  // the answer like shape()). An op that fails later, on the device, shows at Client::Sync.
  absl::Status status() const;

  // Writes exactly size_bytes() bytes from `data`, or reads them into `out`.
  //
  // How the bytes travel: with a daemon reached over a unix socket, a transfer of 256 KiB or
  // more goes through the session's staging region, host shared memory registered with
  // the daemon: the client copies the bytes into it and the daemon copies them into the
  // array (CopyFromHostMemory), or the other way for Read (CopyToHostMemory). Over TCP,
  // below 256 KiB, or with ClientOptions::use_shared_memory false, they stream in gRPC
  // messages of 4 MiB - 64 KiB (Upload, Download). The session registers the region on the
  // first such transfer and re-registers it larger when a transfer needs more (rounded up
  // to a power of two), up to 256 MiB; larger transfers go in 256 MiB pieces. The region
  // stays mapped in this process and gpukitd until the session closes, so a session that
  // moved a large array keeps up to 256 MiB of shared memory; it is one of the session's 64
  // host memory regions. One staged transfer of a session runs at a time: concurrent ones
  // wait for it. If the daemon offers no shared memory to this client (registering answers
  // UNAVAILABLE, FAILED_PRECONDITION or UNIMPLEMENTED: its descriptor channel is out of
  // reach, it has none, or it predates host memory), the session remembers that and uses
  // gRPC messages from then on, without an error (a debug log line).
  //
  // Errors: INVALID_ARGUMENT when `bytes` is not size_bytes(); the daemon's errors
  // (NOT_FOUND, the transfer task's RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ...); those of
  // registering the region (RESOURCE_EXHAUSTED when the session holds 64 regions or the
  // system has no memory for it). A failed Write may have written part of the array. Each
  // 256 MiB piece is one call with its own call_timeout. Cost (docs/benchmarks.md, 256 MiB
  // on a 16-core host): about 16 ms each way through the region, with the client's copies
  // on up to 8 threads, against some 400-500 ms up and 130-140 ms down in gRPC messages;
  // the first transfer of a size also registers the region (a few round trips).
  absl::Status Write(const void* data, int64_t bytes) const;
  absl::Status Read(void* out, int64_t bytes) const;

  // The array's elements; INVALID_ARGUMENT if T does not match dtype().
  template <typename T>
  absl::StatusOr<std::vector<T>> ToVector() const {
    // A refused op's array: Read says so (as a sync point of the stream, see the top).
    if (!status().ok()) return Read(nullptr, 0);
    if (DTypeOf<T>() != dtype()) {
      return absl::InvalidArgumentError(std::string("array has dtype ") +
                                        std::string(DTypeName(dtype())));
    }
    std::vector<T> values(element_count());
    absl::Status status = Read(values.data(), size_bytes());
    if (!status.ok()) return status;
    return values;
  }

  // Writes the whole array from `source` at `source_offset`, or reads it into `target` at
  // `target_offset`: gpukitd copies between the shared memory and the array (a memcpy, or a
  // DMA from pinned memory on a GPU), and no bytes travel in gRPC messages. Errors:
  // OUT_OF_RANGE when the host memory is too small; NOT_FOUND for memory of another session.
  absl::Status Write(const HostMemory& source, int64_t source_offset = 0) const;
  absl::Status Read(const HostMemory& target, int64_t target_offset = 0) const;

  // Maps the array's device memory into this process, zero-copy: the first call has gpukitd
  // export it (a round trip, and a descriptor over the descriptor channel) and maps it; later
  // calls return the same mapping from the client's cache. The pointer stays valid until the
  // Array is freed or the client closes. Work on it is not ordered with gpukitd's: have each
  // side's work complete before the other uses the memory (gpukitd's calls return once done).
  // The array is never spilled from then on. Errors: FAILED_PRECONDITION (no CUDA driver in
  // this process, or a daemon on the CPU backend: use HostMemory), UNAVAILABLE (the
  // descriptor channel cannot be reached), NOT_FOUND.
  absl::StatusOr<DeviceMapping> Map() const;

  // Queues the free on the session's Submit stream and returns without waiting for the
  // daemon: new ops see the array gone at once, and its memory comes back once the ops
  // written before that use it have run. A unary call that allocates (Empty, FromBytes, a
  // RunOp without pipelining) and is refused for memory or the array count (RESOURCE_
  // EXHAUSTED, not QUEUE_FULL) while frees had no answer yet waits for them and tries once
  // more, so freeing to make room works. Errors:
  // only that of the stream itself, in which case it frees with a unary call. A free the
  // daemon refuses shows at Client::Sync. Later calls on this Array return
  // FAILED_PRECONDITION; shape() and dtype() keep working.
  absl::Status Free();

 private:
  friend class Client;
  Array(std::shared_ptr<internal::SessionState> session, std::string handle,
        std::shared_ptr<internal::ArrayResult> result)
      : session_(std::move(session)), handle_(std::move(handle)), result_(std::move(result)) {}

  // Write without waiting for the Submit stream's ops (a new array no op names yet).
  absl::Status WriteNow(const void* data, int64_t bytes) const;

  std::shared_ptr<internal::SessionState> session_;
  std::string handle_;
  // The array's layout, or the refusal of its op; null for a moved-from Array.
  std::shared_ptr<internal::ArrayResult> result_;
};

// Host shared memory registered with gpukitd: memory of this process (a memfd mapped here)
// that gpukitd maps too, so transfers between it and arrays need no bytes in gRPC messages.
// Registering costs a few round trips and a descriptor sent over gpukitd's descriptor
// channel (its unix socket beside the gRPC one), so keep one and reuse it. Needs a daemon on
// the same host, reached over a unix socket. Array::Write and Read of plain bytes use host
// shared memory by themselves (the session's staging region); HostMemory saves their memcpy
// for data that is produced or used in the shared memory itself.
//
//   GPUKIT_ASSIGN_OR_RETURN(gpukit::HostMemory staging, client->RegisterHostMemory(bytes));
//   std::memcpy(staging.data(), input, bytes);  // or fill it in place
//   GPUKIT_RETURN_IF_ERROR(array.Write(staging));
//
// Destroying it unregisters it (the daemon unmaps its side) and unmaps it here.
class HostMemory {
 public:
  HostMemory(HostMemory&& other) noexcept;
  HostMemory& operator=(HostMemory&& other) noexcept;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  ~HostMemory();

  char* data() const { return data_; }
  int64_t size_bytes() const { return size_bytes_; }
  // The daemon's handle of the region ("m-...").
  const std::string& region() const { return region_; }

  // Unregisters and unmaps now; a second call does nothing.
  absl::Status Unregister();

 private:
  friend class Client;
  friend class Array;
  HostMemory(std::shared_ptr<internal::SessionState> session, std::string region, char* data,
             int64_t size_bytes)
      : session_(std::move(session)),
        region_(std::move(region)),
        data_(data),
        size_bytes_(size_bytes) {}

  std::shared_ptr<internal::SessionState> session_;
  std::string region_;
  char* data_ = nullptr;
  int64_t size_bytes_ = 0;
};

// The built-in ops that Client's helpers run (Add runs kAdd, ..., Transpose kTranspose), each
// name spelled here once. Client::RunOp takes any op by name; the daemon's
// ComputeService.ListOps lists them all with their inputs and attributes (docs/api.md,
// "Built-in ops"). tests/integration/array_flow_test.cc checks that it lists each of kAll.
namespace op_names {
inline constexpr absl::string_view kAdd = "add";
inline constexpr absl::string_view kSub = "sub";
inline constexpr absl::string_view kMul = "mul";
inline constexpr absl::string_view kDiv = "div";
inline constexpr absl::string_view kMatmul = "matmul";
inline constexpr absl::string_view kSum = "sum";
inline constexpr absl::string_view kMean = "mean";
inline constexpr absl::string_view kMax = "max";
inline constexpr absl::string_view kMin = "min";
inline constexpr absl::string_view kAstype = "astype";
inline constexpr absl::string_view kReshape = "reshape";
inline constexpr absl::string_view kTranspose = "transpose";
// Every name above.
inline constexpr absl::string_view kAll[] = {kAdd,  kSub, kMul, kDiv,    kMatmul,  kSum,
                                             kMean, kMax, kMin, kAstype, kReshape, kTranspose};
}  // namespace op_names

class Client {
 public:
  // Connects to the daemon and opens a session. UNAVAILABLE if no daemon answers at the
  // address within options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options = {});
  ~Client();  // closes the session

  const std::string& session_id() const;
  // The lease the daemon granted.
  absl::Duration lease() const;
  const std::string& address() const;
  // Where the daemon placed the session, and its QoS class ("Guaranteed", "Burstable" or
  // "BestEffort").
  const std::string& partition() const;
  const std::string& qos_class() const;
  int device_index() const;

  // Array that reads as zeros (the daemon zeroes its memory before handing it over).
  absl::StatusOr<Array> Empty(std::vector<int64_t> shape, DType dtype);
  // Array holding `bytes` bytes of `data` (must equal the shape's size in bytes): Empty,
  // then Array::Write (host shared memory or gRPC messages, as said there).
  absl::StatusOr<Array> FromBytes(const void* data, int64_t bytes, std::vector<int64_t> shape,
                                  DType dtype);
  template <typename T>
  absl::StatusOr<Array> FromVector(const std::vector<T>& values, std::vector<int64_t> shape) {
    return FromBytes(values.data(), static_cast<int64_t>(values.size() * sizeof(T)),
                     std::move(shape), DTypeOf<T>());
  }

  // Device memory of this process as an array of the session, zero-copy: gpukitd maps the
  // memory and its ops read and write it in place; it counts against the session's memory
  // like any other array. `device_pointer` is a CUdeviceptr of this process on the session's
  // GPU, at which `shape` x `dtype` bytes lie within one allocation: from cuMemAlloc
  // (cudaMalloc, PyTorch's default allocator; shared as a legacy CUDA IPC handle) or from
  // cuMemCreate with the POSIX file descriptor handle type (shared as a descriptor over the
  // descriptor channel). Keep the memory allocated until the Array is freed: freeing the
  // Array unmaps it in gpukitd and leaves it to you. Map() on the Array returns
  // `device_pointer`. Work is not ordered between this process and gpukitd: complete yours
  // before handing the array to gpukitd (gpukitd's calls return once its work is done).
  // Errors: FAILED_PRECONDITION (no CUDA driver in this process; a daemon on the CPU
  // backend), INVALID_ARGUMENT (not device memory, a range past its allocation's end, memory
  // that cannot be shared, memory on another GPU than the session's), RESOURCE_EXHAUSTED
  // (the session's memory limit; RejectReason() says which), UNAVAILABLE (no descriptor
  // channel, for VMM memory).
  absl::StatusOr<Array> ImportDeviceMemory(uint64_t device_pointer, std::vector<int64_t> shape,
                                           DType dtype);

  // Any built-in op by name; the result is a new array of this session. With
  // ClientOptions::pipeline the op is written to the Submit stream and the Array returned
  // at once (the first op of a session waits one round trip, for the stream's handle
  // prefix); the daemon's refusal then shows in the Array's status() and at Sync, and this
  // call fails only when the stream itself does (UNAVAILABLE, ...). Otherwise it waits for
  // the daemon's answer and returns the refusal. Add, Sub, ..., Transpose call it.
  absl::StatusOr<Array> RunOp(absl::string_view op, const std::vector<Operand>& inputs,
                              const Attrs& attrs = {});
  absl::StatusOr<Array> RunOp(absl::string_view op, const std::vector<Operand>& inputs,
                              const Attrs& attrs, const TaskOptions& task);

  absl::StatusOr<Array> Add(const Operand& a, const Operand& b) {
    return RunOp(op_names::kAdd, {a, b});
  }
  absl::StatusOr<Array> Sub(const Operand& a, const Operand& b) {
    return RunOp(op_names::kSub, {a, b});
  }
  absl::StatusOr<Array> Mul(const Operand& a, const Operand& b) {
    return RunOp(op_names::kMul, {a, b});
  }
  absl::StatusOr<Array> Div(const Operand& a, const Operand& b) {
    return RunOp(op_names::kDiv, {a, b});
  }
  absl::StatusOr<Array> Matmul(const Array& a, const Array& b) {
    return RunOp(op_names::kMatmul, {a, b});
  }
  // Reductions over everything, or along `axis` when given.
  absl::StatusOr<Array> Sum(const Array& a, std::optional<int64_t> axis = {},
                            bool keepdims = false);
  absl::StatusOr<Array> Mean(const Array& a, std::optional<int64_t> axis = {},
                             bool keepdims = false);
  absl::StatusOr<Array> Max(const Array& a, std::optional<int64_t> axis = {},
                            bool keepdims = false);
  absl::StatusOr<Array> Min(const Array& a, std::optional<int64_t> axis = {},
                            bool keepdims = false);
  // NumPy's meaning, each one op (one round trip):
  // - Matmul (above): [..., m, k] x [..., k, n] -> [..., m, n] with the batch dimensions
  //   broadcast; a 1-d a ([k]) is a row and a 1-d b ([k]) a column, and that dimension is
  //   left out of the result ([k] x [k, n] -> [n], [m, k] x [k] -> [m], [k] x [k] -> []).
  //   INVALID_ARGUMENT for a 0-d operand (NumPy's message), inner dimensions that differ or
  //   batch dimensions that do not broadcast.
  // - Sum, Mean, Max, Min (above): a negative axis counts from the end; keepdims keeps each
  //   reduced axis as a dimension of 1. Sums of integers are int64, means of integers
  //   float32; max and min of an empty extent are INVALID_ARGUMENT.
  // - The overloads below reduce several axes at once, NumPy's tuple of axes: `axes` in any
  //   order, negative ones from the end, none repeated (INVALID_ARGUMENT naming it); an empty
  //   list reduces nothing (each element is its own result, in the op's output dtype), as
  //   NumPy's axis=() does. Sum(a, {0, 2}) picks this overload; for a single axis write
  //   Sum(a, 1) (Sum(a, {1}) is ambiguous).
  absl::StatusOr<Array> Sum(const Array& a, const std::vector<int64_t>& axes,
                            bool keepdims = false);
  absl::StatusOr<Array> Mean(const Array& a, const std::vector<int64_t>& axes,
                             bool keepdims = false);
  absl::StatusOr<Array> Max(const Array& a, const std::vector<int64_t>& axes,
                            bool keepdims = false);
  absl::StatusOr<Array> Min(const Array& a, const std::vector<int64_t>& axes,
                            bool keepdims = false);
  absl::StatusOr<Array> Astype(const Array& a, DType dtype);
  absl::StatusOr<Array> Reshape(const Array& a, std::vector<int64_t> shape);
  // Reverses the axes when `perm` is empty.
  absl::StatusOr<Array> Transpose(const Array& a, std::vector<int64_t> perm = {});

  // Custom kernels. CompileKernel compiles CUDA C++ `source` for the session's device and
  // exports `entries`: extern "C" kernel names or template name expressions
  // ("scale<float>"). `options` are NVRTC options from the daemon's allow-list ("-DN=4",
  // "--use_fast_math"); the architecture comes from the device. Errors: INVALID_ARGUMENT
  // (the message holds NVRTC's log for source that does not compile; a refused option or
  // entry name), FAILED_PRECONDITION (the daemon has no NVRTC), RESOURCE_EXHAUSTED (the
  // session holds its limit of kernels), DEADLINE_EXCEEDED (compiling took too long).
  // A compile the daemon has cached costs one round trip. The source may #include only
  // `headers` ((name, text) pairs: #include "name" finds text); the daemon compiles where no
  // file of its host is visible. A long compile error's message holds the start of NVRTC's
  // log; LastCompileLog returns all of it.
  absl::StatusOr<Kernel> CompileKernel(
      const std::string& source, std::vector<std::string> entries,
      std::vector<std::string> options = {},
      const std::vector<std::pair<std::string, std::string>>& headers = {});
  // NVRTC's whole log of this session's last CompileKernel (failed or not; at most 1 MiB).
  absl::StatusOr<std::string> LastCompileLog();
  // Launches `entry` of `kernel` ("" for a kernel's only entry) over `grid` blocks of
  // `block` threads with `shared_memory_bytes` of dynamic shared memory, as a task of the
  // session's partition (with ClientOptions::task, or `task`), and waits for it to run.
  // Returns the device time the kernel took. Errors: INVALID_ARGUMENT (grid or block
  // beyond the device's limits; arguments that do not match the kernel's parameters),
  // NOT_FOUND (a kernel, entry or array the session does not have), FAILED_PRECONDITION
  // (a daemon on the CPU backend: "kernel launch requires a GPU; ..."), and RunOp's queue
  // errors.
  absl::StatusOr<absl::Duration> LaunchKernel(const Kernel& kernel, absl::string_view entry,
                                              Dim3 grid, Dim3 block, uint32_t shared_memory_bytes,
                                              const std::vector<KernelArgument>& args);
  absl::StatusOr<absl::Duration> LaunchKernel(const Kernel& kernel, absl::string_view entry,
                                              Dim3 grid, Dim3 block, uint32_t shared_memory_bytes,
                                              const std::vector<KernelArgument>& args,
                                              const TaskOptions& task);
  // Frees the kernel in the daemon (its module on the device, if it was launched). NOT_FOUND
  // if the session no longer has it.
  absl::Status FreeKernel(const Kernel& kernel);

  // Host shared memory of `bytes` (> 0), registered with the daemon (see HostMemory).
  // Errors: FAILED_PRECONDITION (the daemon listens on TCP only), UNAVAILABLE (its
  // descriptor channel cannot be reached: a daemon on another host), INVALID_ARGUMENT (a
  // size above limits.maxArraySize), RESOURCE_EXHAUSTED (the session holds 64 regions,
  // counting the staging region of Array::Write/Read once it exists, or the system has no
  // memory for it).
  absl::StatusOr<HostMemory> RegisterHostMemory(int64_t bytes);

  // Sends a sync point on the session's Submit stream and waits for its answer, i.e. until
  // every op and free written before it (from any thread) has run on the device. Returns
  // the first op that failed since the previous sync point (refused, or failed on the
  // device) with its code and "op #12 (add): <the daemon's message>" (RejectReason() gives
  // its reason); the ops after a failed one up to the sync point were not run (ABORTED "not
  // run: op #12 (add) failed before it"). After it the stream takes ops again. A call that
  // returned a failure of the stream (see the top of this file) was a sync point too. OK at once
  // when this session never used the stream. Cost: a round trip plus the queued work. Also the way
  // to see device errors of pipelined ops.
  absl::Status Sync();

  // Renews the lease now (the background thread does this by itself).
  absl::Status KeepAlive();
  // Closes the session; its arrays become invalid. Called by the destructor. The Submit
  // stream, if open, is half-closed first and its end awaited (the ops written run first).
  absl::Status Close();

 private:
  explicit Client(std::shared_ptr<internal::SessionState> state) : state_(std::move(state)) {}
  absl::StatusOr<Array> Reduce(absl::string_view op, const Array& a, std::optional<int64_t> axis,
                               bool keepdims);
  absl::StatusOr<Array> ReduceAxes(absl::string_view op, const Array& a,
                                   const std::vector<int64_t>& axes, bool keepdims);
  std::shared_ptr<internal::SessionState> state_;
};

// The admission reason of a refused request ("REASON_DEVICE_MEMORY_EXHAUSTED", ...), or
// "" when the status carries none.
std::string RejectReason(const absl::Status& status);

}  // namespace gpukit

#endif  // GPUKIT_CLIENT_CPP_INCLUDE_GPUKIT_CLIENT_H_
