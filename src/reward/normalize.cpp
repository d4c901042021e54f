// Rules 2-5 of normalize.h: LaTeX clean-up, spaces, trailing punctuation and
// units, thousands separators. Every pass is a linear scan; nested groups
// recurse at most kMaxDepth deep, deeper text is copied as is.
#include "dapo/reward/normalize.h"

#include <algorithm>
#include <iterator>
#include <cctype>
#include <cstring>

namespace dapo::reward {
namespace {

constexpr int kMaxDepth = 32;

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_alpha(c) || is_digit(c); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

template <size_t N>
bool one_of(std::string_view s, const std::string_view (&set)[N]) {
  return std::find(std::begin(set), std::end(set), s) != std::end(set);
}

constexpr std::string_view kDelimiterSizers[] = {
    "left", "right", "middle", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "bigm", "Bigl",
    "Bigr", "Bigm", "biggl", "biggr", "biggm", "Biggl", "Biggr", "Biggm"};
constexpr std::string_view kSpacing[] = {
    "quad", "qquad", "enspace", "enskip", "thinspace", "medspace", "thickspace", "negthinspace",
    "negmedspace", "negthickspace", "displaystyle", "textstyle", "scriptstyle", "limits", "nolimits", "space"};
constexpr std::string_view kSkipWithArgument[] = {
    "hspace", "vspace", "phantom", "hphantom", "vphantom", "label", "tag", "kern"};
constexpr std::string_view kUnwrap[] = {
    "text", "textbf", "textit", "textrm", "textsf", "texttt", "textup", "textnormal", "textmd",
    "mathrm", "mathbf", "mathit", "mathsf", "mathtt", "mathnormal", "mbox", "hbox", "operatorname",
    "boldsymbol", "bm", "boxed", "fbox", "framebox", "emph", "mathbb", "pmb", "bf"};

// Index just past the group opened by in[i] == '{', or npos when unbalanced.
size_t match_brace(std::string_view in, size_t i) {
  int depth = 0;
  for (; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '\\') {
      ++i;  // an escaped brace does not count
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t skip_spaces(std::string_view in, size_t i) {
  while (i < in.size() && is_space(in[i])) ++i;
  return i;
}

// True when in[i..] holds nothing but spaces, trailing punctuation and an
// optional ^2 / ^3 (a unit's power).
bool only_tail_left(std::string_view in, size_t i) {
  for (; i < in.size(); ++i) {
    const char c = in[i];
    if (is_space(c) || c == '.' || c == ',' || c == ';' || c == ':' || c == '$' || c == '}' || c == '^' ||
        c == '{' || c == '2' || c == '3')
      continue;
    if (c == '\\' && i + 1 < in.size() && (in[i + 1] == ']' || in[i + 1] == ')')) {
      ++i;
      continue;
    }
    return false;
  }
  return true;
}

// Index after "\circ" forms at in[i] (just after a '^'), or 0 when there is none.
size_t degree_end(std::string_view in, size_t i) {
  size_t j = skip_spaces(in, i);
  const bool braced = j < in.size() && in[j] == '{';
  if (braced) j = skip_spaces(in, j + 1);
  if (in.substr(j, 5) != "\\circ" || (j + 5 < in.size() && is_alpha(in[j + 5]))) return 0;
  j += 5;
  if (braced) {
    j = skip_spaces(in, j);
    if (j >= in.size() || in[j] != '}') return 0;
    ++j;
  }
  return j;
}

// Letters and spaces only, without the words that join alternatives.
bool is_counted_noun(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && is_alpha(s[j])) ++j;
    if (j == i) return false;
    const std::string_view word = s.substr(i, j - i);
    if (word == "or" || word == "and" || word == "to" || word == "not" || word == "less" || word == "more")
      return false;
    i = j;
  }
  return true;
}

void strip(std::string_view in, std::string& out, int depth);

// Appends the argument of a text-like command at in[i]: a braced group or a
// single character. Returns the index after it.
size_t unwrap_argument(std::string_view in, size_t i, std::string& out, int depth) {
  i = skip_spaces(in, i);
  if (i >= in.size()) return i;
  if (in[i] == '{') {
    const size_t end = match_brace(in, i);
    const size_t stop = end == std::string_view::npos ? in.size() : end - 1;
    strip(in.substr(i + 1, stop - i - 1), out, depth + 1);
    return end == std::string_view::npos ? in.size() : end;
  }
  out += ' ';  // "\text x" / "\boxed 5": one token
  size_t j = i;
  while (j < in.size() && !is_space(in[j]) && in[j] != '$') ++j;
  strip(in.substr(i, j - i), out, depth + 1);
  return j;
}

void strip(std::string_view in, std::string& out, int depth) {
  if (depth > kMaxDepth) {
    out.append(in);
    return;
  }
  size_t i = 0;
  while (i < in.size()) {
    const char c = in[i];
    if (c == '$' || c == '%') {
      ++i;
    } else if (is_space(c) || c == '~') {
      out += ' ';
      ++i;
    } else if (c == '^') {
      if (const size_t e = degree_end(in, i + 1)) {
        i = e;
        // 30^\circ C: the temperature scale goes with the degree sign.
        const size_t k = skip_spaces(in, i);
        if (k < in.size() && (in[k] == 'C' || in[k] == 'F') && (k + 1 == in.size() || !is_alnum(in[k + 1])))
          i = k + 1;
      } else {
        out += '^';
        ++i;
      }
    } else if (c != '\\') {
      out += c;
      ++i;
    } else if (i + 1 >= in.size()) {
      ++i;
    } else if (!is_alpha(in[i + 1])) {
      const char s = in[i + 1];
      i += 2;
      switch (s) {
        case '(': case ')': case '[': case ']': case '$': case '%': case '#': case '&':
          break;
        case ',': case ';': case ':': case '!': case ' ': case '>': case '\\': case '\n': case '\t':
          out += ' ';
          break;
        case '{': out += "\\{"; break;
        case '}': out += "\\}"; break;
        case '|': out += '|'; break;
        default:
          out += '\\';
          out += s;
      }
    } else {
      size_t j = i + 1;
      while (j < in.size() && is_alpha(in[j])) ++j;
      const std::string_view name = in.substr(i + 1, j - i - 1);
      i = j;
      if (one_of(name, kDelimiterSizers)) {
        const size_t k = skip_spaces(in, i);
        if (k < in.size() && in[k] == '.') i = k + 1;  // \left. is an empty delimiter
      } else if (one_of(name, kSpacing)) {
        out += ' ';
      } else if (one_of(name, kSkipWithArgument)) {
        size_t k = skip_spaces(in, i);
        if (k < in.size() && in[k] == '*') ++k;
        if (k < in.size() && in[k] == '{') {
          const size_t e = match_brace(in, k);
          i = e == std::string_view::npos ? in.size() : e;
        }
      } else if (one_of(name, kUnwrap)) {
        const size_t mark = out.size();
        const size_t e = unwrap_argument(in, i, out, depth);
        // Words in text at the end, right after a number, name what was
        // counted: "5\text{ m}", "12\text{ students}". Not "or"/"and" (a
        // hedge), not a box.
        std::string_view added = std::string_view(out).substr(mark);
        while (!added.empty() && is_space(added.front())) added.remove_prefix(1);
        while (!added.empty() && is_space(added.back())) added.remove_suffix(1);
        size_t before = mark;
        while (before > 0 && is_space(out[before - 1])) --before;
        i = e;
        if (name != "boxed" && name != "fbox" && is_counted_noun(added) && before > 0 &&
            (is_digit(out[before - 1]) || out[before - 1] == '}') && only_tail_left(in, e)) {
          out.resize(mark);
          // The unit's power goes with it: \text{ cm}^2, \text{ m}^{3}.
          const size_t k = skip_spaces(in, e);
          if (in.substr(k, 4) == "^{2}" || in.substr(k, 4) == "^{3}") {
            i = k + 4;
          } else if (in.substr(k, 2) == "^2" || in.substr(k, 2) == "^3") {
            i = k + 2;
          }
        }
      } else if (name == "dfrac" || name == "tfrac" || name == "cfrac") {
        out += "\\frac";
      } else if (name == "dbinom" || name == "tbinom") {
        out += "\\binom";
      } else if (name == "cdot" || name == "times" || name == "ast" || name == "centerdot") {
        out += '*';
      } else if (name == "div") {
        out += '/';
      } else if (name == "le" || name == "leq" || name == "leqslant") {
        out += "<=";
      } else if (name == "ge" || name == "geq" || name == "geqslant") {
        out += ">=";
      } else if (name == "lt") {
        out += '<';
      } else if (name == "gt") {
        out += '>';
      } else if (name == "neq") {
        out += "\\ne";
      } else if (name == "circ" || name == "degree") {
        // a degree sign without ^
      } else if (name == "lbrace") {
        out += "\\{";
      } else if (name == "rbrace") {
        out += "\\}";
      } else if (name == "lvert" || name == "rvert" || name == "vert" || name == "mid" || name == "lVert" ||
                 name == "rVert" || name == "Vert") {
        out += '|';
      } else if (name == "langle") {
        out += '(';
      } else if (name == "rangle") {
        out += ')';
      } else if (name == "varnothing") {
        out += "\\emptyset";
      } else if (name == "colon") {
        out += ':';
      } else {
        out += '\\';
        out.append(name);
        if (i < in.size() && is_alpha(in[i])) out += ' ';
      }
    }
  }
}

// Keeps a space only between two letters/digits.
std::string squeeze_spaces(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != ' ') {
      out += in[i];
      continue;
    }
    size_t j = i;
    while (j < in.size() && in[j] == ' ') ++j;
    if (!out.empty() && j < in.size() && is_alnum(out.back()) && is_alnum(in[j])) out += ' ';
    i = j - 1;
  }
  return out;
}

