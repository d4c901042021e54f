// The demo task's generator and files: answers recomputed from the problem
// text by an independent parser, worked solutions accepted by the verifier,
// the difficulty knob's ranges, the prompt formats (DAPO's exact wording),
// determinism, disjoint splits, the JSONL schemas, and every error message.
#include "dapo/data/arithmetic_task.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <sstream>

#include "arithmetic_parse.h"
#include "dapo/core/error.h"
#include "dapo/core/rng.h"
#include "dapo/data/arithmetic_data.h"
#include "dapo/data/dataset.h"
#include "dapo/reward/verifier.h"

namespace dapo::data {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

int digits_of(int64_t v) { return int(std::to_string(v).size()); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Many problems of each difficulty, with their streams.
std::vector<ArithmeticProblem> sample(const ArithmeticSpec& spec, uint64_t seed, int n) {
  std::vector<ArithmeticProblem> out;
  for (int i = 0; i < n; ++i) out.push_back(make_arithmetic_problem(spec, seed, stream_id({77, uint64_t(i)})));
  return out;
}

TEST(ArithmeticTask, AnswersMatchTheTextReadIndependently) {
  for (int level = 1; level <= kMaxArithmeticDifficulty; ++level) {
    for (const ArithmeticProblem& p : sample(arithmetic_difficulty(level), 1000 + uint64_t(level), 400)) {
      const testing::ParsedArithmetic parsed = testing::parse_arithmetic_text(p.problem);
      ASSERT_EQ(parsed.error, "") << "difficulty " << level;
      EXPECT_EQ(parsed.answer, p.answer) << p.problem;
      EXPECT_EQ(parsed.numbers, p.operands) << p.problem;
      ASSERT_EQ(parsed.ops.size(), p.ops.size()) << p.problem;
      for (size_t i = 0; i < p.ops.size(); ++i) EXPECT_EQ(parsed.ops[i], arith_op_symbol(p.ops[i])) << p.problem;
      EXPECT_EQ(parsed.solution, p.solution) << p.problem;
      EXPECT_GE(p.answer, 0);
    }
  }
}

TEST(ArithmeticTask, SolutionLinesAreCorrectArithmetic) {
  static const std::regex line_re(R"(^(\d+) ([-+*]) (\d+) = (\d+)$)");
  for (const ArithmeticProblem& p : sample(arithmetic_difficulty(5), 9, 300)) {
    const std::vector<std::string> lines = lines_of(p.solution);
    ASSERT_EQ(lines.size(), p.ops.size() + 1) << p.solution;
    int64_t previous = -1;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(lines[i], m, line_re)) << lines[i];
      const int64_t a = std::stoll(m[1].str()), b = std::stoll(m[3].str()), c = std::stoll(m[4].str());
      const char op = m[2].str()[0];
      EXPECT_EQ(c, op == '+' ? a + b : op == '-' ? a - b : a * b) << lines[i];
      if (i > 0) EXPECT_EQ(a, previous) << p.solution;  // each line goes on from the last result
      previous = c;
    }
    EXPECT_EQ(previous, p.answer);
    EXPECT_EQ(lines.back(), "Answer: " + std::to_string(p.answer));
  }
}

TEST(ArithmeticTask, VerifierAcceptsEveryWorkedSolutionAndRejectsWrongOnes) {
  for (int level = 1; level <= kMaxArithmeticDifficulty; ++level) {
    for (const ArithmeticProblem& p : sample(arithmetic_difficulty(level), 5, 200)) {
      const std::string truth = std::to_string(p.answer);
      const reward::Verdict ok = reward::verify_math(p.solution, truth);
      EXPECT_TRUE(ok.acc) << p.solution;
      EXPECT_EQ(ok.score, 1.0);
      EXPECT_EQ(ok.pred, truth);
      EXPECT_FALSE(reward::verify_math(p.solution, std::to_string(p.answer + 1)).acc) << p.solution;
      // A solution whose last line is wrong is wrong, whatever the lines above it say.
      const std::string wrong = p.solution.substr(0, p.solution.rfind("Answer: ")) + "Answer: " +
                                std::to_string(p.answer + 1);
      EXPECT_FALSE(reward::verify_math(wrong, truth).acc) << wrong;
      EXPECT_FALSE(reward::verify_math(p.solution.substr(0, p.solution.rfind("Answer: ")), truth).acc);
    }
  }
}

