// The surrogateescape codec (py_text.h).
#include "dapo/core/py_text.h"

namespace dapo {
namespace {

// The code point and byte length of the sequence at s[i], or {U+DC00 + byte, 1}.
std::pair<char32_t, size_t> sequence_at(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c0 = b(i);
  if (c0 < 0x80) return {c0, 1};
  const std::pair<char32_t, size_t> escaped{char32_t(0xDC00 + c0), 1};
  const size_t left = s.size() - i;
  const auto cont = [&](size_t k) { return (b(i + k) & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    if (left < 2 || !cont(1)) return escaped;
    return {char32_t(((c0 & 0x1F) << 6) | (b(i + 1) & 0x3F)), 2};
  }
  if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (left < 3 || !cont(1) || !cont(2)) return escaped;
    const char32_t cp = ((c0 & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return escaped;  // overlong, surrogate
    return {cp, 3};
  }
  if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (left < 4 || !cont(1) || !cont(2) || !cont(3)) return escaped;
    const char32_t cp =
        ((c0 & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return escaped;
    return {cp, 4};
  }
  return escaped;  // a continuation byte, C0, C1, F5..FF
}

}  // namespace

std::u32string decode_surrogateescape(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    const auto [cp, len] = sequence_at(utf8, i);
    out += cp;
    i += len;
  }
  return out;
}

std::string encode_surrogateescape(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x80) {
      out += char(c);
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      out += char(c - 0xDC00);  // an escaped byte goes back as it came
    } else if (c < 0x800) {
      out += char(0xC0 | (c >> 6));
      out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += char(0xE0 | (c >> 12));
      out += char(0x80 | ((c >> 6) & 0x3F));
      out += char(0x80 | (c & 0x3F));
    } else {
      out += char(0xF0 | (c >> 18));
      out += char(0x80 | ((c >> 12) & 0x3F));
      out += char(0x80 | ((c >> 6) & 0x3F));
      out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

}  // namespace dapo
