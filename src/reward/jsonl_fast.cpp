// The JSONL fast path of `dapo verify` (jsonl_fast.h): a recursive-descent
// scanner that validates like nlohmann's lexer and parser and writes what
// nlohmann's compact dump() would write for the same line.
//
// What dump() changes in a line, and so what the scanner must reproduce:
// whitespace between tokens disappears; "\/" becomes "/"; "\uXXXX" becomes
// the UTF-8 bytes of its code point, or a short escape, or lowercase
// "\u00xx" for control characters; "-0" becomes "0"; integers beyond
// int64/uint64 and every number with a fraction or an exponent become
// doubles in nlohmann's shortest round-trip form (done by nlohmann itself:
// they are rare); a duplicate key keeps its first position and its last
// value (left to nlohmann: the scanner declines such lines).
#include "dapo/reward/jsonl_fast.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace dapo::reward {
namespace {

// Bytes that end a run copied verbatim inside a string: the closing quote,
// escapes, raw control characters (invalid in JSON) and non-ASCII (to be
// validated as UTF-8).
constexpr std::array<bool, 256> kStringStop = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[size_t(c)] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
  return t;
}();

// The first byte at or after p that ends a plain run (kStringStop), or end.
// Eight bytes at a time: typical strings are long runs of plain ASCII.
const char* skip_plain(const char* p, const char* end) {
  if constexpr (std::endian::native == std::endian::little) {
    constexpr uint64_t kOnes = 0x0101010101010101u, kHighs = 0x8080808080808080u;
    // The classic "has a zero byte" / "has a byte < n" tests: their lowest
    // flagged byte is always a true hit (borrows only run upwards).
    auto zero_bytes = [](uint64_t v) { return (v - kOnes) & ~v & kHighs; };
    while (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t stop = ((w - kOnes * 0x20) & ~w & kHighs) | zero_bytes(w ^ (kOnes * '"')) |
                            zero_bytes(w ^ (kOnes * '\\')) | (w & kHighs);
      if (stop) return p + (std::countr_zero(stop) >> 3);
      p += 8;
    }
  }
  while (p < end && !kStringStop[uint8_t(*p)]) ++p;
  return p;
}