TEST(ArithmeticTask, DifficultyKnobBoundsEveryNumber) {
  for (int level = 1; level <= kMaxArithmeticDifficulty; ++level) {
    const ArithmeticSpec spec = arithmetic_difficulty(level);
    std::set<size_t> operand_counts;
    std::set<char> ops_seen;
    std::set<int> digit_counts;
    for (const ArithmeticProblem& p : sample(spec, 31, 1000)) {
      operand_counts.insert(p.operands.size());
      int64_t total = p.operands[0];
      for (size_t i = 0; i < p.ops.size(); ++i) {
        const int64_t x = p.operands[i + 1];
        const ArithOp op = p.ops[i];
        ops_seen.insert(arith_op_symbol(op));
        EXPECT_TRUE((op == ArithOp::add && spec.add) || (op == ArithOp::sub && spec.sub) ||
                    (op == ArithOp::mul && spec.mul))
            << p.problem;
        if (op == ArithOp::mul && i == 0) {  // "k bags of a": k is the factor, a a number
          EXPECT_GE(total, 2);
          EXPECT_LE(total, spec.max_factor);
          EXPECT_GE(x, 2);
          digit_counts.insert(digits_of(x));
          total *= x;
        } else if (op == ArithOp::mul) {
          EXPECT_GE(x, 2);
          EXPECT_LE(x, spec.max_factor) << p.problem;
          total *= x;
        } else if (op == ArithOp::sub) {
          EXPECT_GE(x, 1);
          EXPECT_LE(x, total) << p.problem;  // never more than there is
          EXPECT_LE(digits_of(x), spec.max_digits);
          total -= x;
        } else {
          EXPECT_GE(x, 2);
          digit_counts.insert(digits_of(x));
          total += x;
        }
        EXPECT_GE(total, 0);
      }
      if (p.ops[0] != ArithOp::mul) {
        EXPECT_GE(p.operands[0], 2);
        digit_counts.insert(digits_of(p.operands[0]));
      }
      EXPECT_EQ(total, p.answer);
    }
    EXPECT_EQ(*operand_counts.begin(), size_t(spec.min_operands)) << "difficulty " << level;
    EXPECT_EQ(*operand_counts.rbegin(), size_t(spec.max_operands)) << "difficulty " << level;
    EXPECT_EQ(*digit_counts.begin(), spec.min_digits) << "difficulty " << level;
    EXPECT_EQ(*digit_counts.rbegin(), spec.max_digits) << "difficulty " << level;
    EXPECT_EQ(ops_seen.size(), size_t(spec.add + spec.sub + spec.mul)) << "difficulty " << level;
  }
}

TEST(ArithmeticTask, PresetsGrowHarder) {
  const ArithmeticSpec d1 = arithmetic_difficulty(1), d3 = arithmetic_difficulty(3), d5 = arithmetic_difficulty(5);
  EXPECT_TRUE(d1.add && !d1.sub && !d1.mul);
  EXPECT_EQ(d1.max_digits, 1);
  EXPECT_TRUE(d3.add && d3.sub && !d3.mul);
  EXPECT_EQ(d3.max_digits, 2);
  EXPECT_EQ(d3.max_operands, 2);
  EXPECT_TRUE(d5.mul);
  EXPECT_EQ(d5.min_operands, 3);
  EXPECT_EQ(d5.max_digits, 3);
  for (int level = 1; level <= kMaxArithmeticDifficulty; ++level)
    EXPECT_NO_THROW(check_arithmetic_spec(arithmetic_difficulty(level)));
}

TEST(ArithmeticTask, CustomSpecWithManyOperandsAndBigNumbers) {
  ArithmeticSpec spec;
  spec.min_operands = spec.max_operands = 8;
  spec.min_digits = spec.max_digits = 6;
  spec.add = spec.sub = spec.mul = true;
  for (const ArithmeticProblem& p : sample(spec, 3, 100)) {
    EXPECT_EQ(p.operands.size(), 8u);
    const testing::ParsedArithmetic parsed = testing::parse_arithmetic_text(p.problem);
    ASSERT_EQ(parsed.error, "");
    EXPECT_EQ(parsed.answer, p.answer);
  }
}

