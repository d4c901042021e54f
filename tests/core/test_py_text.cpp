// The surrogateescape codec: Python's decoding of UTF-8 bytes, and the round
// trip of any byte string.
#include "dapo/core/py_text.h"

#include <gtest/gtest.h>

#include <random>

namespace dapo {
namespace {

TEST(PyText, DecodesAsPythonSurrogateescape) {
  // 'a', U+00E9, U+20AC, U+1F600, then C0 80 (overlong), ED A0 80 (a
  // surrogate), F4 90 80 80 (past U+10FFFF), a lone continuation byte and a
  // truncated sequence: each invalid byte one U+DC00 + byte.
  const std::string bytes = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xC0\x80\xED\xA0\x80\xF4\x90\x80\x80\x80\xE2\x82";
  const std::u32string want = {U'a',    0xE9,   0x20AC, 0x1F600, 0xDCC0, 0xDC80, 0xDCED, 0xDCA0,
                               0xDC80,  0xDCF4, 0xDC90, 0xDC80,  0xDC80, 0xDC80, 0xDCE2, 0xDC82};
  EXPECT_EQ(decode_surrogateescape(bytes), want);
  EXPECT_EQ(encode_surrogateescape(want), bytes);
}

TEST(PyText, AnyBytesRoundTrip) {
  std::mt19937 rng(7);
  for (int t = 0; t < 2000; ++t) {
    std::string s(size_t(rng() % 24), '\0');
    for (char& c : s) c = char(rng() % 4 == 0 ? 0x80 + rng() % 0x80 : rng() % 256);
    EXPECT_EQ(encode_surrogateescape(decode_surrogateescape(s)), s);
  }
}

}  // namespace
}  // namespace dapo
