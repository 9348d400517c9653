#include "runtime/base/fd_channel_protocol.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpukit {
namespace {

constexpr char kMagic[4] = {'G', 'K', 'F', 'D'};
constexpr uint32_t kVersion = 1;
constexpr size_t kRequestBytes = 4 + 4 + 4 + kFdChannelTokenBytes;

void PutU32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint32_t GetU32(absl::string_view bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  }
  return value;
}

}  // namespace

std::string EncodeFdChannelRequest(const FdChannelRequest& request) {
  std::string out(kMagic, sizeof(kMagic));
  PutU32(out, kVersion);
  PutU32(out, static_cast<uint32_t>(request.op));
  std::string token = request.token.substr(0, kFdChannelTokenBytes);
  token.resize(kFdChannelTokenBytes, '\0');
  out += token;
  return out;
}

absl::StatusOr<FdChannelRequest> DecodeFdChannelRequest(absl::string_view bytes) {
  if (bytes.size() != kRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor channel request of ", bytes.size(),
                                                   " bytes; expected ", kRequestBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("descriptor channel request without the GKFD magic");
  }
  if (const uint32_t version = GetU32(bytes, 4); version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor channel version ", version, "; this gpukitd speaks ", kVersion));
  }
  FdChannelRequest request;
  const uint32_t op = GetU32(bytes, 8);
  if (op != static_cast<uint32_t>(FdChannelOp::kDeliver) &&
      op != static_cast<uint32_t>(FdChannelOp::kFetch)) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor channel op ", op, " is unknown"));
  }
  request.op = static_cast<FdChannelOp>(op);
  request.token = std::string(bytes.substr(12, kFdChannelTokenBytes));
  return request;
}

std::string EncodeFdChannelReply(const absl::Status& status) {
  std::string out;
  PutU32(out, static_cast<uint32_t>(status.code()));
  out += std::string(status.message().substr(0, kFdChannelMaxReplyBytes - 4));
  return out;
}

absl::Status DecodeFdChannelReply(absl::string_view bytes) {
  if (bytes.size() < 4) return absl::InternalError("descriptor channel reply too short");
  const uint32_t code = GetU32(bytes, 0);
  if (code == 0) return absl::OkStatus();
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InternalError(absl::StrCat("descriptor channel reply with code ", code));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), std::string(bytes.substr(4)));
}

}  // namespace gpukit