TEST(ArithmeticTask, EmptiedPileWithoutAdditionIsMultiplied) {
  ArithmeticSpec spec;  // one-digit subtractions empty the pile often
  spec.min_operands = spec.max_operands = 5;
  spec.add = false;
  spec.sub = spec.mul = true;
  int zeros = 0;
  for (const ArithmeticProblem& p : sample(spec, 4, 300)) {
    for (const ArithOp op : p.ops) EXPECT_NE(op, ArithOp::add) << p.problem;
    const testing::ParsedArithmetic parsed = testing::parse_arithmetic_text(p.problem);
    ASSERT_EQ(parsed.error, "");
    EXPECT_EQ(parsed.answer, p.answer);
    zeros += p.answer == 0;
  }
  EXPECT_GT(zeros, 0);
}

TEST(ArithmeticTask, SameSeedSameProblemOtherSeedOrStreamOther) {
  const ArithmeticSpec spec = arithmetic_difficulty(4);
  const ArithmeticProblem a = make_arithmetic_problem(spec, 42, 7);
  const ArithmeticProblem b = make_arithmetic_problem(spec, 42, 7);
  EXPECT_EQ(a.problem, b.problem);
  EXPECT_EQ(a.solution, b.solution);
  EXPECT_EQ(a.operands, b.operands);
  int differ_seed = 0, differ_stream = 0;
  for (uint64_t k = 1; k <= 20; ++k) {
    differ_seed += make_arithmetic_problem(spec, 42 + k, 7).problem != a.problem;
    differ_stream += make_arithmetic_problem(spec, 42, 7 + k).problem != a.problem;
  }
  EXPECT_EQ(differ_seed, 20);
  EXPECT_EQ(differ_stream, 20);
}

TEST(ArithmeticTask, ProblemsVary) {
  std::set<std::string> texts, names, answers;
  for (const ArithmeticProblem& p : sample(arithmetic_difficulty(3), 8, 500)) {
    texts.insert(p.problem);
    names.insert(p.problem.substr(0, p.problem.find(' ')));
    answers.insert(std::to_string(p.answer));
  }
  EXPECT_GE(texts.size(), 495u);
  EXPECT_EQ(names.size(), 8u);
  EXPECT_GE(answers.size(), 100u);
}

TEST(ArithmeticTask, PromptFormats) {
  const std::string problem = "Tom has 12 apples. He buys 7 more. How many apples does he have now?";
  EXPECT_EQ(render_prompt(problem, PromptFormat::compact), problem);
  EXPECT_EQ(render_prompt(problem, PromptFormat::dapo),
            "Solve the following math problem step by step. The last line of your response should be of the form "
            "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n" +
                problem + "\n\nRemember to put your answer on its own line after \"Answer:\".");
  // The same wording as the DAPO-Math-17k line of the dataset fixtures.
  const std::vector<PromptRecord> verl =
      load_prompt_file(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/data/verl_math.jsonl");
  EXPECT_EQ(render_prompt("What is $3 + 4$?", PromptFormat::dapo), verl.at(0).messages.at(0).content);

  EXPECT_EQ(parse_prompt_format("dapo"), PromptFormat::dapo);
  EXPECT_EQ(parse_prompt_format("compact"), PromptFormat::compact);
  EXPECT_STREQ(prompt_format_name(PromptFormat::dapo), "dapo");
  EXPECT_STREQ(prompt_format_name(PromptFormat::compact), "compact");
  EXPECT_EQ(error_of([] { parse_prompt_format("long"); }), "prompt format 'long': must be dapo or compact");
  EXPECT_EQ(error_of([] { parse_prompt_format(""); }), "prompt format '': must be dapo or compact");
}

TEST(ArithmeticTask, SpecErrors) {
  EXPECT_EQ(error_of([] { arithmetic_difficulty(0); }).rfind("difficulty 0: must be 1..6", 0), 0u);
  EXPECT_EQ(error_of([] { arithmetic_difficulty(7); }).rfind("difficulty 7: must be 1..6", 0), 0u);
  const auto spec_error = [](auto change) {
    ArithmeticSpec s;
    change(s);
    return error_of([&] { make_arithmetic_problem(s, 1, 1); });
  };
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.min_operands = s.max_operands = 1; }),
            "arithmetic spec: operands 1..1 must satisfy 2 <= min_operands <= max_operands <= 8");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.max_operands = 9; }),
            "arithmetic spec: operands 2..9 must satisfy 2 <= min_operands <= max_operands <= 8");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.min_operands = 3; }),
            "arithmetic spec: operands 3..2 must satisfy 2 <= min_operands <= max_operands <= 8");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.min_digits = 0; }),
            "arithmetic spec: digits 0..1 must satisfy 1 <= min_digits <= max_digits <= 6");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.max_digits = 7; }),
            "arithmetic spec: digits 1..7 must satisfy 1 <= min_digits <= max_digits <= 6");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.add = false; }),
            "arithmetic spec: no operation allowed (set add, sub or mul)");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) {
              s.add = false;
              s.sub = true;
              s.max_operands = 3;
            }),
            "arithmetic spec: subtraction alone allows 2 operands, not 3 (a pile that one subtraction empties "
            "leaves the next nothing to take; allow add or mul)");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.max_factor = 1; }), "arithmetic spec: max_factor 1 must be in 2..9");
  EXPECT_EQ(spec_error([](ArithmeticSpec& s) { s.max_factor = 10; }), "arithmetic spec: max_factor 10 must be in 2..9");
  EXPECT_EQ(error_of([] { make_arithmetic_splits(ArithmeticSpec{.min_digits = 2}, 1, {1, 1, 1}); }),
            "arithmetic spec: digits 2..1 must satisfy 1 <= min_digits <= max_digits <= 6");
}

