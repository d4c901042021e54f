// verify_math_dapo: verl's math_dapo.compute_score, step by step, on the
// text decoded to code points as Python holds it. Each regex of the original
// is matched by hand with Python re's semantics (leftmost match,
// non-overlapping, '.' is anything but '\n'); the comments say which
// property of the pattern each shortcut relies on.
#include "dapo/reward/math_dapo.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "dapo/core/py_text.h"

namespace dapo::reward {
namespace math_dapo_detail {
namespace {

// Python 3.11 (Unicode 14.0) str.isdigit(): Numeric_Type Digit or Decimal.
constexpr std::array<std::pair<char32_t, char32_t>, 81> kDigitRanges{{
    {0x0030, 0x0039}, {0x00B2, 0x00B3}, {0x00B9, 0x00B9}, {0x0660, 0x0669}, {0x06F0, 0x06F9},
    {0x07C0, 0x07C9}, {0x0966, 0x096F}, {0x09E6, 0x09EF}, {0x0A66, 0x0A6F}, {0x0AE6, 0x0AEF},
    {0x0B66, 0x0B6F}, {0x0BE6, 0x0BEF}, {0x0C66, 0x0C6F}, {0x0CE6, 0x0CEF}, {0x0D66, 0x0D6F},
    {0x0DE6, 0x0DEF}, {0x0E50, 0x0E59}, {0x0ED0, 0x0ED9}, {0x0F20, 0x0F29}, {0x1040, 0x1049},
    {0x1090, 0x1099}, {0x1369, 0x1371}, {0x17E0, 0x17E9}, {0x1810, 0x1819}, {0x1946, 0x194F},
    {0x19D0, 0x19DA}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9},
    {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089},
    {0x2460, 0x2468}, {0x2474, 0x247C}, {0x2488, 0x2490}, {0x24EA, 0x24EA}, {0x24F5, 0x24FD},
    {0x24FF, 0x24FF}, {0x2776, 0x277E}, {0x2780, 0x2788}, {0x278A, 0x2792}, {0xA620, 0xA629},
    {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9}, {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59},
    {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x104A0, 0x104A9}, {0x10A40, 0x10A43}, {0x10D30, 0x10D39},
    {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x11066, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F},
    {0x111D0, 0x111D9}, {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659},
    {0x116C0, 0x116C9}, {0x11730, 0x11739}, {0x118E0, 0x118E9}, {0x11950, 0x11959}, {0x11C50, 0x11C59},
    {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59},
    {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E950, 0x1E959}, {0x1F100, 0x1F10A},
    {0x1FBF0, 0x1FBF9},
}};

using U32 = std::u32string;
using U32View = std::u32string_view;

// The text as Python sees it (core/py_text.h). Working on code points, not
// bytes, matters once the normaliser splices text: two escaped bytes
// brought together may spell a valid sequence, yet stay two characters.
U32 decode(std::string_view s) { return decode_surrogateescape(s); }
std::string encode(U32View s) { return encode_surrogateescape(s); }

// Python's str.replace(old, new): one left-to-right pass, non-overlapping.
void py_replace(U32& s, U32View old, U32View repl) {
  std::size_t at = s.find(old);
  if (at == U32::npos) return;
  U32 out;
  out.reserve(s.size());
  std::size_t from = 0;
  for (; at != U32::npos; at = s.find(old, from)) {
    out.append(s, from, at - from);
    out.append(repl);
    from = at + old.size();
  }
  out.append(s, from, U32::npos);
  s = std::move(out);
}

// The end of the line holding character i: the next '\n' at or after i, or the end.
std::size_t line_end(U32View s, std::size_t i) {
  const std::size_t nl = s.find(U'\n', i);
  return nl == U32View::npos ? s.size() : nl;
}

// re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s). '.' stops at '\n', so a
// match never leaves its line; it starts where the scan resumes (the line's
// start) when the rest of that line holds two '$', and then eats the whole
// line: the line becomes '$' + the text between its first two '$' + '$'.
U32 sub_dollars(U32View s) {
  U32 out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (true) {
    const std::size_t end = line_end(s, i);
    const U32View line = s.substr(i, end - i);
    const std::size_t d1 = line.find(U'$');
    const std::size_t d2 = d1 == U32View::npos ? d1 : line.find(U'$', d1 + 1);
    if (d2 != U32View::npos) {
      out += U'$';
      out.append(line.substr(d1 + 1, d2 - d1 - 1));
      out += U'$';
    } else {
      out.append(line);
    }
    if (end == s.size()) break;
    out += U'\n';
    i = end + 1;
  }
  return out;
}

// re.sub(r"(" + open + r")(.*?)(\})", "\\2", s) when lazy, "(.*)" when not:
// `open` and the braces' contents stay on one line; lazy ends at the first
// '}', greedy at the line's last. An opener with no '}' after it on its line
// fails, and so would every later opener on that line: skip to the '\n'.
U32 sub_braced(U32View s, U32View open, bool lazy) {
  if (s.find(open) == U32View::npos) return U32(s);
  U32 out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i).starts_with(open)) {
      const std::size_t body = i + open.size();
      const std::size_t end = line_end(s, body);
      const U32View rest = s.substr(body, end - body);
      const std::size_t close = lazy ? rest.find(U'}') : rest.rfind(U'}');
      if (close != U32View::npos) {
        out.append(rest.substr(0, close));
        i = body + close + 1;
      } else {
        out.append(s.substr(i, end - i));
        i = end;
      }
      continue;
    }
    out += s[i++];
  }
  return out;
}

