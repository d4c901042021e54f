// PCRE2 behind the pre-tokenizer: the Oniguruma -> PCRE2 escape rewrite, one
// JIT compilation per pattern, and matching with per-thread scratch state.
#include "dapo/data/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "dapo/core/error.h"
#include "dapo/data/tokenizer_utf8.h"

namespace dapo::data {
namespace {

// Oniguruma's \s (Unicode White_Space), written without the brackets so it
// can go inside a class as well.
constexpr const char* kSpace =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";
// Oniguruma's \w ([[:Word:]]: Alphabetic, M, Nd, Pc, Join_Control).
constexpr const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
constexpr const char* kHex = "0-9a-fA-F";

std::string pcre2_error_text(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string onig_to_pcre2(std::string_view p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t class_start = 0;  // index just after '[' or '[^'
  auto refuse = [&](const std::string& what) {
    throw UserError(cat(where, ": ", what, " in the pattern '", std::string(p),
                        "' is not supported (dapo matches with PCRE2, not Oniguruma)"));
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) refuse("a trailing backslash");
      const char e = p[++i];
      auto set = [&](const char* body, bool negate) {
        if (in_class) {
          if (negate) refuse(cat("the escape \\", e, " inside a character class"));
          out += body;
        } else {
          out += negate ? "[^" : "[";
          out += body;
          out += ']';
        }
      };
      switch (e) {
        case 's': set(kSpace, false); break;
        case 'S': set(kSpace, true); break;
        case 'w': set(kWord, false); break;
        case 'W': set(kWord, true); break;
        case 'h': set(kHex, false); break;
        case 'H': set(kHex, true); break;
        case 'v': out += "\\x{0B}"; break;
        case 'b':
          if (in_class) {
            out += "\\x{08}";  // backspace inside a class, in both engines
            break;
          }
          refuse("the word boundary \\b");
          break;
        case 'B': refuse("the escape \\B"); break;
        case 'u': {
          const std::string_view hex = p.substr(i + 1, 4);
          if (hex.size() != 4 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
            refuse("a malformed \\u escape");
          out += "\\x{";
          out += hex;
          out += '}';
          i += 4;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (!in_class) {
      out += c;
      if (c == '[') {
        in_class = true;
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
        class_start = i + 1;
      }
      continue;
    }
    // Inside a class.
    if (c == ']' && i != class_start) {
      in_class = false;
      out += c;
    } else if (c == '[') {
      if (i + 1 < p.size() && p[i + 1] == ':') {
        const size_t close = p.find(":]", i + 2);
        if (close == std::string_view::npos) refuse("an unterminated POSIX bracket");
        out += p.substr(i, close + 2 - i);
        i = close + 1;
      } else {
        refuse("a nested character class");
      }
    } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
      refuse("a class intersection (&&)");
    } else {
      out += c;
    }
  }
  return out;
}

struct RegexScratch::State {
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
};

RegexScratch::RegexScratch(size_t jit_stack_bytes) : state_(std::make_unique<State>()) {
  state_->match = pcre2_match_data_create(1, nullptr);  // only the whole match is read
  state_->context = pcre2_match_context_create(nullptr);
  state_->stack = pcre2_jit_stack_create(std::min<size_t>(32 * 1024, jit_stack_bytes), jit_stack_bytes, nullptr);
  DAPO_CHECK(state_->match && state_->context && state_->stack, "PCRE2 allocation failed");
  pcre2_jit_stack_assign(state_->context, nullptr, state_->stack);
}

RegexScratch::~RegexScratch() {
  if (!state_) return;
  pcre2_match_data_free(state_->match);
  pcre2_match_context_free(state_->context);
  pcre2_jit_stack_free(state_->stack);
}

RegexScratch::RegexScratch(RegexScratch&&) noexcept = default;
RegexScratch& RegexScratch::operator=(RegexScratch&& other) noexcept {
  std::swap(state_, other.state_);
  return *this;
}

struct SplitRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

SplitRegex::SplitRegex(std::string_view pattern, bool literal, const std::string& where)
    : code_(std::make_unique<Code>()) {
  pattern_ = literal ? std::string(pattern) : onig_to_pcre2(pattern, where);
  if (!utf8_valid(pattern_)) throw UserError(cat(where, ": the pattern is not valid UTF-8"));
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), options, &error,
                              &offset, nullptr);
  if (!code_->code)
    throw UserError(cat(where, ": the pattern '", std::string(pattern), "' does not compile (PCRE2: ",
                        pcre2_error_text(error), " at offset ", offset, " of '", pattern_, "')"));
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

bool SplitRegex::find(std::string_view text, size_t from, RegexScratch& scratch, size_t* begin,
                      size_t* end) const {
  RegexScratch::State& s = scratch.state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), from, 0, s.match, s.context)
                      : pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, s.match,
                                    s.context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
    rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s.match,
                     s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    throw UserError(cat("pre-tokenizer pattern '", pattern_, "' failed on a text of ", text.size(),
                        " bytes: PCRE2: ", pcre2_error_text(rc)));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

size_t SplitRegex::char_length(std::string_view text, size_t at) {
  const auto c = static_cast<unsigned char>(text[at]);
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

}  // namespace dapo::data