// ---- columns solutions (the GPU demo) -----------------------------------------

ArithmeticSpec columns(int level) {
  ArithmeticSpec spec = arithmetic_difficulty(level);
  spec.solution = SolutionStyle::columns;
  return spec;
}

// Reads a columns solution back line by line with its own rules (arithmetic
// in the test, not the generator's) and returns "" when every operation's
// header names the running total and the next operand of the problem, every
// column is right digit arithmetic on the right digits with the right carry
// or borrow, and every "= r" line assembles the columns' digits; else why not.
std::string check_columns(const ArithmeticProblem& p) {
  static const std::regex header_re(R"(^(\d+) ([-+*]) (\d+)$)");
  static const std::regex add_re(R"(^(\d) \+ (\d)(?: \+ (1))? = (\d+)$)");
  static const std::regex sub_re(R"(^(1?\d) - (\d)(?: - (1))? = (\d)$)");
  static const std::regex mul_re(R"(^(\d) \* (\d)(?: \+ (\d))? = (\d+)$)");
  static const std::regex result_re(R"(^= (\d+)$)");
  const std::vector<std::string> lines = lines_of(p.solution);
  size_t at = 0;
  int64_t total = p.operands.at(0);
  for (size_t op_index = 0; op_index < p.ops.size(); ++op_index) {
    std::smatch m;
    if (at >= lines.size() || !std::regex_match(lines[at], m, header_re)) return "no header at line " + std::to_string(at);
    ++at;
    int64_t a = std::stoll(m[1].str()), b = std::stoll(m[3].str());
    const char op = m[2].str()[0];
    if (op != arith_op_symbol(p.ops[op_index])) return "header " + lines[at - 1] + ": wrong operation";
    const int64_t x = p.operands[op_index + 1];
    if (op == '*' && op_index == 0 && p.problem.find(" of ") != std::string::npos) {
      // "k bags of a" is written "a * k".
      if (a != x || b != total) return "header " + lines[at - 1] + ": not a * k of the first sentence";
    } else if (a != total || b != x) {
      return "header " + lines[at - 1] + ": does not go on from " + std::to_string(total);
    }
    const std::string sa = std::to_string(a), sb = std::to_string(b);
    const size_t columns = op == '+' ? std::max(sa.size(), sb.size()) : sa.size();
    const auto digit = [](const std::string& s, size_t i) { return i < s.size() ? s[s.size() - 1 - i] - '0' : 0; };
    std::string result_digits;  // ones first
    int carry = 0;
    for (size_t i = 0; i < columns; ++i, ++at) {
      if (at >= lines.size()) return "solution ends inside " + sa + " " + op + " " + sb;
      const std::string& line = lines[at];
      const std::regex& re = op == '+' ? add_re : op == '-' ? sub_re : mul_re;
      if (!std::regex_match(line, m, re)) return "column line '" + line + "' of " + sa + " " + op + " " + sb;
      const int l = std::stoi(m[1].str()), r = std::stoi(m[2].str()), c = m[3].matched ? std::stoi(m[3].str()) : 0;
      const int v = std::stoi(m[4].str());
      if (c != carry) return "line '" + line + "': the carry or borrow in should be " + std::to_string(carry);
      if (op == '+') {
        if (l != digit(sa, i) || r != digit(sb, i) || v != l + r + c) return "line '" + line + "'";
        result_digits += char('0' + v % 10);
        carry = v / 10;
      } else if (op == '-') {
        const bool lends = m[1].str().size() == 2;
        if (l % 10 != digit(sa, i) || (lends && l / 10 != 1) || r != digit(sb, i) || v != l - r - c) return "line '" + line + "'";
        if (lends != (digit(sa, i) - r - c < 0)) return "line '" + line + "': borrows without need or needs to";
        result_digits += char('0' + v);
        carry = lends ? 1 : 0;
      } else {
        if (l != digit(sa, i) || r != b || v != l * r + c) return "line '" + line + "'";
        if (i + 1 < columns) {
          result_digits += char('0' + v % 10);
          carry = v / 10;
        } else {
          for (int w = v; w > 0 || result_digits.empty(); w /= 10) result_digits += char('0' + w % 10);
          carry = 0;
        }
      }
    }
    if (op == '+' && carry) result_digits += char('0' + carry);
    if (op == '-' && carry) return "subtraction ends with a borrow";
    std::string result(result_digits.rbegin(), result_digits.rend());
    while (result.size() > 1 && result[0] == '0') result.erase(0, 1);
    if (at >= lines.size() || !std::regex_match(lines[at], m, result_re)) return "no '= r' line after " + sa + " " + op + " " + sb;
    if (m[1].str() != result) return "'" + lines[at] + "' but the columns give " + result;
    total = std::stoll(result);
    ++at;
  }
  if (at + 1 != lines.size() || lines[at] != "Answer: " + std::to_string(total)) return "no Answer line at the end";
  if (total != p.answer) return "the columns give " + std::to_string(total) + ", not " + std::to_string(p.answer);
  return "";
}

