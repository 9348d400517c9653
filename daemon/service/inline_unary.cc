#include "daemon/service/inline_unary.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace gpukit::service {

int DefaultInlineUnaryLimit() {
  if (const char* text = std::getenv("GPUKIT_INLINE_UNARY")) return std::max(0, std::atoi(text));
  return static_cast<int>(std::thread::hardware_concurrency() / 8);
}

}  // namespace gpukit::service
