#include "daemon/session/principal.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpukit {

std::string Principal::Describe() const {
  switch (kind) {
    case Kind::kLocal:
      return absl::StrCat("uid=", uid, " gid=", gid, " pid=", pid);
    case Kind::kNetwork:
      return absl::StrCat("tcp peer=", absl::CHexEscape(address),
                          token_sha256.empty() ? "" : " token=", token_sha256.substr(0, 12));
    case Kind::kUnidentified:
      break;
  }
  return absl::StrCat("unidentified peer=", absl::CHexEscape(address));
}

}  // namespace gpukit
