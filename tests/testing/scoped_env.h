// ScopedEnv: sets or unsets an environment variable for one scope and restores it after.
//
//   {
//     ScopedEnv xdg("XDG_RUNTIME_DIR", "/tmp/test-runtime");  // or std::nullopt to unset
//     EXPECT_EQ(DefaultSocketPath(), "/tmp/test-runtime/gpukit/gpukitd.sock");
//   }  // XDG_RUNTIME_DIR is back to what it was (set or unset)
//
// Thread safety: the environment is process-wide; use only in single-threaded test code.
#ifndef GPUKIT_TESTS_TESTING_SCOPED_ENV_H_
#define GPUKIT_TESTS_TESTING_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace gpukit::testing {

class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str()); old != nullptr) old_ = old;
    if (value.has_value()) {
      setenv(name_.c_str(), value->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_.c_str(), old_->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  const std::string name_;
  std::optional<std::string> old_;
};

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_TESTING_SCOPED_ENV_H_
