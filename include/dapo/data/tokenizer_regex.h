// The pre-tokenizer's regular expressions: HF tokenizers compiles them with
// Oniguruma; dapo compiles them with PCRE2 (UTF + UCP, JIT once per pattern)
// after rewriting the escapes whose meaning differs between the two engines,
// and splits text around the matches as HF's `Isolated` behaviour does.
// Internal to the data module; public so that tests can pin it down.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace dapo::data {

// `pattern` (Oniguruma syntax, as tokenizer.json writes it) rewritten for
// PCRE2 so that both engines accept the same text:
//   \s, \S  -> Oniguruma's Unicode White_Space set (PCRE2's \s adds U+180E)
//   \w, \W  -> Alphabetic, marks, decimal digits, connector punctuation
//   \h, \H  -> hexadecimal digits (PCRE2: horizontal space)
//   \v      -> U+000B (PCRE2: vertical space)       \uHHHH -> \x{HHHH}
// Constructs whose meaning cannot be carried over are refused with a
// UserError "WHERE: ... is not supported": \b, \B, a negated class escape
// (\S, \W, \H) inside [...], nested classes and class set operations (&&).
std::string onig_to_pcre2(std::string_view pattern, const std::string& where);

// Per-thread matching state (match data and JIT stack). Create one per
// thread; any SplitRegex can use it. Not thread-safe itself.
class RegexScratch {
 public:
  // jit_stack_bytes: the most stack the JIT may use; a match that needs more
  // (very long white-space runs under a lookahead) reruns in PCRE2's
  // interpreter, which backtracks on the heap, with the same result.
  explicit RegexScratch(size_t jit_stack_bytes = size_t(8) << 20);
  ~RegexScratch();
  RegexScratch(RegexScratch&&) noexcept;
  RegexScratch& operator=(RegexScratch&&) noexcept;
  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

// A compiled pre-tokenizer pattern. Immutable after construction: find()
// and split() may run on many threads at once, each with its own scratch.
class SplitRegex {
 public:
  // `pattern` in Oniguruma syntax (HF's {"Regex": ...}), or, with `literal`,
  // a plain string to find (HF's {"String": ...}). Throws UserError naming
  // `where` (file and component) when the pattern does not compile.
  SplitRegex(std::string_view pattern, bool literal, const std::string& where);
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  // The first match in `text` that starts at or after byte `from` (a
  // character boundary): true and [*begin, *end), or false. `text` must be
  // well-formed UTF-8 (not checked again). Lookarounds see all of `text`.
  bool find(std::string_view text, size_t from, RegexScratch& scratch, size_t* begin, size_t* end) const;

  // HF's Split with behaviour Isolated (invert false): calls fn(piece) for
  // every match and every stretch between matches, in order, skipping empty
  // pieces; an empty match splits the text where it occurs. After an empty
  // match the search moves on by one character, as Oniguruma's iterator does.
  template <class Fn>
  void split(std::string_view text, RegexScratch& scratch, Fn&& fn) const {
    size_t pos = 0, prev = 0, b = 0, e = 0;
    while (pos <= text.size() && find(text, pos, scratch, &b, &e)) {
      if (b > prev) fn(text.substr(prev, b - prev));
      if (e > b) {
        fn(text.substr(b, e - b));
        pos = e;
      } else {
        if (b >= text.size()) {
          prev = b;
          break;
        }
        pos = b + char_length(text, b);
      }
      prev = e;
    }
    if (prev < text.size()) fn(text.substr(prev));
  }

  const std::string& pcre2_pattern() const { return pattern_; }

 private:
  static size_t char_length(std::string_view text, size_t at);
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_;
};

}  // namespace dapo::data
