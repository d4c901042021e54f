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
  EXPECT_EQ(error_of([] { arithmetic_difficulty(0); }).rfind("difficulty 0: must be 1..5", 0), 0u);
  EXPECT_EQ(error_of([] { arithmetic_difficulty(6); }).rfind("difficulty 6: must be 1..5", 0), 0u);
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