// re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", s) (with_second) and
// re.sub(r"(sqrt)([^{])", "sqrt{\\2}", s): [^{] takes any one character,
// '\n' included; '.' any but '\n'.
U32 sub_shorthand(U32View s, U32View name, bool with_second) {
  if (s.find(name) == U32View::npos) return U32(s);
  U32 out;
  out.reserve(s.size() + 8);
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t x = i + name.size(), y = x + 1;
    if (s.substr(i).starts_with(name) && x < s.size() && s[x] != U'{' &&
        (!with_second || (y < s.size() && s[y] != U'\n'))) {
      out.append(name).append(U"{").append(1, s[x]).append(U"}");
      if (with_second) out.append(U"{").append(1, s[y]).append(U"}");
      i = with_second ? y + 1 : y;
      continue;
    }
    out += s[i++];
  }
  return out;
}

// str.strip(): Python's whitespace off both ends.
U32View py_strip(U32View s) {
  std::size_t first = 0, last = s.size();
  while (first < last && is_space(s[first])) ++first;
  while (last > first && is_space(s[last - 1])) --last;
  return s.substr(first, last - first);
}

// str.isdigit(): non-empty and every character a digit.
bool py_isdigit(U32View s) {
  if (s.empty()) return false;
  for (const char32_t c : s)
    if (!is_digit(c)) return false;
  return true;
}

// The characters `(?i)` lets match each letter of "answer": Python's re
// compares simple lower cases, plus its equivalence fix-ups (LONG S ~ s).
bool letter_matches(char32_t c, char32_t letter) {
  if (c == letter || c == letter - U'a' + U'A') return true;
  return letter == U's' && c == 0x17F;
}

// One attempt of (?i)Answer\s*:\s*([^\n]+) at character i. On success sets
// the group [group_begin, group_end), which is also where the match ends.
bool match_answer_at(U32View s, std::size_t i, std::size_t& group_begin, std::size_t& group_end) {
  for (const char32_t letter : U32View(U"answer")) {
    if (i >= s.size() || !letter_matches(s[i], letter)) return false;
    ++i;
  }
  while (i < s.size() && is_space(s[i])) ++i;  // \s*: ':' is no blank, so greedy is final
  if (i >= s.size() || s[i] != U':') return false;
  ++i;
  // \s* greedy, then [^\n]+ greedy. After a maximal run of blanks comes a
  // non-blank (so not '\n'): the group runs from there to the line's end.
  // When the blanks reach the end of the text, \s* backs off to the last
  // blank that is not '\n', and that one character is the group.
  std::size_t last_not_newline = U32View::npos;
  for (; i < s.size(); ++i) {
    if (!is_space(s[i])) {
      group_begin = i;
      group_end = line_end(s, i);
      return true;
    }
    if (s[i] != U'\n') last_not_newline = i;
  }
  if (last_not_newline == U32View::npos) return false;
  group_begin = last_not_newline;
  group_end = last_not_newline + 1;
  return true;
}

