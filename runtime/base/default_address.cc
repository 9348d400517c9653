#include "runtime/base/default_address.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace gpukit {

std::string DefaultSocketPath() {
  if (access("/run/gpukit", W_OK) == 0) return "/run/gpukit/gpukitd.sock";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/gpukit/gpukitd.sock");
  }
  return absl::StrCat("/tmp/gpukit-", getuid(), "/gpukitd.sock");
}

std::string DefaultListenAddress() { return absl::StrCat("unix://", DefaultSocketPath()); }

std::string DefaultClientAddress() {
  if (const char* addr = std::getenv("GPUKIT_ADDR"); addr != nullptr && *addr != '\0') {
    return addr;
  }
  // A client may not be able to write /run/gpukit although a system daemon listens there,
  // so it takes the first candidate whose socket exists before applying the daemon's rule.
  std::string candidates[3] = {"/run/gpukit/gpukitd.sock", "",
                               absl::StrCat("/tmp/gpukit-", getuid(), "/gpukitd.sock")};
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    candidates[1] = absl::StrCat(xdg, "/gpukit/gpukitd.sock");
  }
  for (const std::string& path : candidates) {
    if (!path.empty() && access(path.c_str(), F_OK) == 0) return absl::StrCat("unix://", path);
  }
  return DefaultListenAddress();
}

}  // namespace gpukit