TEST(ArithmeticColumns, TheDocumentedExample) {
  // arithmetic_task.h's example, written by hand: the reader accepts it and
  // catches a dropped carry.
  ArithmeticProblem p;
  p.operands = {347, 86, 158, 6};
  p.ops = {ArithOp::add, ArithOp::sub, ArithOp::mul};
  p.answer = 1650;
  p.solution =
      "347 + 86\n7 + 6 = 13\n4 + 8 + 1 = 13\n3 + 0 + 1 = 4\n= 433\n"
      "433 - 158\n13 - 8 = 5\n13 - 5 - 1 = 7\n4 - 1 - 1 = 2\n= 275\n"
      "275 * 6\n5 * 6 = 30\n7 * 6 + 3 = 45\n2 * 6 + 4 = 16\n= 1650\nAnswer: 1650";
  EXPECT_EQ(check_columns(p), "");
  EXPECT_TRUE(reward::verify_math(p.solution, "1650").acc);
  ArithmeticProblem wrong = p;
  wrong.solution.replace(wrong.solution.find("4 + 8 + 1 = 13"), 14, "4 + 8 = 12");
  EXPECT_NE(check_columns(wrong), "");  // the checker does catch a dropped carry
}

TEST(ArithmeticColumns, EveryColumnIsRightAndTheVerifierAcceptsTheSolution) {
  for (int level = 1; level <= kMaxArithmeticDifficulty; ++level) {
    for (const ArithmeticProblem& p : sample(columns(level), 60 + uint64_t(level), level == 6 ? 2000 : 300)) {
      ASSERT_EQ(check_columns(p), "") << p.problem << "\n" << p.solution;
      const testing::ParsedArithmetic parsed = testing::parse_arithmetic_text(p.problem);
      ASSERT_EQ(parsed.error, "");
      EXPECT_EQ(parsed.answer, p.answer) << p.problem;
      const std::string truth = std::to_string(p.answer);
      const reward::Verdict ok = reward::verify_math(p.solution, truth);
      EXPECT_TRUE(ok.acc) << p.solution;
      EXPECT_EQ(ok.pred, truth);
      EXPECT_FALSE(reward::verify_math(p.solution, std::to_string(p.answer + 1)).acc) << p.solution;
      const std::string body = p.solution.substr(0, p.solution.rfind("Answer: "));
      EXPECT_FALSE(reward::verify_math(body + "Answer: " + std::to_string(p.answer + 1), truth).acc);
      EXPECT_FALSE(reward::verify_math(body, truth).acc) << "a solution cut before its Answer line is not right";
    }
  }
}