U32View last_chars_u32(U32View text, std::size_t n) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

U32 find_answer_u32(U32View window) {
  // re.findall keeps every non-overlapping match; only the last one counts.
  U32View last;
  bool found = false;
  std::size_t i = 0;
  while (i < window.size()) {
    std::size_t begin = 0, end = 0;
    if (match_answer_at(window, i, begin, end)) {
      last = window.substr(begin, end - begin);
      found = true;
      i = end;  // never empty: the match holds "answer"
    } else {
      ++i;
    }
  }
  return found ? U32(last) : U32(U"[INVALID]");
}

U32 normalize_u32(U32View answer) {
  // split("=")[-1]
  const std::size_t eq = answer.rfind(U'=');
  U32 s(eq == U32View::npos ? answer : answer.substr(eq + 1));

  static constexpr std::pair<U32View, U32View> kSubstitutions[] = {
      {U"an ", U""},         {U"a ", U""},          {U".$", U"$"},   {U"\\$", U""},
      {U"\\ ", U""},         {U" ", U""},           {U"mbox", U"text"}, {U",\\text{and}", U","},
      {U"\\text{and}", U","}, {U"\\text{m}", U"\\text{}"},
  };
  static constexpr U32View kRemoved[] = {
      U"square",    U"ways",      U"integers",     U"dollars",   U"mph",         U"inches",    U"hours",
      U"km",        U"units",     U"\\ldots",      U"sue",       U"points",      U"feet",      U"minutes",
      U"digits",    U"cents",     U"degrees",      U"cm",        U"gm",          U"pounds",    U"meters",
      U"meals",     U"edges",     U"students",     U"childrentickets",           U"multiples", U"\\text{s}",
      U"\\text{.}", U"\\text{\ns}", U"\\text{}^2", U"\\text{}^3", U"\\text{\n}", U"\\text{}",  U"\\mathrm{th}",
      U"^\\circ",   U"^{\\circ}", U"\\;",          U",\\!",      U"{,}",         U"\"",        U"\\dots",
  };
  for (const auto& [before, after] : kSubstitutions) py_replace(s, before, after);
  for (const U32View expr : kRemoved) py_replace(s, expr, U"");

  s = sub_dollars(s);
  s = sub_braced(s, U"\\text{", true);
  s = sub_braced(s, U"\\textbf{", true);
  s = sub_braced(s, U"\\overline{", true);
  s = sub_braced(s, U"\\boxed{", false);
  s = sub_shorthand(s, U"frac", true);
  s = sub_shorthand(s, U"sqrt", false);
  py_replace(s, U"$", U"");

  U32 no_commas = s;
  py_replace(no_commas, U",", U"");
  if (py_isdigit(no_commas)) s = std::move(no_commas);
  return U32(py_strip(s));
}

}  // namespace

bool is_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_digit(char32_t c) {
  if (c < 0x80) return c >= U'0' && c <= U'9';
  const auto it = std::upper_bound(kDigitRanges.begin(), kDigitRanges.end(), c,
                                   [](char32_t v, const auto& r) { return v < r.first; });
  return it != kDigitRanges.begin() && c <= std::prev(it)->second;
}

std::string last_chars(std::string_view text, std::size_t n) { return encode(last_chars_u32(decode(text), n)); }
std::string find_answer(std::string_view window) { return encode(find_answer_u32(decode(window))); }
std::string normalize_final_answer(std::string_view answer) { return encode(normalize_u32(decode(answer))); }

}  // namespace math_dapo_detail

Verdict verify_math_dapo(std::string_view response, std::string_view ground_truth) {
  using namespace math_dapo_detail;
  const U32 text = decode(response);
  const U32 pred = normalize_u32(find_answer_u32(last_chars_u32(text, 300)));
  Verdict v;
  v.acc = pred == normalize_u32(decode(ground_truth));
  v.score = v.acc ? 1.0 : -1.0;
  v.pred = encode(pred);
  return v;
}

}  // namespace dapo::reward
