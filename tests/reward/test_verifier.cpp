// verify_math end to end: scores, the extracted pred, reward-hacking
// attempts, bounded time on hostile answers, and fuzzing with random bytes
// and brace soup (nothing may crash, hang or match by accident).
#include "dapo/reward/verifier.h"

#include <gtest/gtest.h>

#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/reward/equivalence.h"

namespace dapo::reward {
namespace {

double elapsed_ms(Clock::time_point start) { return 1e3 * seconds_since(start); }

// Time limits are for optimised builds; sanitizers and -O0 are ~10x slower.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
constexpr double kSlowBuild = 10.0;
#else
constexpr double kSlowBuild = 1.0;
#endif

// CPU time of this thread: a loaded test machine does not make it grow.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e3 * double(ts.tv_sec) + 1e-6 * double(ts.tv_nsec);
}

TEST(Verifier, ScoresAndPred) {
  const std::string reasoning =
      "We have $x^2 - 5x + 6 = 0$, so $(x-2)(x-3) = 0$. Note: both roots are positive.\n"
      "Checking: $2 + 3 = 5$ and $2 \\cdot 3 = 6$.\n";
  Verdict v = verify_math(reasoning + "The answer is $\\boxed{\\dfrac{1}{2}}$.", "0.5");
  EXPECT_EQ(v.score, 1.0);
  EXPECT_TRUE(v.acc);
  EXPECT_EQ(v.pred, "\\dfrac{1}{2}");

  v = verify_math(reasoning + "Answer: 7", "8");
  EXPECT_EQ(v.score, -1.0);
  EXPECT_FALSE(v.acc);
  EXPECT_EQ(v.pred, "7");

  v = verify_math(reasoning, "5");  // no answer at all
  EXPECT_EQ(v.score, -1.0);
  EXPECT_FALSE(v.acc);
  EXPECT_EQ(v.pred, "");

  v = verify_math("**Answer:** $\\frac{3}{4}$", "\\boxed{0.75}");
  EXPECT_TRUE(v.acc);
  // Stray control characters before the answer change nothing.
  v = verify_math(std::string("Answer: \0\x01 5", 12), "5");
  EXPECT_TRUE(v.acc) << v.pred;
  v = verify_math(std::string("Answer: \0\x01 5", 12), "6");
  EXPECT_FALSE(v.acc) << v.pred;
  v = verify_math("so $m+n = 204$.\nAnswer: m+n = 204", "204");
  EXPECT_TRUE(v.acc) << v.pred;
  v = verify_math("Answer: m+n = 205", "204");
  EXPECT_FALSE(v.acc) << v.pred;
  v = verify_math("Thus $\\boxed{p+q=\\frac{7}{2}}$.", "\\frac72");
  EXPECT_TRUE(v.acc) << v.pred;
  v = verify_math("so \\boxed{2} and \\boxed{3}", "2, 3");
  EXPECT_TRUE(v.acc);
  EXPECT_EQ(v.pred, "2, 3");
}

TEST(Verifier, RewardHackingAttemptsFail) {
  struct Hack {
    std::string response;
    const char* truth;
    const char* why;
  };
  std::string spray;
  for (int i = 0; i < 100; ++i) spray += "\\boxed{" + std::to_string(i) + "} ";
  const std::vector<Hack> hacks = {
      {spray, "42", "boxing every number"},
      {"\\boxed{5 or 6}", "5", "hedging inside a box"},
      {"\\boxed{5} or \\boxed{6}", "5", "hedging across boxes"},
      {"Answer: 5, 6, 7", "5", "listing candidates"},
      {"Answer: 5\nAnswer: 7", "5", "the last answer line counts"},
      {"\\boxed{\\text{either 5 or 7}}", "5", "a sentence naming numbers"},
      {"\\boxed{x}", "5", "a free variable"},
      {"\\boxed{\\infty}", "5", "infinity"},
      {"\\boxed{0/0}", "0", "0/0"},
      {"\\boxed{1/0}", "\\infty", "division by zero"},
      {"\\boxed{9^{9^{9^9}}}", "387420489", "an overflowing power"},
      {"\\boxed{10^{-1000}}", "0", "a vanishing number"},
      {"\\boxed{\\frac{1}{2004!}}", "\\frac{1}{2006!}", "tiny numbers that floating point confuses"},
      {"\\boxed{5+0.0000000001}", "5", "just off"},
      {"\\boxed{\\pm 5}", "5", "plus-minus is two answers"},
      {"\\boxed{[4,6]}", "5", "an interval around the answer"},
      {"\\boxed{\\{5, 6\\}}", "5", "a set with the answer in it"},
      {"\\boxed{}", "", "nothing against nothing"},
      {"\\boxed{5", "5", "a box that never closes"},
  };
  for (const Hack& h : hacks) {
    const Verdict v = verify_math(h.response, h.truth);
    EXPECT_FALSE(v.acc) << h.why << ": " << h.response.substr(0, 80);
    EXPECT_EQ(v.score, -1.0) << h.why;
  }
}

TEST(Verifier, HostileAnswersReturnQuickly) {
  std::string digits5000(5000, '7');
  digits5000[0] = '1';
  std::string almost = digits5000;
  almost.back() = '8';
  std::string deep_parens = std::string(20000, '(') + "1" + std::string(20000, ')');
  std::string deep_braces;
  for (int i = 0; i < 20000; ++i) deep_braces += "\\frac{";
  std::string long_sum = "1";
  for (int i = 0; i < 2000; ++i) long_sum += "+1";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {digits5000, digits5000},
      {digits5000, almost},
      {"9^9^9^9", "1"},
      {"9^{9^{9^{9}}}", "9^{9^{9^{9}}}+1"},
      {"(10^{1000})^{1000}", "10^{1000000}"},
      {"1000000!", "1000000!+1"},
      {"\\binom{10^9}{5\\cdot10^8}", "1"},
      {"x^{10^{9}}", "x^{10^{9}}+1"},
      {"2^{16383}", "2^{16383}+1"},
      {"10^{4000}\\cdot10^{4000}\\cdot10^{4000}", "10^{12000}"},
      {"(1+\\sqrt{2}+\\sqrt{3}+\\sqrt{5})^{64}", "1"},
      {"(x+y+z)^{30}", "(z+y+x)^{30}"},
      {long_sum, "2001"},
      {deep_parens, "1"},
      {deep_braces, "1"},
      {std::string(100000, 'x'), "x"},
      {std::string(100000, '{'), "1"},
  };
  for (const auto& [answer, truth] : cases) {
    const double start = cpu_ms();
    const Verdict v = verify_math("\\boxed{" + answer + "}", truth);
    const double ms = cpu_ms() - start;
    // Most take microseconds, the worst (a 2000-term sum) about a
    // millisecond; anything super-linear would take far longer.
    EXPECT_LT(ms, 5.0 * kSlowBuild) << answer.substr(0, 60) << " took " << ms << " ms";
    EXPECT_EQ(v.score, v.acc ? 1.0 : -1.0);
  }
  // The answers that are equal stay equal despite their size.
  EXPECT_TRUE(answers_equivalent(digits5000, digits5000));
  EXPECT_FALSE(answers_equivalent(digits5000, almost));
  EXPECT_TRUE(answers_equivalent(long_sum, "2001"));
}

