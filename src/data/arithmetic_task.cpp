// Arithmetic word problems for the demo: templates filled from Philox draws.
// The order of the draws below is part of the output format: reordering them
// changes every shipped demo file (tests/apps/test_demo_data_cli.cpp notices).
#include "dapo/data/arithmetic_task.h"

#include <algorithm>
#include <array>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"

namespace dapo::data {
namespace {

struct Person {
  const char* name;
  const char* pronoun;  // lower case; capitalised at the start of a sentence
};

// Small word lists on purpose: the demo tokenizer has a few hundred tokens,
// and every word here should be one or two of them.
constexpr std::array<Person, 8> kPeople = {{{"Tom", "he"}, {"Mia", "she"}, {"Sam", "he"}, {"Ana", "she"},
                                           {"Ben", "he"}, {"Eva", "she"}, {"Leo", "he"}, {"Zoe", "she"}}};
constexpr std::array<const char*, 8> kItems = {"apples", "pens", "books", "coins", "cards", "eggs", "shells", "toys"};
constexpr std::array<const char*, 2> kContainers = {"bags", "boxes"};
constexpr std::array<const char*, 3> kAddVerbs = {"buys", "finds", "gets"};
// "gives X away" or "loses X" / "sells X".
constexpr std::array<const char*, 3> kSubVerbs = {"gives", "loses", "sells"};

constexpr int kMaxOperands = 8;
constexpr int kMaxDigits = 6;

// Draws of one problem: Philox(seed, stream, counter = 0, 1, ...), 64 bits
// per draw. Reduction modulo the range has a bias below 2^-40 for the ranges
// used here, which no test or training run can see.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    DAPO_CHECK(lo <= hi, lo, " > ", hi);
    const U32x4 r = philox_draw(seed_, stream_, counter_++);
    const uint64_t bits = uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32);
    return lo + int64_t(bits % (uint64_t(hi - lo) + 1));
  }

  template <class T, size_t N>
  const T& pick(const std::array<T, N>& list) {
    return list[size_t(uniform(0, int64_t(N) - 1))];
  }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_ = 0;
};

int64_t pow10(int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

std::string capitalised(const char* word) {
  std::string s(word);
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  return s;
}

std::vector<int> digits_ones_first(int64_t v) {
  std::vector<int> d;
  do {
    d.push_back(int(v % 10));
    v /= 10;
  } while (v > 0);
  return d;
}

// The result's digits (ones first) as a number, leading zeros dropped.
int64_t number_of(const std::vector<int>& ones_first) {
  int64_t v = 0;
  for (size_t i = ones_first.size(); i-- > 0;) v = v * 10 + ones_first[i];
  return v;
}

// One operation of a columns solution (arithmetic_task.h shows the form);
// DAPO_CHECKs that the columns give a op b.
std::string column_lines(int64_t a, ArithOp op, int64_t b, int64_t result) {
  std::string out = cat(a, ' ', arith_op_symbol(op), ' ', b, '\n');
  const std::vector<int> da = digits_ones_first(a);
  std::vector<int> digits;  // of the result, ones first
  if (op == ArithOp::add) {
    const std::vector<int> db = digits_ones_first(b);
    int carry = 0;
    for (size_t i = 0; i < std::max(da.size(), db.size()); ++i) {
      const int x = i < da.size() ? da[i] : 0, y = i < db.size() ? db[i] : 0;
      const int s = x + y + carry;
      out += carry ? cat(x, " + ", y, " + ", carry, " = ", s, '\n') : cat(x, " + ", y, " = ", s, '\n');
      digits.push_back(s % 10);
      carry = s / 10;
    }
    if (carry) digits.push_back(carry);
  } else if (op == ArithOp::sub) {
    const std::vector<int> db = digits_ones_first(b);
    DAPO_CHECK(b <= a, a, " - ", b);
    int borrow = 0;
    for (size_t i = 0; i < da.size(); ++i) {
      const int y = i < db.size() ? db[i] : 0;
      const bool lend = da[i] - y - borrow < 0;
      const int x = da[i] + (lend ? 10 : 0);
      const int r = x - y - borrow;
      out += borrow ? cat(x, " - ", y, " - ", borrow, " = ", r, '\n') : cat(x, " - ", y, " = ", r, '\n');
      digits.push_back(r);
      borrow = lend ? 1 : 0;
    }
    DAPO_CHECK(borrow == 0, a, " - ", b);
  } else {
    DAPO_CHECK(b >= 2 && b <= 9, "columns multiply by one digit, not ", b);
    int carry = 0;
    for (size_t i = 0; i < da.size(); ++i) {
      const int p = da[i] * int(b) + carry;
      out += carry ? cat(da[i], " * ", b, " + ", carry, " = ", p, '\n') : cat(da[i], " * ", b, " = ", p, '\n');
      digits.push_back(p % 10);
      carry = p / 10;
    }
    if (carry) digits.push_back(carry);
  }
  DAPO_CHECK(number_of(digits) == result, a, ' ', arith_op_symbol(op), ' ', b, " = ", result, " but the columns give ",
             number_of(digits));
  return out + cat("= ", result, '\n');
}

}  // namespace

