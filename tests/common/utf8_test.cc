// The wire's UTF-8 escaping: valid UTF-8 without a backslash is unchanged, invalid
// bytes and backslashes are escaped, and the escaping is one-to-one (checked against
// its inverse on random byte strings over a small alphabet, where collisions of a
// wrong scheme are likely).
#include "common/util/utf8.h"

#include <random>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace shardcast {
namespace {

TEST(Utf8Test, ValidUtf8WithoutBackslashIsUnchanged) {
  for (const std::string s : {"", "n01440764_10026", "dir/caf\xc3\xa9.jpg", "\xf0\x9f\x98\x80"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(EscapeToUtf8(s), s);
  }
}

TEST(Utf8Test, InvalidBytesAndBackslashesAreEscaped) {
  EXPECT_EQ(EscapeToUtf8("caf\xe9"), "caf\\xe9");
  EXPECT_EQ(EscapeToUtf8("caf\\xe9"), "caf\\\\xe9");
  EXPECT_EQ(EscapeToUtf8("\xc3"), "\\xc3");                             // cut short
  EXPECT_EQ(EscapeToUtf8("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(EscapeToUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(EscapeToUtf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("caf\xe9"));
  EXPECT_TRUE(IsValidUtf8(EscapeToUtf8("caf\xe9")));
}

TEST(Utf8Test, UnescapeRefusesWhatEscapeCannotProduce) {
  EXPECT_FALSE(UnescapeFromUtf8("\\").ok());
  EXPECT_FALSE(UnescapeFromUtf8("\\n").ok());
  EXPECT_FALSE(UnescapeFromUtf8("\\xE9").ok());  // upper case is never written
  EXPECT_FALSE(UnescapeFromUtf8("\\x41").ok());  // 'A' is valid UTF-8: never escaped
  ASSERT_TRUE(UnescapeFromUtf8("caf\\xe9").ok());
  EXPECT_EQ(*UnescapeFromUtf8("caf\\xe9"), "caf\xe9");
}

TEST(Utf8Test, OneToOneOnRandomBytes) {
  std::mt19937 rng(12345);
  // Bytes that build escapes, UTF-8 lead and continuation bytes and plain text.
  const std::string alphabet = "\\x9eaf\xc3\xa9\xe9\x80\xf0";
  std::set<std::string> inputs, outputs;
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 7, '\0');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    const std::string escaped = EscapeToUtf8(s);
    ASSERT_TRUE(IsValidUtf8(escaped));
    absl::StatusOr<std::string> back = UnescapeFromUtf8(escaped);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, s);
    if (inputs.insert(s).second) outputs.insert(escaped);
  }
  EXPECT_EQ(inputs.size(), outputs.size());
}

TEST(Utf8Test, DecodeUtf8AtGivesTheCodePointAndLengthOrZeroWhereInvalid) {
  const std::string text = "a\xc3\xa9\xe2\x80\xae\xf0\x9f\x98\x80";  // a, e-acute, U+202E, U+1F600
  EXPECT_EQ(DecodeUtf8At(text, 0).code_point, U'a');
  EXPECT_EQ(DecodeUtf8At(text, 1).code_point, char32_t{0xe9});
  EXPECT_EQ(DecodeUtf8At(text, 1).length, 2u);
  EXPECT_EQ(DecodeUtf8At(text, 3).code_point, char32_t{0x202e});
  EXPECT_EQ(DecodeUtf8At(text, 3).length, 3u);
  EXPECT_EQ(DecodeUtf8At(text, 6).code_point, char32_t{0x1f600});
  EXPECT_EQ(DecodeUtf8At(text, 6).length, 4u);
  // A continuation byte, an overlong form, a surrogate, a sequence cut short.
  for (const std::string bad : {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x80"}) {
    EXPECT_EQ(DecodeUtf8At(bad, 0).length, 0u) << bad;
    EXPECT_EQ(Utf8SequenceLength(bad, 0), 0u) << bad;
  }
}

}  // namespace
}  // namespace shardcast