// Random bytes and LaTeX-looking brace soup: no crash, no hang, and an answer
// never matches a reference it differs from in value ("7" vs soup).
TEST(Verifier, FuzzRandomBytesAndBraceSoup) {
  std::mt19937 rng(2025);
  const std::vector<std::string> pieces = {
      "{", "}", "\\frac", "\\sqrt", "\\boxed{", "\\left(", "\\right)", "^", "_", "(", ")", "[", "]", "\\{", "\\}",
      "$", "\\", "1", "2", "0", "x", "e", "\\pi", "+", "-", "*", "/", "!", "|", ",", ".", " ", "=", "<", "\\pm",
      "\\infty", "\\text{", "or", "Answer:", "\n", "\\cup", "9^9", "\\overline{", "\\log_", "\xe2\x88\x92", "\xff"};
  const auto start = Clock::now();
  int matched_seven = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = int(rng() % 40);
    if (i % 2) {
      for (int k = 0; k < n; ++k) s += pieces[rng() % pieces.size()];
    } else {
      for (int k = 0; k < n; ++k) s += char(rng() % 256);
    }
    const Verdict v = verify_math(s, pieces[rng() % pieces.size()]);
    EXPECT_TRUE(v.score == 1.0 || v.score == -1.0);
    EXPECT_EQ(v.acc, v.score > 0);
    const Verdict seven = verify_math(s, "7");
    if (seven.acc) ++matched_seven;
    // Equivalence is symmetric, also on garbage.
    std::string t;
    for (int k = 0; k < n; ++k) t += pieces[rng() % pieces.size()];
    EXPECT_EQ(answers_equivalent(s, t), answers_equivalent(t, s)) << "'" << s << "' vs '" << t << "'";
  }
  // The soup has no 7 in it; a handful of its sums (2+2+2+1) are real sevens.
  EXPECT_LT(matched_seven, 20);
  EXPECT_LT(elapsed_ms(start), 20000.0 * kSlowBuild);
}

}  // namespace
}  // namespace dapo::reward
