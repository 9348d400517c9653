// gmock matchers and assertion macros for absl::Status and absl::StatusOr<T>.
//
// Debian's abseil (20220623) ships no status matchers, so tests share these. Each matcher
// accepts an absl::Status or any absl::StatusOr<T>:
//
//   EXPECT_THAT(device.Free(BufferId{42}), StatusIs(absl::StatusCode::kNotFound));
//   EXPECT_THAT(core.CreateArray(id, desc),
//               StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shape[1] = -3")));
//   EXPECT_THAT(ledger.Reserve(1, limits, 0), IsOk());
//   EXPECT_THAT(ParseBytes("1KiB"), IsOkAndHolds(1024));
//   GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device.Allocate(64));
//
// Thread safety: matchers are values; use them from the test's thread.
#ifndef GPUKIT_TESTS_TESTING_STATUS_MATCHERS_H_
#define GPUKIT_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit::testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches a Status (or StatusOr's status) by code and, through a string matcher, message.
template <typename StatusType>
class StatusIsMatcherImpl : public ::testing::MatcherInterface<StatusType> {
 public:
  StatusIsMatcherImpl(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "has status code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }

  void DescribeNegationTo(std::ostream* os) const override {
    *os << "does not have status code " << absl::StatusCodeToString(code_)
        << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

  bool MatchAndExplain(StatusType value, ::testing::MatchResultListener* listener) const override {
    const absl::Status& status = GetStatus(value);
    *listener << "whose status is " << status;
    if (status.code() != code_) return false;
    return message_.MatchAndExplain(std::string(status.message()), listener);
  }

 private:
  const absl::StatusCode code_;
  const ::testing::Matcher<const std::string&> message_;
};

// Polymorphic wrapper: converts to a Matcher of whatever status type it is used on.
class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename StatusType>
  operator ::testing::Matcher<StatusType>() const {  // NOLINT: implicit by design
    return ::testing::Matcher<StatusType>(
        new StatusIsMatcherImpl<const StatusType&>(code_, message_));
  }

 private:
  const absl::StatusCode code_;
  const ::testing::Matcher<const std::string&> message_;
};

// Matches an OK StatusOr whose value matches an inner matcher.
template <typename StatusOrType>
class IsOkAndHoldsMatcherImpl : public ::testing::MatcherInterface<StatusOrType> {
 public:
  using value_type = typename std::decay_t<StatusOrType>::value_type;

  template <typename InnerMatcher>
  explicit IsOkAndHoldsMatcherImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const value_type&>(std::forward<InnerMatcher>(inner))) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and has a value that ";
    inner_.DescribeTo(os);
  }

  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK or has a value that ";
    inner_.DescribeNegationTo(os);
  }

  bool MatchAndExplain(StatusOrType actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) {
      *listener << "which has status " << actual.status();
      return false;
    }
    ::testing::StringMatchResultListener inner_listener;
    const bool matches = inner_.MatchAndExplain(*actual, &inner_listener);
    const std::string explanation = inner_listener.str();
    if (!explanation.empty()) *listener << "which contains a value " << explanation;
    return matches;
  }

 private:
  const ::testing::Matcher<const value_type&> inner_;
};

template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {  // NOLINT: implicit by design
    return ::testing::Matcher<StatusOrType>(
        new IsOkAndHoldsMatcherImpl<const StatusOrType&>(inner_));
  }

 private:
  const InnerMatcher inner_;
};

}  // namespace internal

// The StatusOr is OK and its value matches `inner` (a matcher or a value for equality):
//   EXPECT_THAT(device.BufferBytes(buffer), IsOkAndHolds(1001));
template <typename InnerMatcher>
internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(InnerMatcher&& inner) {
  return internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

// The status has `code`; with a second argument, its message also matches `message`
// (a string matcher such as HasSubstr("...") or a literal string for equality).
inline internal::StatusIsMatcher StatusIs(absl::StatusCode code) {
  return internal::StatusIsMatcher(code, ::testing::_);
}
template <typename MessageMatcher>
internal::StatusIsMatcher StatusIs(absl::StatusCode code, MessageMatcher&& message) {
  return internal::StatusIsMatcher(
      code, ::testing::MatcherCast<const std::string&>(std::forward<MessageMatcher>(message)));
}

// The status is OK.
inline internal::StatusIsMatcher IsOk() { return StatusIs(absl::StatusCode::kOk); }

}  // namespace gpukit::testing

#define GPUKIT_TESTING_CONCAT_INNER_(a, b) a##b
#define GPUKIT_TESTING_CONCAT_(a, b) GPUKIT_TESTING_CONCAT_INNER_(a, b)

// Asserts that `rexpr` (an absl::StatusOr<T>) is OK and moves its value into `lhs`, which may
// be a declaration (`BufferId buffer`) or an existing variable. Fails the test (returning
// from it) with the status otherwise. Usable only where ASSERT_* is (void functions).
#define GPUKIT_ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  GPUKIT_ASSERT_OK_AND_ASSIGN_IMPL_(GPUKIT_TESTING_CONCAT_(gpukit_statusor_, __LINE__), lhs, rexpr)

#define GPUKIT_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                      \
  ASSERT_TRUE(statusor.ok()) << statusor.status();              \
  lhs = std::move(statusor).value()

// EXPECT/ASSERT that an absl::Status or absl::StatusOr<T> is OK, printing it otherwise.
#define GPUKIT_EXPECT_OK(expr) EXPECT_THAT((expr), ::gpukit::testing::IsOk())
#define GPUKIT_ASSERT_OK(expr) ASSERT_THAT((expr), ::gpukit::testing::IsOk())

#endif  // GPUKIT_TESTS_TESTING_STATUS_MATCHERS_H_
