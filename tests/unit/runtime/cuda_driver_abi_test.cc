// Every entry point CudaDriver resolves keeps one signature across the API versions it may be
// resolved for (12.0 up to the headers' CUDA_VERSION). cuGetProcAddress hands out the newest
// variant for the version asked; if that variant takes other parameters than the typed
// pointer gpukit calls it through (cuCtxSynchronize in 13.0 gained a context argument), the
// call passes garbage. This reads the toolkit's cudaTypedefs.h, which spells out each
// variant as PFN_<name>_v<version>, and needs no GPU.
#include <cuda.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cuda/cuda_driver.h"

namespace gpukit {
namespace {

// The oldest API version CudaDriver accepts (a driver older than 12.0 is refused).
constexpr int kOldestApiVersion = 12000;

std::vector<std::string> ResolvedEntryPoints() {
#define GPUKIT_NAME_(name) #name,
  return {GPUKIT_CUDA_DRIVER_FUNCTIONS(GPUKIT_NAME_, GPUKIT_NAME_)};
#undef GPUKIT_NAME_
}

TEST(CudaDriverAbiTest, NoEntryPointChangesItsSignatureBetweenTheVersionsItIsResolvedFor) {
  const std::string path = std::string(GPUKIT_CUDA_INCLUDE_DIR) + "/cudaTypedefs.h";
  std::ifstream file(path);
  ASSERT_TRUE(file) << "cannot read " << path;
  std::stringstream text;
  text << file.rdbuf();
  const std::string typedefs = text.str();

  int checked = 0;
  for (const std::string& name : ResolvedEntryPoints()) {
    // name -> its variants: version -> parameter list.
    std::map<int, std::string> variants;
    const std::regex pattern("PFN_" + name + "_v([0-9]+)\\)\\(([^)]*)\\)");
    for (auto it = std::sregex_iterator(typedefs.begin(), typedefs.end(), pattern);
         it != std::sregex_iterator(); ++it) {
      variants[std::stoi((*it)[1].str())] = (*it)[2].str();
    }
    if (variants.empty()) continue;  // a _v2 name of cuda.h's, listed under its base name
    ++checked;
    // The variant in force at the oldest version, and every one after it up to the headers'.
    auto in_force = variants.upper_bound(kOldestApiVersion);
    if (in_force != variants.begin()) --in_force;
    for (auto it = in_force; it != variants.end() && it->first <= CUDA_VERSION; ++it) {
      EXPECT_EQ(it->second, in_force->second)
          << name << " takes (" << it->second << ") from API version " << it->first << " but ("
          << in_force->second << ") at " << in_force->first
          << ": CudaDriver's typed pointer cannot serve both";
    }
  }
  EXPECT_GT(checked, 20) << "cudaTypedefs.h did not list the entry points as expected";
}

}  // namespace
}  // namespace gpukit