constexpr std::string_view kUnitWords[] = {
    "cm", "mm", "km", "nm", "meter", "meters", "metre", "metres", "centimeter", "centimeters",
    "millimeter", "millimeters", "kilometer", "kilometers", "inch", "inches", "ft", "feet", "foot", "yd",
    "yard", "yards", "mile", "miles", "mph", "kph", "kmh", "sec", "secs", "second", "seconds", "min",
    "mins", "minute", "minutes", "hr", "hrs", "hour", "hours", "day", "days", "week", "weeks", "month",
    "months", "year", "years", "kg", "mg", "gram", "grams", "kilogram", "kilograms", "lb", "lbs", "pound",
    "pounds", "oz", "ounce", "ounces", "dollar", "dollars", "cent", "cents", "unit", "units", "sq",
    "square", "cubic", "degree", "degrees", "deg", "radian", "radians", "percent", "ml", "liter", "liters",
    "litre", "litres", "gallon", "gallons", "ways", "points", "point", "students", "people", "persons",
    "times", "steps", "moves", "items", "apples", "cookies", "marbles"};

bool is_unit_word(std::string_view w) {
  std::string lower(w);
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return one_of(std::string_view(lower), kUnitWords);
}

void trim_tail(std::string& s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '.' || s.back() == ',' || s.back() == ';' ||
                        s.back() == ':'))
    s.pop_back();
  // "5\" (a line-break backslash cut in half) or a dangling "\\"
  while (!s.empty() && s.back() == '\\') s.pop_back();
}

