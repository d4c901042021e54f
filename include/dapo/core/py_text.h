// UTF-8 bytes as Python's str sees them when decoded with
// errors="surrogateescape": one code point per character, and each byte that
// does not belong to a valid (shortest-form, non-surrogate, <= U+10FFFF)
// sequence one character of its own, U+DC00 + byte (U+DC80..U+DCFF, which
// valid UTF-8 never yields). Encoding gives those bytes back unchanged, so
// any byte string survives the round trip. Code that must reproduce Python
// string semantics (verl's reward, transformers' Jinja templates) works on
// this form: two escaped bytes that end up side by side stay two characters.
#pragma once

#include <string>
#include <string_view>

namespace dapo {

std::u32string decode_surrogateescape(std::string_view utf8);
std::string encode_surrogateescape(std::u32string_view text);

}  // namespace dapo