TEST(ArithmeticColumns, SameProblemsAsCompactOnlyTheSolutionDiffers) {
  for (int level : {2, 5, 6}) {
    ArithmeticSpec compact = arithmetic_difficulty(level);
    const std::vector<ArithmeticProblem> a = sample(compact, 7, 200), b = sample(columns(level), 7, 200);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].problem, b[i].problem);
      EXPECT_EQ(a[i].answer, b[i].answer);
      EXPECT_EQ(a[i].operands, b[i].operands);
      EXPECT_EQ(testing::parse_arithmetic_text(a[i].problem).solution, a[i].solution);
    }
  }
  EXPECT_EQ(parse_solution_style("compact"), SolutionStyle::compact);
  EXPECT_EQ(parse_solution_style("columns"), SolutionStyle::columns);
  EXPECT_STREQ(solution_style_name(SolutionStyle::columns), "columns");
  EXPECT_STREQ(solution_style_name(SolutionStyle::compact), "compact");
  EXPECT_EQ(error_of([] { parse_solution_style("long"); }), "solution style 'long': must be compact or columns");
}

TEST(ArithmeticColumns, DifficultySixIsLongMultiStepWork) {
  const ArithmeticSpec spec = arithmetic_difficulty(6);
  EXPECT_EQ(spec.min_operands, 5);
  EXPECT_EQ(spec.max_operands, 7);
  EXPECT_EQ(spec.max_total, 99999);
  EXPECT_EQ(spec.solution, SolutionStyle::compact);  // the style is the caller's choice
  size_t shortest = SIZE_MAX, longest = 0, sum = 0;
  std::set<int> kinds;
  const std::vector<ArithmeticProblem> ps = sample(columns(6), 13, 2000);
  for (const ArithmeticProblem& p : ps) {
    EXPECT_GE(p.ops.size(), 4u);
    EXPECT_LE(p.ops.size(), 6u);
    // Multiplications are capped; totals pass 99999 only through a last few additions.
    int64_t total = p.operands[0];
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (p.ops[i] == ArithOp::mul && i > 0) EXPECT_LE(total * spec.max_factor, spec.max_total) << p.problem;
      total = p.ops[i] == ArithOp::add ? total + p.operands[i + 1]
              : p.ops[i] == ArithOp::sub ? total - p.operands[i + 1]
                                         : total * p.operands[i + 1];
      kinds.insert(int(p.ops[i]));
    }
    EXPECT_LT(p.answer, 1'000'000) << p.problem;
    shortest = std::min(shortest, p.solution.size());
    longest = std::max(longest, p.solution.size());
    sum += p.solution.size();
  }
  EXPECT_EQ(kinds.size(), 3u);
  // Bytes, not tokens (the demo tokenizer makes ~0.6 tokens of a byte here;
  // inputs/demo_gpu/README.md has the token counts): long, bounded work.
  EXPECT_GE(shortest, 100u);
  EXPECT_LE(longest, 800u);
  EXPECT_GE(sum / ps.size(), 250u);
}

// ---- the files ---------------------------------------------------------------

TEST(ArithmeticData, SplitsHaveTheirSizesAndAreDisjoint) {
  const ArithmeticSplits s = make_arithmetic_splits(arithmetic_difficulty(2), 11, {300, 50, 200});
  ASSERT_EQ(s.train.size(), 300u);
  ASSERT_EQ(s.val.size(), 50u);
  ASSERT_EQ(s.sft.size(), 200u);
  std::set<std::string> all;
  for (const auto* split : {&s.train, &s.val, &s.sft})
    for (const ArithmeticProblem& p : *split) EXPECT_TRUE(all.insert(p.problem).second) << p.problem;
  // The validation set does not depend on the other sizes.
  const ArithmeticSplits other = make_arithmetic_splits(arithmetic_difficulty(2), 11, {5, 50, 0});
  for (size_t i = 0; i < s.val.size(); ++i) EXPECT_EQ(other.val[i].problem, s.val[i].problem);
  EXPECT_TRUE(other.sft.empty());
}

TEST(ArithmeticData, SameSeedSameBytesOtherSeedOtherBytes) {
  const ArithmeticSpec spec = arithmetic_difficulty(3);
  const auto files = [&](uint64_t seed) {
    return render_arithmetic_files(make_arithmetic_splits(spec, seed, {40, 10, 30}), PromptFormat::compact);
  };
  const ArithmeticFiles a = files(5), b = files(5), c = files(6);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
  EXPECT_EQ(a.sft, b.sft);
  EXPECT_NE(a.train, c.train);
  EXPECT_NE(a.val, c.val);
  EXPECT_NE(a.sft, c.sft);
}