bool is_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the well-formed UTF-8 sequence at p (RFC 3629, the ranges
// nlohmann's lexer accepts), 0 when ill-formed or cut off by `end`.
size_t utf8_length(const char* p, const char* end) {
  const auto left = end - p;
  auto in = [&](ptrdiff_t i, unsigned lo, unsigned hi) {
    return i < left && uint8_t(p[i]) >= lo && uint8_t(p[i]) <= hi;
  };
  auto tail = [&](ptrdiff_t from, ptrdiff_t to) {
    for (ptrdiff_t i = from; i < to; ++i)
      if (!in(i, 0x80, 0xBF)) return false;
    return true;
  };
  const unsigned c = uint8_t(p[0]);
  if (c >= 0xC2 && c <= 0xDF) return tail(1, 2) ? 2 : 0;
  if (c == 0xE0) return in(1, 0xA0, 0xBF) && tail(2, 3) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return tail(1, 3) ? 3 : 0;
  if (c == 0xED) return in(1, 0x80, 0x9F) && tail(2, 3) ? 3 : 0;  // no UTF-16 surrogates
  if (c == 0xF0) return in(1, 0x90, 0xBF) && tail(2, 4) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return tail(1, 4) ? 4 : 0;
  if (c == 0xF4) return in(1, 0x80, 0x8F) && tail(2, 4) ? 4 : 0;  // up to U+10FFFF
  return 0;
}

// Writes the UTF-8 bytes of code point `cp` at d; returns the end.
char* write_utf8(char* d, uint32_t cp) {
  if (cp < 0x80) {
    *d++ = char(cp);
  } else if (cp < 0x800) {
    *d++ = char(0xC0 | (cp >> 6));
    *d++ = char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *d++ = char(0xE0 | (cp >> 12));
    *d++ = char(0x80 | ((cp >> 6) & 0x3F));
    *d++ = char(0x80 | (cp & 0x3F));
  } else {
    *d++ = char(0xF0 | (cp >> 18));
    *d++ = char(0x80 | ((cp >> 12) & 0x3F));
    *d++ = char(0x80 | ((cp >> 6) & 0x3F));
    *d++ = char(0x80 | (cp & 0x3F));
  }
  return d;
}

// An ASCII character inside a string literal, as nlohmann's dump_escaped
// writes it: short escapes where JSON has them, lowercase \u00xx for the
// other control characters, everything else (0x7F included) as is.
void append_escaped_ascii(std::string* out, char c) {
  switch (c) {
    case '\b': out->append("\\b"); return;
    case '\t': out->append("\\t"); return;
    case '\n': out->append("\\n"); return;
    case '\f': out->append("\\f"); return;
    case '\r': out->append("\\r"); return;
    case '"': out->append("\\\""); return;
    case '\\': out->append("\\\\"); return;
    default:
      if (uint8_t(c) < 0x20) {
        static constexpr char kHex[] = "0123456789abcdef";
        const char escaped[6] = {'\\', 'u', '0', '0', kHex[uint8_t(c) >> 4], kHex[uint8_t(c) & 15]};
        out->append(escaped, 6);
      } else {
        out->push_back(c);
      }
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The four hex digits at p as a number, -1 when there are not four.
int32_t hex4(const char* p, const char* end) {
  if (end - p < 4) return -1;
  int32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int d = hex_digit(p[i]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// The code point of a validated "\\uXXXX" escape at p, with the low half
// of a surrogate pair that follows it.
uint32_t decode_u_escape(const char* p) {
  const auto hi = uint32_t(hex4(p + 2, p + 6));
  if (hi < 0xD800 || hi > 0xDBFF) return hi;
  return 0x10000 + ((hi - 0xD800) << 10) + (uint32_t(hex4(p + 8, p + 12)) - 0xDC00);
}

// Appends the decoded text of string content [p, end) that parse_string has
// validated. The text is never longer than its JSON spelling, which bounds
// the buffer.
void decode_escaped(const char* p, const char* end, std::string* out) {
  const size_t at = out->size();
  out->resize(at + size_t(end - p));
  char* d = out->data() + at;
  while (p < end) {
    const char* backslash = static_cast<const char*>(std::memchr(p, '\\', size_t(end - p)));
    if (!backslash) backslash = end;
    std::memcpy(d, p, size_t(backslash - p));
    d += backslash - p;
    p = backslash;
    if (p == end) break;
    switch (p[1]) {
      case 'b': *d++ = '\b'; break;
      case 'f': *d++ = '\f'; break;
      case 'n': *d++ = '\n'; break;
      case 'r': *d++ = '\r'; break;
      case 't': *d++ = '\t'; break;
      case 'u': {
        const uint32_t cp = decode_u_escape(p);
        d = write_utf8(d, cp);
        p += cp >= 0x10000 ? 12 : 6;
        continue;
      }
      default: *d++ = p[1];  // '"', '\\' and '/' stand for themselves
    }
    p += 2;
  }
  out->resize(size_t(d - out->data()));
}

// Whether an integer token (no fraction, no exponent) stays an integer in
// nlohmann: int64 when negative, uint64 otherwise; larger ones become doubles.
bool fits_integer(std::string_view token) {
  const bool negative = token.front() == '-';
  const std::string_view digits = negative ? token.substr(1) : token;
  const std::string_view limit = negative ? "9223372036854775808" : "18446744073709551615";
  return digits.size() < limit.size() || (digits.size() == limit.size() && digits <= limit);
}

}  // namespace

const std::string& JsonlLineScanner::truth() const { return truth_found_ == Found::value ? truth_ : rm_truth_; }

void JsonlLineScanner::skip_whitespace() {
  while (p_ < end_ && is_whitespace(*p_)) ++p_;
}

bool JsonlLineScanner::scan(std::string_view line) {
  if (line.size() > std::numeric_limits<uint32_t>::max()) return false;  // key offsets are 32-bit
  p_ = line.data();
  end_ = p_ + line.size();
  out_.clear();
  key_text_.clear();
  keys_.clear();
  response_found_ = truth_found_ = rm_truth_found_ = Found::none;
  skip_whitespace();
  if (p_ == end_ || *p_ != '{' || !parse_object(1, Where::top)) return false;
  skip_whitespace();
  if (p_ != end_ || response_found_ != Found::value) return false;
  // The top-level reference wins over verl's nested one, as in the nlohmann path.
  return truth_found_ == Found::value || (truth_found_ == Found::none && rm_truth_found_ == Found::value);
}

bool JsonlLineScanner::parse_value(int depth, Slot slot) {
  if (p_ == end_) return false;
  // Where a value the verifier needs goes; nullptr for all others.
  std::string* target = slot == Slot::response ? &response_
                        : slot == Slot::truth  ? &truth_
                        : slot == Slot::rm_truth ? &rm_truth_
                                                 : nullptr;
  Found* found = slot == Slot::response ? &response_found_
                 : slot == Slot::truth  ? &truth_found_
                 : slot == Slot::rm_truth ? &rm_truth_found_
                                          : nullptr;
  const char c = *p_;
  if (c == '"') {
    if (target) {
      target->clear();
      *found = Found::value;
    }
    return parse_string(target);
  }
  if (c == '-' || is_digit(c)) {
    if (slot == Slot::response) return false;  // mistyped: nlohmann's path names the type
    if (target) {
      target->clear();
      *found = Found::value;
    }
    return parse_number(target);
  }
  if (slot == Slot::response || slot == Slot::truth) return false;  // mistyped
  if (slot == Slot::rm_truth) *found = Found::mistyped;  // an error only without a top-level reference
  switch (c) {
    case '{': return parse_object(depth + 1, slot == Slot::reward_model ? Where::reward_model : Where::nested);
    case '[': return parse_array(depth + 1);
    case 't': return parse_literal("true");
    case 'f': return parse_literal("false");
    case 'n': return parse_literal("null");
    default: return false;
  }
}

bool JsonlLineScanner::parse_object(int depth, Where where) {
  if (depth > kMaxDepth) return false;
  ++p_;
  out_.push_back('{');
  const size_t keys_begin = keys_.size(), key_text_begin = key_text_.size();
  skip_whitespace();
  if (p_ < end_ && *p_ == '}') {
    ++p_;
    out_.push_back('}');
    return true;
  }
  for (;;) {
    if (p_ == end_ || *p_ != '"') return false;
    const size_t key_at = key_text_.size();
    if (!parse_string(&key_text_)) return false;
    const std::string_view key(key_text_.data() + key_at, key_text_.size() - key_at);
    for (size_t i = keys_begin; i < keys_.size(); ++i)
      if (std::string_view(key_text_.data() + keys_[i].first, keys_[i].second) == key) return false;
    if (keys_.size() - keys_begin >= kMaxKeys) return false;
    keys_.emplace_back(uint32_t(key_at), uint32_t(key.size()));

    Slot slot = Slot::other;
    if (where == Where::top) {
      if (key == "response") slot = Slot::response;
      else if (key == "ground_truth") slot = Slot::truth;
      else if (key == "reward_model") slot = Slot::reward_model;
      else if (key == "score" || key == "acc" || key == "pred") return false;  // replaced in place: nlohmann
    } else if (where == Where::reward_model && key == "ground_truth") {
      slot = Slot::rm_truth;
    }

    skip_whitespace();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    out_.push_back(':');
    skip_whitespace();
    if (!parse_value(depth, slot)) return false;
    skip_whitespace();
    if (p_ == end_) return false;
    if (*p_ == ',') {
      ++p_;
      out_.push_back(',');
      skip_whitespace();
      continue;
    }
    if (*p_ != '}') return false;
    ++p_;
    out_.push_back('}');
    keys_.resize(keys_begin);
    key_text_.resize(key_text_begin);
    return true;
  }
}

bool JsonlLineScanner::parse_array(int depth) {
  if (depth > kMaxDepth) return false;
  ++p_;
  out_.push_back('[');
  skip_whitespace();
  if (p_ < end_ && *p_ == ']') {
    ++p_;
    out_.push_back(']');
    return true;
  }
  for (;;) {
    if (!parse_value(depth, Slot::other)) return false;
    skip_whitespace();
    if (p_ == end_) return false;
    if (*p_ == ',') {
      ++p_;
      out_.push_back(',');
      skip_whitespace();
      continue;
    }
    if (*p_ != ']') return false;
    ++p_;
    out_.push_back(']');
    return true;
  }
}

// One pass validates the string and writes it the way dump() does: runs of
// plain text in one append, the short escapes kept as they are, "\/" and
// "\u" rewritten. Only strings the caller keeps are decoded, and those with
// escapes in a second pass over the validated text (decode_escaped), which
// costs less than decoding along the way with a string append per escape.
bool JsonlLineScanner::parse_string(std::string* decoded) {
  ++p_;
  out_.push_back('"');
  const char* const content = p_;
  const char* out_run = p_;
  bool escaped = false;
  for (;;) {
    p_ = skip_plain(p_, end_);
    if (p_ == end_) return false;
    const char c = *p_;
    if (uint8_t(c) >= 0x80) {
      const size_t n = utf8_length(p_, end_);
      if (n == 0) return false;
      p_ += n;
      continue;
    }
    if (c == '"') break;
    if (c != '\\' || end_ - p_ < 2) return false;  // a raw control character, or a cut escape
    escaped = true;
    switch (p_[1]) {
      case '"': case '\\': case 'b': case 'f': case 'n': case 'r': case 't':
        p_ += 2;
        continue;
      default:
        out_.append(out_run, p_);
        if (!parse_escape()) return false;
        out_run = p_;
    }
  }
  out_.append(out_run, p_);
  out_.push_back('"');
  if (decoded) {
    if (escaped) {
      decode_escaped(content, p_, decoded);
    } else {
      decoded->append(content, p_);
    }
  }
  ++p_;
  return true;
}

// "\/" and "\uXXXX" (with its pair), which dump() writes differently.
bool JsonlLineScanner::parse_escape() {
  if (p_[1] == '/') {  // dump() writes the solidus bare
    p_ += 2;
    out_.push_back('/');
    return true;
  }
  if (p_[1] != 'u') return false;
  int32_t cp = hex4(p_ + 2, end_);
  if (cp < 0) return false;
  p_ += 6;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a low surrogate alone
  if (cp >= 0xD800 && cp <= 0xDBFF) {               // must pair with a low surrogate
    if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') return false;
    const int32_t low = hex4(p_ + 2, end_);
    if (low < 0xDC00 || low > 0xDFFF) return false;
    p_ += 6;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
  }
  if (cp < 0x80) {
    append_escaped_ascii(&out_, char(cp));
  } else {
    char utf8[4];
    out_.append(utf8, size_t(write_utf8(utf8, uint32_t(cp)) - utf8));
  }
  return true;
}

// JSON's number grammar; the canonical text goes to the output and, when
// asked, to `text` (a reference given as a number is compared as dump()
// writes it).
bool JsonlLineScanner::parse_number(std::string* text) {
  const char* start = p_;
  if (*p_ == '-') ++p_;
  if (p_ == end_) return false;
  if (*p_ == '0') {
    ++p_;
  } else if (*p_ >= '1' && *p_ <= '9') {
    while (p_ < end_ && is_digit(*p_)) ++p_;
  } else {
    return false;
  }
  bool integer = true;
  if (p_ < end_ && *p_ == '.') {
    const char* digits = ++p_;
    while (p_ < end_ && is_digit(*p_)) ++p_;
    if (p_ == digits) return false;
    integer = false;
  }
  if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    const char* digits = p_;
    while (p_ < end_ && is_digit(*p_)) ++p_;
    if (p_ == digits) return false;
    integer = false;
  }
  const std::string_view token(start, size_t(p_ - start));
  const size_t out_at = out_.size();
  if (integer && fits_integer(token)) {
    out_.append(token == "-0" ? std::string_view("0") : token);
  } else {
    double value = 0;
    const auto [ptr, ec] = std::from_chars(start, p_, value);
    // Out of double's range: nlohmann rejects overflow and flushes underflow
    // its own way; left to it.
    if (ec != std::errc() || ptr != p_ || !std::isfinite(value)) return false;
    append_json_double(&out_, value);
  }
  if (text) text->assign(out_, out_at, std::string::npos);
  return true;
}

bool JsonlLineScanner::parse_literal(std::string_view literal) {
  if (size_t(end_ - p_) < literal.size() || std::memcmp(p_, literal.data(), literal.size()) != 0) return false;
  p_ += literal.size();
  out_.append(literal);
  return true;
}

void append_json_string(std::string* out, std::string_view text) {
  const size_t begin = out->size();
  out->push_back('"');
  const char* p = text.data();
  const char* end = p + text.size();
  const char* run = p;
  while ((p = skip_plain(p, end)) < end) {
    const char c = *p;
    if (uint8_t(c) >= 0x80) {
      const size_t n = utf8_length(p, end);
      if (n == 0) {
        // nlohmann's replacement of ill-formed UTF-8 has its own rules about
        // which bytes one U+FFFD swallows; let it write the whole string.
        out->resize(begin);
        out->append(nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        return;
      }
      p += n;
    } else {
      out->append(run, p);
      append_escaped_ascii(out, c);
      run = ++p;
    }
  }
  out->append(run, p);
  out->push_back('"');
}

void append_json_double(std::string* out, double value) {
  // The verifier's scores: spelled out to spare a dump() per line.
  if (value == 1.0) {
    out->append("1.0");
  } else if (value == -1.0) {
    out->append("-1.0");
  } else {
    out->append(nlohmann::json(value).dump());
  }
}

}  // namespace dapo::reward
