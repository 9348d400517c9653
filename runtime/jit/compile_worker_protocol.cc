#include "runtime/jit/compile_worker_protocol.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include <sys/socket.h>

namespace gpukit {
namespace {

class Writer {
 public:
  void U32(uint32_t value) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  void U64(uint64_t value) {
    U32(static_cast<uint32_t>(value));
    U32(static_cast<uint32_t>(value >> 32));
  }
  void Bytes(absl::string_view bytes) {
    U32(static_cast<uint32_t>(bytes.size()));
    out_.append(bytes.data(), bytes.size());
  }
  void List(const std::vector<std::string>& items) {
    U32(static_cast<uint32_t>(items.size()));
    for (const std::string& item : items) Bytes(item);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what Writer wrote; every read checks the bytes left, so a short or forged frame
// fails with INVALID_ARGUMENT instead of reading past its end.
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  absl::StatusOr<uint32_t> U32() {
    if (in_.size() - pos_ < 4) return Truncated();
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      value |= static_cast<uint32_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += 4;
    return value;
  }
  absl::StatusOr<uint64_t> U64() {
    GPUKIT_ASSIGN_OR_RETURN(uint32_t low, U32());
    GPUKIT_ASSIGN_OR_RETURN(uint32_t high, U32());
    return (static_cast<uint64_t>(high) << 32) | low;
  }
  absl::StatusOr<std::string> Bytes() {
    GPUKIT_ASSIGN_OR_RETURN(uint32_t size, U32());
    if (in_.size() - pos_ < size) return Truncated();
    std::string value = in_.substr(pos_, size);
    pos_ += size;
    return value;
  }
  absl::StatusOr<std::vector<std::string>> List() {
    GPUKIT_ASSIGN_OR_RETURN(uint32_t count, U32());
    std::vector<std::string> items;
    for (uint32_t i = 0; i < count; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(std::string item, Bytes());
      items.push_back(std::move(item));
    }
    return items;
  }
  absl::Status Done() const {
    return pos_ == in_.size() ? absl::OkStatus()
                              : absl::InvalidArgumentError("compile worker frame has extra bytes");
  }

 private:
  static absl::Status Truncated() {
    return absl::InvalidArgumentError("compile worker frame is truncated");
  }
  const std::string& in_;
  size_t pos_ = 0;
};

absl::Duration ToDuration(uint64_t us) {
  return us == UINT64_MAX ? absl::InfiniteDuration() : absl::Microseconds(static_cast<int64_t>(us));
}
// Reads a status field into `out`. (Not a StatusOr<absl::Status>: that would take an error
// returned from here as its value.)
absl::Status ReadStatus(Reader& r, absl::Status& out) {
  GPUKIT_ASSIGN_OR_RETURN(uint32_t code, r.U32());
  GPUKIT_ASSIGN_OR_RETURN(std::string message, r.Bytes());
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(absl::StrCat("compile worker sent status code ", code));
  }
  out = absl::Status(static_cast<absl::StatusCode>(code), message);
  return absl::OkStatus();
}

uint64_t FromDuration(absl::Duration duration) {
  return duration == absl::InfiniteDuration() ? UINT64_MAX
                                              : static_cast<uint64_t>(absl::ToInt64Microseconds(
                                                    std::max(duration, absl::ZeroDuration())));
}

}  // namespace

std::string EncodeWorkerHello(const WorkerHello& hello) {
  Writer w;
  w.U32(static_cast<uint32_t>(hello.status.code()));
  w.Bytes(hello.status.message());
  w.U32(static_cast<uint32_t>(hello.nvrtc_major));
  w.U32(static_cast<uint32_t>(hello.nvrtc_minor));
  w.Bytes(hello.library_path);
  w.U32(static_cast<uint32_t>(hello.supported_archs.size()));
  for (int arch : hello.supported_archs) w.U32(static_cast<uint32_t>(arch));
  return w.Take();
}

absl::StatusOr<WorkerHello> DecodeWorkerHello(const std::string& frame) {
  Reader r(frame);
  WorkerHello hello;
  GPUKIT_RETURN_IF_ERROR(ReadStatus(r, hello.status));
  GPUKIT_ASSIGN_OR_RETURN(uint32_t major, r.U32());
  GPUKIT_ASSIGN_OR_RETURN(uint32_t minor, r.U32());
  hello.nvrtc_major = static_cast<int>(major);
  hello.nvrtc_minor = static_cast<int>(minor);
  GPUKIT_ASSIGN_OR_RETURN(hello.library_path, r.Bytes());
  GPUKIT_ASSIGN_OR_RETURN(uint32_t count, r.U32());
  for (uint32_t i = 0; i < count; ++i) {
    GPUKIT_ASSIGN_OR_RETURN(uint32_t arch, r.U32());
    hello.supported_archs.push_back(static_cast<int>(arch));
  }
  GPUKIT_RETURN_IF_ERROR(r.Done());
  return hello;
}

std::string EncodeWorkerRequest(const NvrtcInput& input) {
  Writer w;
  w.Bytes(input.source);
  w.U32(static_cast<uint32_t>(input.headers.size()));
  for (const auto& [name, text] : input.headers) {
    w.Bytes(name);
    w.Bytes(text);
  }
  w.List(input.name_expressions);
  w.List(input.options);
  w.Bytes(input.arch);
  w.U64(FromDuration(input.time_budget));
  return w.Take();
}

absl::StatusOr<NvrtcInput> DecodeWorkerRequest(const std::string& frame) {
  Reader r(frame);
  NvrtcInput input;
  GPUKIT_ASSIGN_OR_RETURN(input.source, r.Bytes());
  GPUKIT_ASSIGN_OR_RETURN(uint32_t headers, r.U32());
  for (uint32_t i = 0; i < headers; ++i) {
    GPUKIT_ASSIGN_OR_RETURN(std::string name, r.Bytes());
    GPUKIT_ASSIGN_OR_RETURN(std::string text, r.Bytes());
    input.headers.emplace_back(std::move(name), std::move(text));
  }
  GPUKIT_ASSIGN_OR_RETURN(input.name_expressions, r.List());
  GPUKIT_ASSIGN_OR_RETURN(input.options, r.List());
  GPUKIT_ASSIGN_OR_RETURN(input.arch, r.Bytes());
  GPUKIT_ASSIGN_OR_RETURN(uint64_t budget_us, r.U64());
  input.time_budget = ToDuration(budget_us);
  GPUKIT_RETURN_IF_ERROR(r.Done());
  return input;
}

std::string EncodeWorkerResponse(const WorkerResponse& response) {
  Writer w;
  w.U32(static_cast<uint32_t>(response.status.code()));
  w.Bytes(response.status.message());
  w.Bytes(response.output.cubin);
  w.Bytes(response.output.ptx);
  w.List(response.output.lowered_names);
  w.Bytes(response.output.log);
  w.U64(FromDuration(response.output.compile_time));
  return w.Take();
}

absl::StatusOr<WorkerResponse> DecodeWorkerResponse(const std::string& frame) {
  Reader r(frame);
  WorkerResponse response;
  GPUKIT_RETURN_IF_ERROR(ReadStatus(r, response.status));
  GPUKIT_ASSIGN_OR_RETURN(response.output.cubin, r.Bytes());
  GPUKIT_ASSIGN_OR_RETURN(response.output.ptx, r.Bytes());
  GPUKIT_ASSIGN_OR_RETURN(response.output.lowered_names, r.List());
  GPUKIT_ASSIGN_OR_RETURN(response.output.log, r.Bytes());
  GPUKIT_ASSIGN_OR_RETURN(uint64_t compile_us, r.U64());
  response.output.compile_time = ToDuration(compile_us);
  GPUKIT_RETURN_IF_ERROR(r.Done());
  return response;
}

absl::Status WriteFrame(int fd, const std::string& payload) {
  std::string frame;
  frame.reserve(payload.size() + 4);
  const auto size = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  frame += payload;
  size_t written = 0;
  while (written < frame.size()) {
    // send, not write: a worker that died must not raise SIGPIPE in gpukitd.
    const ssize_t n = send(fd, frame.data() + written, frame.size() - written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("compile worker socket: write failed: ", std::strerror(errno)));
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

namespace {

// Reads exactly `size` bytes into `out`, waiting until `deadline`.
absl::Status ReadExactly(int fd, char* out, size_t size, absl::Time deadline) {
  size_t done = 0;
  while (done < size) {
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError("compile worker did not answer in time");
      }
      pollfd pfd{fd, POLLIN, 0};
      const int ready = poll(&pfd, 1,
                             static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1,
                                                                int64_t{1} << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) continue;  // the loop's head reports the deadline
    }
    const ssize_t n = read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) return absl::UnavailableError("compile worker closed its socket");
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFrame(int fd, int64_t max_bytes, absl::Time deadline) {
  unsigned char header[4];
  GPUKIT_RETURN_IF_ERROR(ReadExactly(fd, reinterpret_cast<char*>(header), 4, deadline));
  const uint32_t size = static_cast<uint32_t>(header[0]) | (static_cast<uint32_t>(header[1]) << 8) |
                        (static_cast<uint32_t>(header[2]) << 16) |
                        (static_cast<uint32_t>(header[3]) << 24);
  if (static_cast<int64_t>(size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile worker frame of ", size, " bytes; the limit is ", max_bytes));
  }
  std::string payload(size, '\0');
  GPUKIT_RETURN_IF_ERROR(ReadExactly(fd, payload.data(), size, deadline));
  return payload;
}

}  // namespace gpukit
