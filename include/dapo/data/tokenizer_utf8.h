// UTF-8 helpers of the tokenizer: the repair of ill-formed UTF-8 exactly as
// HF tokenizers' decode does it (Rust's String::from_utf8_lossy), and Unicode
// NFC through utf8proc with a fast path for text that NFC cannot change.
// Internal to the data module; public so that tests can pin them down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dapo::data {

// The length in bytes of the well-formed UTF-8 sequence at s[0..n), or 0 when
// the bytes there are not one (bad lead byte, bad or missing continuation,
// overlong form, surrogate, > U+10FFFF). n >= 1.
size_t utf8_sequence_length(const unsigned char* s, size_t n);

// True when `s` is well-formed UTF-8.
bool utf8_valid(std::string_view s);

// `s` with every ill-formed part replaced by U+FFFD, one per "maximal subpart"
// (Unicode ch. 3, U+FFFD substitution of maximal subparts), which is what
// Rust's String::from_utf8_lossy and therefore HF `decode` produce:
// "\xE4\xB8" -> one U+FFFD, "\xC0\x80" -> two, "\xED\xA0\x80" -> three.
std::string utf8_lossy(std::string_view s);

// The code point of the well-formed sequence at s[0..len) (len from
// utf8_sequence_length).
char32_t utf8_code_point(const unsigned char* s, size_t len);

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value) to `out`.
void append_utf8(std::string& out, char32_t cp);

// Unicode NFC (canonical composition) of well-formed UTF-8 `s`, as HF's NFC
// normalizer computes it (utf8proc's Unicode tables; see tokenizer.h for the
// version caveat). Text that NFC leaves unchanged - all of ASCII, and any
// text whose code points are starters that neither decompose nor compose
// with what precedes them - is returned without calling utf8proc.
std::string nfc(std::string_view s);

// True when nfc(s) == s is certain without normalising (the fast path of nfc).
bool nfc_quick_check(std::string_view s);

}  // namespace dapo::data