// 1{,}000 -> 1,000 (three digits follow: thousands); 3{,}5 -> 3.5 (decimal comma).
std::string latex_commas(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in.substr(i, 3) == "{,}" && i > 0 && is_digit(in[i - 1]) && i + 3 < in.size() && is_digit(in[i + 3])) {
      size_t k = i + 3;
      while (k < in.size() && is_digit(in[k])) ++k;
      out += (k - (i + 3) == 3) ? ',' : '.';
      i += 2;
      continue;
    }
    out += in[i];
  }
  return out;
}

// "-1,234,567.5" or "1 000": one number with a thousands separator throughout.
bool drop_thousands(std::string& s) {
  size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  size_t lead = 0;
  while (i + lead < s.size() && is_digit(s[i + lead])) ++lead;
  if (lead < 1 || lead > 3 || i + lead >= s.size()) return false;
  const char sep = s[i + lead];
  if (sep != ',' && sep != ' ') return false;
  size_t k = i + lead, groups = 0;
  while (k < s.size() && s[k] == sep) {
    if (k + 4 > s.size()) return false;
    for (size_t d = 1; d <= 3; ++d)
      if (!is_digit(s[k + d])) return false;
    k += 4;
    ++groups;
  }
  if (k < s.size()) {
    if (s[k] != '.' || k + 1 >= s.size()) return false;
    for (size_t d = k + 1; d < s.size(); ++d)
      if (!is_digit(s[d])) return false;
  }
  if (groups == 0) return false;
  s.erase(std::remove(s.begin(), s.end(), sep), s.end());
  return true;
}

}  // namespace

