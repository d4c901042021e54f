// The Jinja lexer: jinja2 3.1's lexer.py with transformers' options
// (trim_blocks, lstrip_blocks, default delimiters, no line statements).
//  - \r\n and \r become \n; one trailing newline of the template is dropped;
//  - {%- {{- {#- strip all whitespace before the tag, -%} -}} -#} all after;
//  - lstrip_blocks: spaces and tabs from the start of a line up to {% or {#
//    (not {{) go, unless the tag is {%+ / {#+;
//  - trim_blocks: the first newline after %} or #} goes, unless +%} / +#};
//  - {% raw %}...{% endraw %} is data;
//  - inside tags: whitespace, floats, integers, names, strings, operators,
//    the end tag recognised only outside brackets.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "jinja_ast.h"

namespace dapo::data::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // newline_re.split(source)[::2], the trailing "" dropped, joined with \n.
    src_.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == '\r') {
        if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
        src_ += '\n';
      } else {
        src_ += source[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      const size_t t = find_tag(pos);
      if (t == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      // The tag: raw, block, variable or comment, and its sign.
      enum { raw, block, variable, comment } type;
      size_t after = t + 2;
      char sign = 0;
      size_t raw_end = 0;
      if (src_[t + 1] == '{') {
        type = variable;
      } else if (src_[t + 1] == '#') {
        type = comment;
      } else {
        type = match_raw_begin(t, raw_end) ? raw : block;
      }
      if (after < n && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::string text = src_.substr(pos, t - pos);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && type != variable) {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_ws(text, l_pos)) text.resize(l_pos);
      }
      emit_data(pos, text);
      line_starting = false;
      switch (type) {
        case comment: pos = lex_comment(t, after, line_starting); break;
        case raw: pos = lex_raw(t, raw_end, line_starting); break;
        case block:
        case variable: pos = lex_tag(t, after, type == block, line_starting); break;
      }
    }
    Token eof;
    eof.type = Tok::eof;
    eof.pos = pos_of(src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  std::string src_;
  std::vector<Token> tokens_;
  mutable std::vector<size_t> line_starts_;

  Pos pos_of(size_t offset) const {
    if (line_starts_.empty()) {
      line_starts_.push_back(0);
      for (size_t k = 0; k < src_.size(); ++k)
        if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
    offset = std::min(offset, src_.size());
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    Pos p;
    p.line = int(it - line_starts_.begin()) + 1;
    int col = 1;
    for (size_t k = *it; k < offset; ++k)
      if ((static_cast<unsigned char>(src_[k]) & 0xc0) != 0x80) ++col;
    p.col = col;
    return p;
  }

  [[noreturn]] void fail(const std::string& message, size_t offset) const { throw SyntaxError(message, pos_of(offset)); }

  // The whitespace code point at `k` (Python's str.isspace), as its byte length; 0 if none.
  size_t ws_at(size_t k) const {
    const unsigned char c = static_cast<unsigned char>(src_[k]);
    if (c < 0x80) return py_isspace(c) ? 1 : 0;
    size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || k + len > src_.size()) return 0;
    const std::u32string u = to_u32(std::string_view(src_).substr(k, len));
    return u.size() == 1 && py_isspace(u[0]) ? len : 0;
  }

  size_t skip_ws(size_t k) const {
    while (k < src_.size()) {
      const size_t w = ws_at(k);
      if (!w) break;
      k += w;
    }
    return k;
  }

  static std::string rstrip_ws(const std::string& text) {
    std::u32string u = to_u32(text);
    while (!u.empty() && py_isspace(u.back())) u.pop_back();
    return to_utf8(u);
  }

  static bool all_ws(const std::string& text, size_t from) {
    for (const char32_t c : to_u32(std::string_view(text).substr(from)))
      if (!py_isspace(c)) return false;
    return true;
  }

  void emit_data(size_t offset, std::string text) {
    if (text.empty()) return;
    Token tok;
    tok.type = Tok::data;
    tok.text = std::move(text);
    tok.pos = pos_of(offset);
    tokens_.push_back(std::move(tok));
  }

  void emit(Tok type, size_t offset, std::string text = {}) {
    Token tok;
    tok.type = type;
    tok.text = std::move(text);
    tok.pos = pos_of(offset);
    tokens_.push_back(std::move(tok));
  }

  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos && k + 1 < src_.size(); k = src_.find('{', k + 1)) {
      const char c = src_[k + 1];
      if (c == '{' || c == '%' || c == '#') return k;
    }
    return std::string::npos;
  }

  bool at(size_t k, const char* s) const { return src_.compare(k, std::strlen(s), s) == 0; }

  // {%(-|+|)\s*raw\s*(-%}\s*|%}) at t; `end` is where it stops.
  bool match_raw_begin(size_t t, size_t& end) const {
    size_t k = t + 2;
    if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) ++k;
    k = skip_ws(k);
    if (!at(k, "raw")) return false;
    k = skip_ws(k + 3);
    if (at(k, "-%}")) {
      end = skip_ws(k + 3);
      return true;
    }
    if (at(k, "%}")) {
      end = k + 2;
      return true;
    }
    return false;
  }

  size_t lex_comment(size_t start, size_t from, bool& line_starting) {
    const size_t q = src_.find("#}", from);
    if (q == std::string::npos) fail("Missing end of comment tag", start);
    const char sign = q > from && (src_[q - 1] == '-' || src_[q - 1] == '+') ? src_[q - 1] : 0;
    size_t end = q + 2;
    if (sign == '-') {
      end = skip_ws(end);
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    line_starting = end > 0 && src_[end - 1] == '\n' && end > q + 1;
    return end;
  }

  size_t lex_raw(size_t start, size_t from, bool& line_starting) {
    // (.*?)({%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?))
    for (size_t t = src_.find("{%", from); t != std::string::npos; t = src_.find("{%", t + 1)) {
      size_t k = t + 2;
      char sign = 0;
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) sign = src_[k++];
      k = skip_ws(k);
      if (!at(k, "endraw")) continue;
      k = skip_ws(k + 6);
      size_t end;
      if (at(k, "+%}")) {
        end = k + 3;
      } else if (at(k, "-%}")) {
        end = skip_ws(k + 3);
      } else if (at(k, "%}")) {
        end = k + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(from, t - from);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        const bool starting = from > 0 && src_[from - 1] == '\n';
        if ((l_pos > 0 || starting) && l_pos < text.size() && all_ws(text, l_pos)) text.resize(l_pos);
      }
      emit_data(from, text);
      line_starting = src_[end - 1] == '\n';
      return end;
    }
    fail("Missing end of raw directive", start);
  }

  size_t lex_tag(size_t start, size_t pos, bool block, bool& line_starting) {
    emit(block ? Tok::block_begin : Tok::variable_begin, start);
    std::string balance;
    const size_t n = src_.size();
    while (pos < n) {
      if (balance.empty()) {
        if (block) {
          if (at(pos, "+%}")) {
            emit(Tok::block_end, pos);
            line_starting = false;
            return pos + 3;
          }
          if (at(pos, "-%}")) {
            emit(Tok::block_end, pos);
            const size_t end = skip_ws(pos + 3);
            line_starting = src_[end - 1] == '\n';
            return end;
          }
          if (at(pos, "%}")) {
            emit(Tok::block_end, pos);
            size_t end = pos + 2;
            if (end < n && src_[end] == '\n') ++end;
            line_starting = src_[end - 1] == '\n';
            return end;
          }
        } else {
          if (at(pos, "-}}")) {
            emit(Tok::variable_end, pos);
            const size_t end = skip_ws(pos + 3);
            line_starting = src_[end - 1] == '\n';
            return end;
          }
          if (at(pos, "}}")) {
            emit(Tok::variable_end, pos);
            line_starting = false;
            return pos + 2;
          }
        }
      }
      if (const size_t w = ws_at(pos)) {
        pos = skip_ws(pos + w);
        continue;
      }
      if (size_t end = match_float(pos)) {
        Token tok;
        tok.type = Tok::floating;
        std::string digits;
        for (size_t k = pos; k < end; ++k)
          if (src_[k] != '_') digits += src_[k];
        tok.fval = std::strtod(digits.c_str(), nullptr);
        tok.text = src_.substr(pos, end - pos);
        tok.pos = pos_of(pos);
        tokens_.push_back(std::move(tok));
        pos = end;
        continue;
      }
      if (size_t end = match_integer(pos)) {
        Token tok;
        tok.type = Tok::integer;
        tok.text = src_.substr(pos, end - pos);
        tok.ival = parse_integer(tok.text, pos);
        tok.pos = pos_of(pos);
        tokens_.push_back(std::move(tok));
        pos = end;
        continue;
      }
      if (size_t end = match_name(pos)) {
        emit(Tok::name, pos, src_.substr(pos, end - pos));
        pos = end;
        continue;
      }
      if (src_[pos] == '"' || src_[pos] == '\'') {
        const char q = src_[pos];
        size_t k = pos + 1;
        while (k < n && src_[k] != q) k += src_[k] == '\\' ? 2 : 1;
        if (k < n) {
          Token tok;
          tok.type = Tok::string;
          tok.text = decode_string(std::string_view(src_).substr(pos + 1, k - pos - 1), pos);
          tok.pos = pos_of(pos);
          tokens_.push_back(std::move(tok));
          pos = k + 1;
          continue;
        }
      }
      if (size_t len = match_operator(pos)) {
        const std::string op = src_.substr(pos, len);
        if (op == "{" || op == "(" || op == "[") {
          balance += op == "{" ? '}' : op == "(" ? ')' : ']';
        } else if (op == "}" || op == ")" || op == "]") {
          if (balance.empty()) fail("unexpected '" + op + "'", pos);
          const char expected = balance.back();
          balance.pop_back();
          if (expected != op[0]) fail("unexpected '" + op + "', expected '" + std::string(1, expected) + "'", pos);
        }
        emit(Tok::op, pos, op);
        pos += len;
        continue;
      }
      const std::u32string c = to_u32(std::string_view(src_).substr(pos, 4));
      fail("unexpected char " + repr_string(to_utf8(c.substr(0, 1))) + " at " + std::to_string(char_index(pos)),
           pos);
    }
    return pos;  // no end tag: the parser reports the end of the template
  }

  size_t char_index(size_t offset) const {
    size_t count = 0;
    for (size_t k = 0; k < offset; ++k)
      if ((static_cast<unsigned char>(src_[k]) & 0xc0) != 0x80) ++count;
    return count;
  }

  // \d+(_\d+)* at k; returns the end or 0.
  size_t digits(size_t k) const {
    if (k >= src_.size() || !is_digit(src_[k])) return 0;
    while (true) {
      while (k < src_.size() && is_digit(src_[k])) ++k;
      if (k + 1 < src_.size() && src_[k] == '_' && is_digit(src_[k + 1])) {
        ++k;
        continue;
      }
      return k;
    }
  }

  size_t exponent(size_t k) const {
    if (k >= src_.size() || (src_[k] != 'e' && src_[k] != 'E')) return 0;
    ++k;
    if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
    return digits(k);
  }

  // (?<!\.)\d+(_\d+)*((\.\d+(_\d+)*)?e[+-]?\d+(_\d+)*|\.\d+(_\d+)*)
  size_t match_float(size_t k) const {
    if (k > 0 && src_[k - 1] == '.') return 0;
    const size_t int_end = digits(k);
    if (!int_end) return 0;
    if (int_end < src_.size() && src_[int_end] == '.') {
      if (const size_t frac_end = digits(int_end + 1)) {
        if (const size_t e = exponent(frac_end)) return e;
        return frac_end;
      }
    }
    return exponent(int_end);
  }

  // 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[0-9a-f])+ | [1-9](_?\d)* | 0(_?0)*  (case-insensitive)
  size_t match_integer(size_t k) const {
    const size_t n = src_.size();
    if (k >= n || !is_digit(src_[k])) return 0;
    auto run = [&](size_t p, auto ok) -> size_t {
      size_t end = 0;
      while (p < n) {
        size_t q = p;
        if (src_[q] == '_') ++q;
        if (q < n && ok(src_[q])) {
          p = q + 1;
          end = p;
        } else {
          break;
        }
      }
      return end;
    };
    if (src_[k] == '0' && k + 1 < n) {
      const char x = char(src_[k + 1] | 0x20);
      if (x == 'b')
        if (size_t e = run(k + 2, [](char c) { return c == '0' || c == '1'; })) return e;
      if (x == 'o')
        if (size_t e = run(k + 2, [](char c) { return c >= '0' && c <= '7'; })) return e;
      if (x == 'x')
        if (size_t e = run(k + 2, [](char c) {
              return is_digit(c) || (char(c | 0x20) >= 'a' && char(c | 0x20) <= 'f');
            }))
          return e;
    }
    if (src_[k] != '0') {
      const size_t e = run(k + 1, is_digit);
      return e ? e : k + 1;
    }
    const size_t e = run(k + 1, [](char c) { return c == '0'; });
    return e ? e : k + 1;
  }

  int64_t parse_integer(const std::string& text, size_t offset) const {
    std::string t;
    for (const char c : text)
      if (c != '_') t += c;
    int base = 10;
    size_t from = 0;
    if (t.size() > 1 && t[0] == '0') {
      const char x = char(t[1] | 0x20);
      if (x == 'b' || x == 'o' || x == 'x') {
        base = x == 'b' ? 2 : x == 'o' ? 8 : 16;
        from = 2;
      }
    }
    unsigned __int128 v = 0;
    for (size_t k = from; k < t.size(); ++k) {
      const char c = char(t[k] | 0x20);
      const int d = is_digit(t[k]) ? t[k] - '0' : c - 'a' + 10;
      v = v * unsigned(base) + unsigned(d);
      if (v > static_cast<unsigned __int128>(INT64_MAX)) fail("integer literal " + text + " is too large for dapo's 64-bit integers", offset);
    }
    return int64_t(v);
  }

  size_t match_name(size_t k) const {
    const size_t n = src_.size();
    size_t p = k;
    bool first = true;
    while (p < n) {
      const unsigned char c = static_cast<unsigned char>(src_[p]);
      if (c < 0x80) {
        const bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && is_digit(char(c)));
        if (!ok) break;
        ++p;
      } else {
        const size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        const std::u32string u = to_u32(std::string_view(src_).substr(p, len));
        if (u.size() != 1 || !(py_isalpha(u[0]) || (!first && (py_isdecimal(u[0]) || py_isnumeric(u[0]))))) break;
        p += len;
      }
      first = false;
    }
    return p == k ? 0 : p;
  }

  size_t match_operator(size_t k) const {
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (at(k, op)) return 2;
    static const char singles[] = "+-/*%~[](){}><=.:|,;";
    return std::strchr(singles, src_[k]) && src_[k] != '\0' ? 1 : 0;
  }

  // Python: body.encode("ascii", "backslashreplace").decode("unicode-escape").
  std::string decode_string(std::string_view body, size_t offset) const {
    std::string ascii;
    char buf[16];
    for (const char32_t c : to_u32(body)) {
      if (c < 0x80) {
        ascii += char(c);
      } else {
        if (c <= 0xff)
          std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
        else if (c <= 0xffff)
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
        else
          std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
        ascii += buf;
      }
    }
    std::u32string out;
    auto hex = [&](size_t& k, int count, const char* what) -> char32_t {
      uint32_t v = 0;
      for (int j = 0; j < count; ++j, ++k) {
        const char c = k < ascii.size() ? ascii[k] : '\0';
        const char l = char(c | 0x20);
        if (!is_digit(c) && !(l >= 'a' && l <= 'f')) fail(std::string("truncated ") + what + " escape", offset);
        v = v * 16 + uint32_t(is_digit(c) ? c - '0' : l - 'a' + 10);
      }
      return char32_t(v);
    };
    for (size_t k = 0; k < ascii.size();) {
      const char c = ascii[k];
      if (c != '\\') {
        out += char32_t(static_cast<unsigned char>(c));
        ++k;
        continue;
      }
      if (k + 1 >= ascii.size()) fail("\\ at end of string", offset);
      const char e = ascii[k + 1];
      k += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += U'\\'; break;
        case '\'': out += U'\''; break;
        case '"': out += U'"'; break;
        case 'a': out += char32_t(7); break;
        case 'b': out += char32_t(8); break;
        case 'f': out += char32_t(12); break;
        case 'n': out += U'\n'; break;
        case 'r': out += U'\r'; break;
        case 't': out += U'\t'; break;
        case 'v': out += char32_t(11); break;
        case 'x': out += hex(k, 2, "\\xXX"); break;
        case 'u': out += hex(k, 4, "\\uXXXX"); break;
        case 'U': {
          const char32_t v = hex(k, 8, "\\UXXXXXXXX");
          if (v > 0x10ffff) fail("illegal Unicode character", offset);
          out += v;
          break;
        }
        case 'N': fail("\\N{...} escapes are not supported by dapo's Jinja subset", offset);
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int j = 0; j < 2 && k < ascii.size() && ascii[k] >= '0' && ascii[k] <= '7'; ++j, ++k)
              v = v * 8 + uint32_t(ascii[k] - '0');
            out += char32_t(v);
          } else {
            out += U'\\';
            out += char32_t(static_cast<unsigned char>(e));
          }
      }
    }
    for (const char32_t c : out)
      if (c >= 0xd800 && c <= 0xdfff) fail("a surrogate code point in a string literal is not supported", offset);
    return to_utf8(out);
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace dapo::data::jinja