SolutionStyle parse_solution_style(std::string_view name) {
  if (name == "compact") return SolutionStyle::compact;
  if (name == "columns") return SolutionStyle::columns;
  throw UserError(cat("solution style '", name, "': must be compact or columns"));
}

const char* solution_style_name(SolutionStyle style) {
  return style == SolutionStyle::columns ? "columns" : "compact";
}

char arith_op_symbol(ArithOp op) {
  switch (op) {
    case ArithOp::add: return '+';
    case ArithOp::sub: return '-';
    case ArithOp::mul: return '*';
  }
  DAPO_FAIL("unknown ArithOp ", int(op));
}

void check_arithmetic_spec(const ArithmeticSpec& s) {
  if (s.min_operands < 2 || s.max_operands > kMaxOperands || s.min_operands > s.max_operands)
    throw UserError(cat("arithmetic spec: operands ", s.min_operands, "..", s.max_operands,
                        " must satisfy 2 <= min_operands <= max_operands <= ", kMaxOperands));
  if (s.min_digits < 1 || s.max_digits > kMaxDigits || s.min_digits > s.max_digits)
    throw UserError(cat("arithmetic spec: digits ", s.min_digits, "..", s.max_digits,
                        " must satisfy 1 <= min_digits <= max_digits <= ", kMaxDigits));
  if (!s.add && !s.sub && !s.mul) throw UserError("arithmetic spec: no operation allowed (set add, sub or mul)");
  if (s.sub && !s.add && !s.mul && s.max_operands > 2)
    throw UserError(cat("arithmetic spec: subtraction alone allows 2 operands, not ", s.max_operands,
                        " (a pile that one subtraction empties leaves the next nothing to take; allow add or mul)"));
  if (s.max_factor < 2 || s.max_factor > 9)
    throw UserError(cat("arithmetic spec: max_factor ", s.max_factor, " must be in 2..9"));
  if (s.max_total != 0 && s.max_total < 100)
    throw UserError(cat("arithmetic spec: max_total ", s.max_total, " must be 0 (no cap) or at least 100"));
  if (s.max_total != 0 && !s.add && !s.sub)
    throw UserError("arithmetic spec: max_total needs add or sub to replace the multiplications it caps");
}

ArithmeticSpec arithmetic_difficulty(int level) {
  ArithmeticSpec s;
  switch (level) {
    case 1: return s;
    case 2: s.sub = true; return s;
    case 3: s.sub = true; s.max_digits = 2; return s;
    case 4:
      s.sub = s.mul = true;
      s.max_operands = 3;
      s.max_digits = 2;
      s.max_factor = 5;
      return s;
    case 5:
      s.sub = s.mul = true;
      s.min_operands = 3;
      s.max_operands = 4;
      s.max_digits = 3;
      s.max_factor = 9;
      return s;
    case 6:
      s.sub = s.mul = true;
      s.min_operands = 5;
      s.max_operands = 7;
      s.min_digits = 2;
      s.max_digits = 3;
      s.max_factor = 9;
      s.max_total = 99999;
      return s;
    default:
      throw UserError(cat("difficulty ", level, ": must be 1..", kMaxArithmeticDifficulty,
                          " (1: a + b with one digit ... 5: three or four numbers of up to three digits with + - *; "
                          "6: five to seven numbers of two or three digits)"));
  }
}