std::string strip_latex(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  strip(text, out, 0);
  return squeeze_spaces(out);
}

std::string strip_trailing_units(std::string_view text) {
  std::string s(text);
  for (int round = 0; round < 4; ++round) {
    size_t e = s.size();
    // An optional power of the unit: cm^2, m^{3}.
    if (e >= 2 && s[e - 2] == '^' && (s[e - 1] == '2' || s[e - 1] == '3')) {
      e -= 2;
    } else if (e >= 4 && s.compare(e - 4, 2, "^{") == 0 && (s[e - 2] == '2' || s[e - 2] == '3') &&
               s[e - 1] == '}') {
      e -= 4;
    }
    size_t b = e;
    while (b > 0 && is_alpha(s[b - 1])) --b;
    if (b == e || b == 0 || s[b - 1] == '\\' || s[b - 1] == '_') break;
    const std::string_view word = std::string_view(s).substr(b, e - b);
    if (!is_unit_word(word)) {
      // The denominator of a compound unit may be one letter: km/h, m/s.
      size_t a = b - 1;
      if (s[a] != '/' || word.size() != 1 || !std::strchr("shmlg", word[0])) break;
      while (a > 0 && is_alpha(s[a - 1])) --a;
      const std::string_view numerator = std::string_view(s).substr(a, b - 1 - a);
      if (numerator.empty() || a == 0 || (!is_unit_word(numerator) && numerator != "m")) break;
      b = a;
    }
    size_t p = b;
    while (p > 0 && (s[p - 1] == ' ' || s[p - 1] == '/')) --p;
    if (p == 0) break;  // nothing but the unit: the unit is the answer
    s.resize(p);
  }
  return s;
}

std::string normalize_answer(std::string_view answer) {
  // Control characters other than whitespace (a NUL or \x01 a model
  // emitted before its answer) are invisible: dropped, as normalize_unicode
  // drops a NUL, so that they change nothing of what is written.
  std::string visible;
  visible.reserve(answer.size());
  for (const char c : answer)
    if ((static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) || is_space(c)) visible += c;
  std::string s = strip_latex(normalize_unicode(visible));
  s = latex_commas(s);
  // Leading "=" / ":" and spaces, trailing punctuation.
  size_t lead = 0;
  while (lead < s.size() && (s[lead] == ' ' || s[lead] == '=' || s[lead] == ':')) ++lead;
  s.erase(0, lead);
  trim_tail(s);
  s = strip_trailing_units(s);
  trim_tail(s);
  drop_thousands(s);
  if (s.size() == 3 && s[0] == '(' && s[2] == ')' && is_alpha(s[1])) s = std::string(1, s[1]);
  return s;
}

}  // namespace dapo::reward