TEST(ArithmeticData, LinesFollowTheSchemaAndLoad) {
  ArithmeticProblem p;
  p.problem = "Tom has 12 apples. He buys 7 more. How many apples does he have now?";
  p.solution = "12 + 7 = 19\nAnswer: 19";
  p.answer = 19;
  EXPECT_EQ(arithmetic_prompt_line(p, PromptFormat::compact, "train", 17),
            "{\"data_source\":\"arith\",\"prompt\":[{\"role\":\"user\",\"content\":\"Tom has 12 apples. "
            "He buys 7 more. How many apples does he have now?\"}],\"ability\":\"arithmetic\",\"reward_model\":"
            "{\"ground_truth\":\"19\",\"style\":\"rule\"},\"extra_info\":{\"index\":\"train-17\"}}\n");
  EXPECT_EQ(arithmetic_sft_line(p, PromptFormat::compact, 3),
            "{\"data_source\":\"arith\",\"prompt\":[{\"role\":\"user\",\"content\":\"Tom has 12 apples. "
            "He buys 7 more. How many apples does he have now?\"}],\"response\":\"12 + 7 = 19\\nAnswer: 19\","
            "\"ability\":\"arithmetic\",\"reward_model\":{\"ground_truth\":\"19\",\"style\":\"rule\"},"
            "\"extra_info\":{\"index\":\"sft-3\"}}\n");

  for (const PromptFormat format : {PromptFormat::compact, PromptFormat::dapo}) {
    const ArithmeticSplits s = make_arithmetic_splits(arithmetic_difficulty(4), 2, {20, 5, 10});
    const ArithmeticFiles f = render_arithmetic_files(s, format);
    std::vector<PromptRecord> records;
    const auto read = [&](const std::string& text, const char* name) {
      int64_t n = 0;
      for (const std::string& line : lines_of(text)) {
        records.push_back(parse_prompt_line(line, name, n + 1, n, "x"));
        ++n;
      }
      return n;
    };
    ASSERT_EQ(read(f.train, "train.jsonl"), 20);
    ASSERT_EQ(read(f.val, "val.jsonl"), 5);
    ASSERT_EQ(read(f.sft, "sft.jsonl"), 10);
    std::vector<const ArithmeticProblem*> problems;
    for (const auto* split : {&s.train, &s.val, &s.sft})
      for (const ArithmeticProblem& p : *split) problems.push_back(&p);
    for (size_t i = 0; i < records.size(); ++i) {
      const PromptRecord& r = records[i];
      EXPECT_EQ(r.data_source, "arith");
      ASSERT_EQ(r.messages.size(), 1u);
      EXPECT_EQ(r.messages[0].role, "user");
      EXPECT_EQ(r.messages[0].content, render_prompt(problems[i]->problem, format));
      EXPECT_EQ(r.ground_truth, std::to_string(problems[i]->answer));
    }
    EXPECT_EQ(records[0].index, "train-0");
    EXPECT_EQ(records[20].index, "val-0");
    EXPECT_EQ(records[26].index, "sft-1");
    EXPECT_NO_THROW(PromptDataset{records});  // uids unique across the three files
    // The SFT lines carry the worked solution as "response".
    const nlohmann::json sft0 = nlohmann::json::parse(lines_of(f.sft).at(0));
    EXPECT_EQ(sft0.at("response"), s.sft[0].solution);
  }
}

TEST(ArithmeticData, TooFewDistinctProblemsIsAnError) {
  ArithmeticSpec tiny;  // 8 names x 8 items x 3 verbs x 8 x 8 numbers = 12288 texts
  const std::string e = error_of([&] { make_arithmetic_splits(tiny, 1, {20000, 10, 0}); });
  EXPECT_EQ(e.rfind("demo data: train problem ", 0), 0u) << e;
  EXPECT_NE(e.find(": no new problem in 100 draws after "), std::string::npos) << e;
  EXPECT_NE(e.find("distinct problems; this difficulty has too few of them for the sizes asked (ask for fewer, "
                   "or raise the difficulty)"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of([&] { make_arithmetic_splits(tiny, 1, {1, -1, 0}); }),
            "demo data: the val split cannot have -1 problems");
}

}  // namespace
}  // namespace dapo::data