ArithmeticProblem make_arithmetic_problem(const ArithmeticSpec& spec, uint64_t seed, uint64_t stream) {
  check_arithmetic_spec(spec);
  Draws d(seed, stream);
  std::vector<ArithOp> allowed;
  if (spec.add) allowed.push_back(ArithOp::add);
  if (spec.sub) allowed.push_back(ArithOp::sub);
  if (spec.mul) allowed.push_back(ArithOp::mul);
  const auto draw_op = [&] { return allowed[size_t(d.uniform(0, int64_t(allowed.size()) - 1))]; };
  const auto draw_number = [&] {
    const int digits = int(d.uniform(spec.min_digits, spec.max_digits));
    return d.uniform(digits == 1 ? 2 : pow10(digits - 1), pow10(digits) - 1);
  };

  const int operands = int(d.uniform(spec.min_operands, spec.max_operands));
  const Person& person = d.pick(kPeople);
  const std::string items = d.pick(kItems);
  const std::string he = person.pronoun;
  const std::string He = capitalised(person.pronoun);

  ArithmeticProblem p;
  std::string& text = p.problem;
  std::string& lines = p.solution;
  int64_t total = 0;
  const auto record = [&](int64_t a, ArithOp op, int64_t b, int64_t result) {
    // "k bags of a" is worked as a * k: columns multiply by the one-digit factor.
    const bool bags = op == ArithOp::mul && p.ops.empty();
    if (spec.solution == SolutionStyle::columns)
      lines += bags ? column_lines(b, op, a, result) : column_lines(a, op, b, result);
    else
      lines += cat(a, ' ', arith_op_symbol(op), ' ', b, " = ", result, '\n');
    p.ops.push_back(op);
    p.operands.push_back(b);
    total = result;
  };

  ArithOp op = draw_op();
  if (op == ArithOp::mul) {  // "has k bags of a items": the first operation is k * a
    const int64_t k = d.uniform(2, spec.max_factor);
    const int64_t a = draw_number();
    text = cat(person.name, " has ", k, ' ', d.pick(kContainers), " of ", a, ' ', items, '.');
    p.operands.push_back(k);
    record(k, op, a, k * a);
  } else {
    total = draw_number();
    p.operands.push_back(total);
    text = cat(person.name, " has ", total, ' ', items, '.');
  }
  for (int i = op == ArithOp::mul ? 1 : 0; i < operands - 1; ++i) {
    if (i > 0) op = draw_op();
    // Nothing left to give away: add instead, or multiply (0 * k) when adding is not allowed.
    if (total == 0 && op == ArithOp::sub) op = spec.add ? ArithOp::add : ArithOp::mul;
    // Too large a total to multiply: add instead (subtract without add; the spec check keeps one of them).
    if (spec.max_total != 0 && op == ArithOp::mul && total * spec.max_factor > spec.max_total)
      op = spec.add ? ArithOp::add : ArithOp::sub;
    if (op == ArithOp::add) {
      const int64_t x = draw_number();
      text += cat(' ', He, ' ', d.pick(kAddVerbs), ' ', x, " more.");
      record(total, op, x, total + x);
    } else if (op == ArithOp::sub) {
      int64_t x = draw_number();
      if (x > total) x = d.uniform(1, total);
      const std::string verb = d.pick(kSubVerbs);
      text += verb == std::string("gives") ? cat(' ', He, " gives ", x, " away.")
                                           : cat(' ', He, ' ', verb, ' ', x, '.');
      record(total, op, x, total - x);
    } else {
      const int64_t k = d.uniform(2, spec.max_factor);
      text += cat(" Then ", he, " has ", k, " times as many.");
      record(total, op, k, total * k);
    }
  }
  text += cat(" How many ", items, " does ", he, " have now?");
  p.answer = total;
  lines += cat("Answer: ", total);
  DAPO_CHECK(p.operands.size() == size_t(operands) && p.ops.size() + 1 == p.operands.size());
  return p;
}

PromptFormat parse_prompt_format(std::string_view name) {
  if (name == "dapo") return PromptFormat::dapo;
  if (name == "compact") return PromptFormat::compact;
  throw UserError(cat("prompt format '", name, "': must be dapo or compact"));
}

const char* prompt_format_name(PromptFormat format) {
  return format == PromptFormat::dapo ? "dapo" : "compact";
}

std::string render_prompt(std::string_view problem, PromptFormat format) {
  if (format == PromptFormat::compact) return std::string(problem);
  return cat(
      "Solve the following math problem step by step. The last line of your response should be of the form "
      "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n",
      problem, "\n\nRemember to put your answer on its own line after \"Answer:\".");
}

}  // namespace dapo::data
