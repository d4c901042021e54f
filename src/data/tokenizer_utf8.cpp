// UTF-8 validation and lossy repair with HF's (Rust's) substitution rules, and
// NFC through utf8proc behind a quick check that keeps ASCII, CJK and other
// already-composed text off the slow path.
#include "dapo/data/tokenizer_utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dapo/core/error.h"

namespace dapo::data {
namespace {

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// How many bytes of the sequence at s[0..n) form a valid prefix of some
// well-formed sequence (the "maximal subpart"), and the full length the lead
// byte asks for. Lead bytes that can start nothing give (0, 0).
struct Prefix {
  size_t valid = 0;
  size_t needed = 0;
};

Prefix valid_prefix(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  if (c < 0x80) return {1, 1};
  size_t needed;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    needed = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    needed = 3;
    if (c == 0xE0) lo = 0xA0;        // no overlong forms
    if (c == 0xED) hi = 0x9F;        // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    needed = 4;
    if (c == 0xF0) lo = 0x90;        // no overlong forms
    if (c == 0xF4) hi = 0x8F;        // nothing above U+10FFFF
  } else {
    return {0, 0};                   // 0x80..0xC1, 0xF5..0xFF
  }
  size_t k = 1;
  if (k < n && s[k] >= lo && s[k] <= hi) {
    ++k;
    while (k < needed && k < n && is_cont(s[k])) ++k;
  }
  return {k, needed};
}

// Code points that NFC may change in context: combining marks (ccc != 0),
// characters that NFC changes on their own (singletons, composition
// exclusions), and every character that can be the second part of a
// canonical composition (all non-first parts of all canonical
// decompositions). A string of other characters is its own NFC: what
// decomposes (precomposed letters such as U+00E9) recomposes to itself,
// marks stay attached to their own base, and no starter composes with the
// one before it. Hangul syllables recompose the same way; the trailing jamo
// that could extend one is in the set. Immutable once built.
class NfcUnsafeSet {
 public:
  NfcUnsafeSet() : bits_((kMax + 63) / 64, 0) {
    utf8proc_int32_t buf[32];
    for (utf8proc_int32_t cp = 0; cp < kMax; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (utf8proc_get_property(cp)->combining_class != 0) set(char32_t(cp));
      int last_boundclass = 0;
      const utf8proc_ssize_t n =
          utf8proc_decompose_char(cp, buf, 32, utf8proc_option_t(UTF8PROC_DECOMPOSE), &last_boundclass);
      DAPO_CHECK(n >= 1 && n <= 32, "utf8proc_decompose_char(", cp, ") returned ", n);
      if (n == 1 && buf[0] == cp) continue;
      if (!(cp >= 0xAC00 && cp <= 0xD7A3) && !nfc_keeps(cp)) set(char32_t(cp));
      for (utf8proc_ssize_t i = 1; i < n; ++i) set(char32_t(buf[i]));
    }
  }
  bool unsafe(char32_t cp) const { return cp < kMax && (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  static constexpr utf8proc_int32_t kMax = 0x110000;
  static bool nfc_keeps(utf8proc_int32_t cp) {
    utf8proc_uint8_t in[4];
    const utf8proc_ssize_t len = utf8proc_encode_char(cp, in);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(in, len, &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    const bool same = n == len && std::memcmp(in, out, size_t(len)) == 0;
    std::free(out);
    return same;
  }
  void set(char32_t cp) { bits_[cp >> 6] |= uint64_t(1) << (cp & 63); }
  std::vector<uint64_t> bits_;
};

const NfcUnsafeSet& nfc_unsafe_set() {
  static const NfcUnsafeSet set;  // built once, read-only afterwards
  return set;
}

}  // namespace

size_t utf8_sequence_length(const unsigned char* s, size_t n) {
  const Prefix p = valid_prefix(s, n);
  return p.needed != 0 && p.valid == p.needed ? p.needed : 0;
}

bool utf8_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t len = utf8_sequence_length(p + i, s.size() - i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size());
  size_t i = 0, clean = 0;  // s[clean..i) is well-formed and not yet copied
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Prefix pre = valid_prefix(p + i, s.size() - i);
    if (pre.needed != 0 && pre.valid == pre.needed) {
      i += pre.needed;
      continue;
    }
    out.append(s.data() + clean, i - clean);
    out.append("\xEF\xBF\xBD");
    i += pre.valid == 0 ? 1 : pre.valid;
    clean = i;
  }
  out.append(s.data() + clean, s.size() - clean);
  return out;
}

char32_t utf8_code_point(const unsigned char* s, size_t len) {
  switch (len) {
    case 1: return s[0];
    case 2: return char32_t(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3: return char32_t(s[0] & 0x0F) << 12 | char32_t(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
      return char32_t(s[0] & 0x07) << 18 | char32_t(s[1] & 0x3F) << 12 | char32_t(s[2] & 0x3F) << 6 |
             (s[3] & 0x3F);
  }
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool nfc_quick_check(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const NfcUnsafeSet* set = nullptr;
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    if (!set) set = &nfc_unsafe_set();
    const size_t len = utf8_sequence_length(p + i, s.size() - i);
    DAPO_CHECK(len != 0, "nfc_quick_check needs well-formed UTF-8");
    if (set->unsafe(utf8_code_point(p + i, len))) return false;
    i += len;
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (nfc_quick_check(s)) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out,
                                          utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  DAPO_CHECK(n >= 0, "utf8proc_map failed on well-formed UTF-8: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), size_t(n));
}

}  // namespace dapo::data
