// Answer extraction: the last "Answer:" line, else the last box (extract.h).
#include "dapo/reward/extract.h"

#include <cstring>
#include <vector>

namespace dapo::reward {
namespace {

constexpr size_t kMaxGroup = 16;        // boxes gathered into one final answer
constexpr size_t kMaxGroupSpan = 1024;  // bytes from one grouped box's start to the next

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Start of the last full-width colon (EF BC 9A) before `end`, or npos.
size_t last_wide_colon(std::string_view s, size_t end) {
  while (end > 0) {
    const void* b = memrchr(s.data(), '\x9A', end);
    if (!b) return std::string_view::npos;
    const size_t p = size_t(static_cast<const char*>(b) - s.data());
    if (p >= 2 && s[p - 2] == '\xEF' && s[p - 1] == '\xBC') return p - 2;
    end = p;
  }
  return std::string_view::npos;
}

size_t last_ascii_colon(std::string_view s, size_t end) {
  const void* a = end ? memrchr(s.data(), ':', end) : nullptr;
  return a ? size_t(static_cast<const char*>(a) - s.data()) : std::string_view::npos;
}

// Drops markdown emphasis around the content and the phrases of the
// "The final answer is $X$. I hope it is correct." format.
std::string_view clean_answer_line(std::string_view s) {
  s = trim(s);
  for (int round = 0; round < 3; ++round) {
    while (!s.empty() && (s.front() == '*' || s.front() == '_')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == '*' || s.back() == '_')) s.remove_suffix(1);
    s = trim(s);
  }
  for (std::string_view prefix : {"the final answer is", "the answer is", "final answer is"}) {
    if (s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix)) {
      s = trim(s.substr(prefix.size()));
      break;
    }
  }
  constexpr std::string_view kHope = "I hope it is correct";
  if (s.size() >= kHope.size() + 1) {
    std::string_view t = s;
    while (!t.empty() && (t.back() == '.' || is_space(t.back()))) t.remove_suffix(1);
    if (t.size() >= kHope.size() && iequals(t.substr(t.size() - kHope.size()), kHope)) {
      s = trim(t.substr(0, t.size() - kHope.size()));
      while (!s.empty() && s.back() == '.') s.remove_suffix(1);
      s = trim(s);
    }
  }
  return s;
}

// A box starting at text[p] ("\boxed" or "\fbox"): its content and the index
// after it. nullopt when the name goes on ("\boxedx") or the braces never close.
struct Box {
  std::string_view content;
  size_t begin = 0, end = 0;
};

std::optional<Box> box_at(std::string_view text, size_t p) {
  const size_t name = text.compare(p, 6, "\\boxed") == 0 ? 6 : (text.compare(p, 5, "\\fbox") == 0 ? 5 : 0);
  if (!name) return std::nullopt;
  size_t i = p + name;
  if (i < text.size() && is_alpha(text[i])) return std::nullopt;
  while (i < text.size() && is_space(text[i])) ++i;
  if (i >= text.size()) return std::nullopt;
  if (text[i] == '{') {
    int depth = 0;
    for (size_t j = i; j < text.size(); ++j) {
      if (text[j] == '\\') {
        ++j;
      } else if (text[j] == '{') {
        ++depth;
      } else if (text[j] == '}' && --depth == 0) {
        return Box{text.substr(i + 1, j - i - 1), p, j + 1};
      }
    }
    return std::nullopt;
  }
  if (i == p + name) return std::nullopt;  // "\boxed5" is not LaTeX
  size_t j = i;
  while (j < text.size() && !is_space(text[j]) && text[j] != '$') ++j;
  return Box{text.substr(i, j - i), p, j};
}

// Start of the last "\boxed" / "\fbox" in [lo, end), or npos.
size_t last_box_start(std::string_view text, size_t end, size_t lo = 0) {
  while (end > lo) {
    const void* b = memrchr(text.data() + lo, '\\', end - lo);
    if (!b) return std::string_view::npos;
    const size_t p = size_t(static_cast<const char*>(b) - text.data());
    if (text.compare(p, 6, "\\boxed") == 0 || text.compare(p, 5, "\\fbox") == 0) return p;
    end = p;
  }
  return std::string_view::npos;
}

// True when the text between two boxes only separates them: spaces,
// punctuation, math delimiters, spacing commands, "or"/"and" (maybe in \text).
bool only_separators(std::string_view gap) {
  for (size_t i = 0; i < gap.size();) {
    const char c = gap[i];
    if (is_space(c) || c == ',' || c == ';' || c == '.' || c == '$' || c == '{' || c == '}' || c == '&' ||
        c == '~') {
      ++i;
    } else if (c == '\\') {
      size_t j = i + 1;
      while (j < gap.size() && is_alpha(gap[j])) ++j;
      const std::string_view name = gap.substr(i + 1, j - i - 1);
      if (name.empty()) {
        if (j >= gap.size()) return true;
        const char s = gap[j];
        if (s != '[' && s != ']' && s != '(' && s != ')' && s != ',' && s != ';' && s != ' ' && s != '\\' &&
            s != '!' && s != ':')
          return false;
        i = j + 1;
      } else if (name == "quad" || name == "qquad" || name == "text" || name == "textrm" || name == "mathrm" ||
                 name == "mbox" || name == "hspace") {
        i = j;
      } else {
        return false;
      }
    } else if (is_alpha(c)) {
      size_t j = i;
      while (j < gap.size() && is_alpha(gap[j])) ++j;
      const std::string_view word = gap.substr(i, j - i);
      if (!iequals(word, "or") && !iequals(word, "and") && word != "em" && word != "pt") return false;
      i = j;
    } else {
      return false;
    }
  }
  return true;
}

