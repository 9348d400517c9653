// UTF-8 helpers (runtime/base/utf8.h): decoding with every malformed form refused, the display
// controls, cuts at character boundaries and the repair of broken text.
#include "runtime/base/utf8.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace gpukit {
namespace {

TEST(DecodeUtf8Test, DecodesEachLengthAndRefusesMalformedForms) {
  char32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("a", &cp), 1);
  EXPECT_EQ(cp, U'a');
  EXPECT_EQ(DecodeUtf8("\xc3\xa9", &cp), 2);  // é
  EXPECT_EQ(cp, 0xe9u);
  EXPECT_EQ(DecodeUtf8("\xe2\x80\xae", &cp), 3);  // U+202E
  EXPECT_EQ(cp, 0x202eu);
  EXPECT_EQ(DecodeUtf8("\xf0\x9f\x98\x80", &cp), 4);  // U+1F600
  EXPECT_EQ(cp, 0x1f600u);
  for (const char* bad :
       {"\x80", "\xc0\xaf", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x28\xa1", "\xff"}) {
    EXPECT_EQ(DecodeUtf8(bad, &cp), 0) << absl::string_view(bad).size();
  }
}

TEST(IsDisplayControlTest, CoversC0DelC1BidiAndSeparators) {
  for (char32_t cp : {0x00u, 0x1bu, 0x1fu, 0x7fu, 0x9bu, 0x200eu, 0x2028u, 0x202eu, 0x2066u}) {
    EXPECT_TRUE(IsDisplayControl(cp)) << static_cast<uint32_t>(cp);
  }
  for (char32_t cp : {0x20u, 0x41u, 0xa0u, 0xe9u, 0x2027u, 0x202fu, 0x1f600u}) {
    EXPECT_FALSE(IsDisplayControl(cp)) << static_cast<uint32_t>(cp);
  }
}

TEST(Utf8PrefixBytesTest, NeverCutsACharacterInTwo) {
  const std::string text = "ab\xc3\xa9\xe2\x82\xac";  // a b é €
  EXPECT_EQ(Utf8PrefixBytes(text, 100), text.size());
  EXPECT_EQ(Utf8PrefixBytes(text, 2), 2u);
  EXPECT_EQ(Utf8PrefixBytes(text, 3), 2u);  // inside é
  EXPECT_EQ(Utf8PrefixBytes(text, 4), 4u);
  EXPECT_EQ(Utf8PrefixBytes(text, 6), 4u);  // inside €
}

TEST(ToValidUtf8Test, ReplacesOnlyBrokenBytes) {
  EXPECT_EQ(ToValidUtf8("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(ToValidUtf8("a\xff"
                        "b\xc3"),
            "a?b?");
  EXPECT_EQ(ToValidUtf8("\xed\xa0\x80"), "???");  // a surrogate is not UTF-8
}

}  // namespace
}  // namespace gpukit
