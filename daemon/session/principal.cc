#include "daemon/session/principal.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpukit {

std::string Principal::Describe() const {
  switch (kind) {
    case Kind::kLocal:
      return absl::StrCat("uid=", uid, " gid=", gid, " pid=", pid);
    case Kind::kNetwork:
      return absl::StrCat("tcp peer=", absl::CHexEscape(address));
    case Kind::kUnidentified:
      break;
  }
  return absl::StrCat("unidentified peer=", absl::CHexEscape(address));
}

}  // namespace gpukit