// A cheap test before looking for an earlier box of the group: skipping
// spaces, punctuation and math delimiters back from `begin` must reach a '}'
// (the end of a box, or of \text{ or }) or the word "or"/"and".
bool may_follow_box(std::string_view text, size_t begin) {
  size_t i = begin;
  while (i > 0) {
    const char c = text[i - 1];
    if (is_space(c) || c == '$' || c == ',' || c == ';' || c == '.' || c == '&' || c == '~' || c == '[' ||
        c == ']' || c == '(' || c == ')' || c == '\\') {
      --i;
      continue;
    }
    if (c == '}') return true;
    size_t j = i;
    while (j > 0 && is_alpha(text[j - 1])) --j;
    const std::string_view word = text.substr(j, i - j);
    return iequals(word, "or") || iequals(word, "and") || word == "quad" || word == "qquad";
  }
  return false;
}

// Whether the marker at `p` opens its line: only spaces, markdown (* _ # >
// -) and the words "final" / "the" may come before it.
bool starts_line(std::string_view text, size_t p) {
  size_t i = p;
  while (i > 0) {
    const char c = text[i - 1];
    if (c == '\n') return true;
    if (c == ' ' || c == '\t' || c == '*' || c == '_' || c == '#' || c == '>' || c == '-') {
      --i;
      continue;
    }
    size_t j = i;
    while (j > 0 && is_alpha(text[j - 1])) --j;
    const std::string_view word = text.substr(j, i - j);
    if (!iequals(word, "final") && !iequals(word, "the")) return false;
    i = j;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> last_answer_line(std::string_view response, bool anywhere) {
  constexpr size_t npos = std::string_view::npos;
  // Two backward streams of colons, each scanned once: ASCII and full-width.
  size_t ascii = last_ascii_colon(response, response.size());
  size_t wide = last_wide_colon(response, response.size());
  while (ascii != npos || wide != npos) {
    const bool take_wide = wide != npos && (ascii == npos || wide > ascii);
    const size_t colon = take_wide ? wide : ascii;
    const size_t width = take_wide ? 3 : 1;
    if (take_wide) {
      wide = last_wide_colon(response, colon);
    } else {
      ascii = last_ascii_colon(response, colon);
    }
    // "answer", then markdown/space, then the colon: "**Answer:**", "Answer :".
    size_t k = colon;
    while (k > 0 && (response[k - 1] == '*' || response[k - 1] == '_' || response[k - 1] == ' ')) --k;
    if (k < 6 || !iequals(response.substr(k - 6, 6), "answer")) continue;
    if (k > 6 && is_alpha(response[k - 7])) continue;  // "reanswer:" is not the marker
    if (!anywhere && !starts_line(response, k - 6)) continue;
    const size_t from = colon + width;
    size_t to = response.find('\n', from);
    if (to == npos) to = response.size();
    const std::string_view content = clean_answer_line(response.substr(from, to - from));
    if (content.empty()) return std::nullopt;  // the last marker has no answer: use the box
    return content;
  }
  return std::nullopt;
}

std::optional<std::string_view> last_boxed(std::string_view text) {
  size_t end = text.size();
  while (true) {
    const size_t p = last_box_start(text, end);
    if (p == std::string_view::npos) return std::nullopt;
    const size_t name = text[p + 1] == 'b' ? 6 : 5;
    if (p + name < text.size() && is_alpha(text[p + name])) {  // \boxedx: some other command
      end = p;
      continue;
    }
    const auto box = box_at(text, p);
    if (!box) return std::nullopt;  // unbalanced: the response was cut off in its answer
    return box->content;
  }
}

ExtractedAnswer extract_answer(std::string_view response) {
  ExtractedAnswer out;
  if (const auto line = last_answer_line(response)) {
    out.source = AnswerSource::answer_line;
    out.text = std::string(*line);
    out.candidates = 1;
    return out;
  }
  // The last box, then the boxes just before it with nothing but separators between.
  std::vector<Box> group;
  size_t end = response.size();
  while (group.size() < kMaxGroup) {
    if (!group.empty() && !may_follow_box(response, group.back().begin)) break;
    // A box of the group starts at most kMaxGroupSpan bytes before the next one.
    const size_t lo = group.empty() || end < kMaxGroupSpan ? 0 : end - kMaxGroupSpan;
    const size_t p = last_box_start(response, end, lo);
    if (p == std::string_view::npos) break;
    end = p;
    const auto box = box_at(response, p);
    if (!box) {
      const size_t name = response[p + 1] == 'b' ? 6 : 5;
      if (p + name < response.size() && is_alpha(response[p + name])) continue;  // not a box
      if (group.empty()) return out;  // the last box never closes
      break;
    }
    if (!group.empty()) {
      const Box& next = group.back();
      if (box->end > next.begin) break;  // encloses the later box: \boxed{\boxed{5}}
      if (!only_separators(response.substr(box->end, next.begin - box->end))) break;
    }
    group.push_back(*box);
  }
  if (group.empty()) {
    // Last resort: an "answer:" in the middle of a line ("So the answer: 5").
    if (const auto line = last_answer_line(response, true)) {
      out.source = AnswerSource::answer_line;
      out.text = std::string(*line);
      out.candidates = 1;
    }
    return out;
  }
  out.source = AnswerSource::boxed;
  std::vector<std::string_view> distinct;
  for (size_t i = group.size(); i-- > 0;) {
    const std::string_view c = trim(group[i].content);
    bool seen = false;
    for (const auto& d : distinct) seen = seen || d == c;
    if (!seen) distinct.push_back(c);
  }
  for (size_t i = 0; i < distinct.size(); ++i) {
    if (i) out.text += ", ";
    out.text.append(distinct[i]);
  }
  out.candidates = int(distinct.size());
  return out;
}

}  // namespace dapo::reward
