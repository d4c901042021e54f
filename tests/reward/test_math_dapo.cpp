// verify_math_dapo against verl's math_dapo.compute_score: every case of
// tests/fixtures/reward/math_dapo/cases.jsonl (scored by verl's function,
// see make_fixtures.py there), the character classes against the tables
// Python printed, the quirks by hand, invalid UTF-8 (expected values from
// Python with errors="surrogateescape"), and bounded time on hostile input.
#include "dapo/reward/math_dapo.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace dapo::reward {
namespace {

using Json = nlohmann::json;
namespace detail = math_dapo_detail;

const std::string kFixtureDir = std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/reward/math_dapo/";

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6));
    s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | (c >> 12));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | (c >> 18));
    s += char(0x80 | ((c >> 12) & 0x3F));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
  return s;
}

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

TEST(MathDapo, MatchesVerlOnEveryFixtureCase) {
  std::ifstream in(kFixtureDir + "cases.jsonl");
  ASSERT_TRUE(in) << "missing " << kFixtureDir << "cases.jsonl";
  std::string line;
  int n = 0, correct = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const Json c = Json::parse(line);
    const std::string response = c.at("response"), gt = c.at("ground_truth");
    const Verdict v = verify_math_dapo(response, gt);
    SCOPED_TRACE("case " + std::to_string(n + 1) + ": " + line.substr(0, 300));
    EXPECT_EQ(v.score, c.at("score").get<double>());
    EXPECT_EQ(v.acc, c.at("acc").get<bool>());
    EXPECT_EQ(v.pred, c.at("pred").get<std::string>());
    ++n;
    correct += v.acc;
  }
  EXPECT_GE(n, 1000);
  EXPECT_GE(correct, 300);  // both outcomes well represented
}

// Membership of every code point in ranges [[lo, hi], ...].
std::vector<bool> members(const Json& ranges) {
  std::vector<bool> in(0x110000, false);
  for (const auto& r : ranges)
    for (char32_t c = r.at(0).get<char32_t>(); c <= r.at(1).get<char32_t>(); ++c) in[c] = true;
  return in;
}

TEST(MathDapo, CharacterClassesMatchPython) {
  std::ifstream in(kFixtureDir + "unicode_tables.json");
  ASSERT_TRUE(in);
  const Json t = Json::parse(in);
  const std::vector<bool> space = members(t.at("isspace")), re_space = members(t.at("re_space")),
                          digit = members(t.at("isdigit"));
  for (char32_t c = 0; c < 0x110000; ++c) {
    ASSERT_EQ(detail::is_space(c), bool(space[c])) << std::hex << unsigned(c);
    ASSERT_EQ(detail::is_space(c), bool(re_space[c])) << std::hex << unsigned(c);
    ASSERT_EQ(detail::is_digit(c), bool(digit[c])) << std::hex << unsigned(c);
  }
  // (?i): for each letter of "answer", exactly Python's set of characters
  // stands in for it (surrogates have no UTF-8 form and are skipped).
  const std::string word = "answer";
  for (std::size_t k = 0; k < word.size(); ++k) {
    const auto& list = t.at("ignorecase_answer").at(std::string(1, word[k]));
    const std::set<char32_t> allowed(list.begin(), list.end());
    for (char32_t c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      const std::string text = word.substr(0, k) + utf8(c) + word.substr(k + 1) + ":5";
      ASSERT_EQ(detail::find_answer(text) == "5", allowed.count(c) == 1) << word[k] << " " << std::hex << unsigned(c);
    }
  }
}

TEST(MathDapo, NoAnswerIsInvalid) {
  Verdict v = verify_math_dapo("The answer is \\boxed{5}.", "5");  // \boxed is not read
  EXPECT_EQ(v.score, -1.0);
  EXPECT_FALSE(v.acc);
  EXPECT_EQ(v.pred, "[INVALID]");
  v = verify_math_dapo("", "[INVALID]");  // the sentinel is compared like any answer
  EXPECT_EQ(v.score, 1.0);
  EXPECT_TRUE(v.acc);
  EXPECT_EQ(v.pred, "[INVALID]");
}

TEST(MathDapo, Quirks) {
  // The last Answer line wins; \s* after the colon crosses lines.
  EXPECT_EQ(verify_math_dapo("Answer: 6\nAnswer: 5", "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo("Answer:\n\n5", "5").pred, "5");
  // Blanks only after the colon: the answer is the last one that is not '\n'.
  EXPECT_EQ(verify_math_dapo("Answer: \t\n\n", "").pred, "");
  EXPECT_EQ(verify_math_dapo("Answer: \t\n\n", "").score, 1.0);
  EXPECT_EQ(verify_math_dapo("Answer:\n\n", "x").pred, "[INVALID]");
  // Long S stands in for 's'; the Kelvin sign is a 'k', not an 'a'.
  EXPECT_EQ(verify_math_dapo("AN\u017fWER: 5", "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo("\u212Aanswer: 5", "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo("\u212Answer: 5", "5").pred, "[INVALID]");
  // Unicode blanks around the colon.
  EXPECT_EQ(verify_math_dapo("Answer\u3000:\u00a05", "5").score, 1.0);
  // CRLF: '\r' is still there at the digit test, so the commas stay.
  EXPECT_EQ(verify_math_dapo("Answer: 1,000\r\n", "1000").pred, "1,000");
  EXPECT_EQ(verify_math_dapo("Answer: 1,000\n", "1000").score, 1.0);
  // Unicode digits: commas dropped, digits kept as written.
  EXPECT_EQ(verify_math_dapo("Answer: \u0661,\u0662", "x").pred, "\u0661\u0662");
  // Only the part after the last '='.
  EXPECT_EQ(verify_math_dapo("Answer: x = 3 = 5", "5").score, 1.0);
  // Ground truths are normalised too.
  EXPECT_EQ(verify_math_dapo("Answer: 5", " x = 5 ").score, 1.0);
  EXPECT_EQ(verify_math_dapo("Answer: \\frac12", "\\frac{1}{2}").score, 1.0);
  EXPECT_EQ(verify_math_dapo("Answer: 10%", "10\\%").score, -1.0);
  // Substitutions in order, one pass each.
  EXPECT_EQ(verify_math_dapo("Answer: an apple", "x").pred, "apple");
  EXPECT_EQ(verify_math_dapo("Answer: sqsquareuare", "x").pred, "square");
  EXPECT_EQ(verify_math_dapo("Answer: 2 \\text{and} 3", "2,3").score, 1.0);
  EXPECT_EQ(verify_math_dapo("Answer: \\boxed{5} and \\boxed{6}", "x").pred, "5}and\\boxed{6");
  EXPECT_EQ(verify_math_dapo("Answer: $5$ and $6$", "5").score, 1.0);
  // Ground truth lines are handled one by one.
  EXPECT_EQ(detail::normalize_final_answer("$5$\n$6$"), "5\n6");
  EXPECT_EQ(detail::normalize_final_answer("\\text{5\n}"), "\\text{5\n}");  // lazy .*? stops at '\n'
  EXPECT_EQ(detail::normalize_final_answer("frac\n12"), "frac{\n}{1}2");
}

TEST(MathDapo, WindowCountsCharacters) {
  // 300 characters kept: "Answer: 5\n" and 290 more fit, 291 cut the 'A'.
  const std::string line = "Answer: 5\n";
  std::string e290, e291, emoji290;
  for (int i = 0; i < 290; ++i) e290 += "\u00e9", emoji290 += "\U0001F600";
  e291 = e290 + "\u00e9";
  EXPECT_EQ(verify_math_dapo(line + e290, "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo(line + emoji290, "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo(line + e291, "5").pred, "[INVALID]");
  EXPECT_EQ(detail::last_chars("a\u00e9\U0001F600b", 2), "\U0001F600b");
  EXPECT_EQ(detail::last_chars("ab", 300), "ab");
}

TEST(MathDapo, InvalidUtf8IsOneCharacterPerByte) {
  // Expected values: Python on bytes.decode("utf-8", "surrogateescape").
  const std::string line = "Answer: 5\n";
  EXPECT_EQ(verify_math_dapo(line + std::string(290, '\xff'), "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo(line + std::string(291, '\xff'), "5").pred, "[INVALID]");
  std::string truncated;  // E2 82: a cut-off euro sign, two characters
  for (int i = 0; i < 145; ++i) truncated += "\xE2\x82";
  EXPECT_EQ(verify_math_dapo(line + truncated, "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo(line + truncated + "\xE2\x82", "5").pred, "[INVALID]");
  std::string bad;  // encoded surrogates (3 each), an overlong '/' (2)
  for (int i = 0; i < 96; ++i) bad += "\xED\xA0\x80";
  EXPECT_EQ(verify_math_dapo(line + bad + "\xC0\xAF", "5").score, 1.0);
  EXPECT_EQ(verify_math_dapo(line + bad + "\xC0\xAF\xF4\x90", "5").pred, "[INVALID]");

  Verdict v = verify_math_dapo("Answer: 5\xff", "5");
  EXPECT_EQ(v.score, -1.0);
  EXPECT_EQ(v.pred, "5\xff");
  EXPECT_EQ(verify_math_dapo("Answer: \\frac\xff\xfe", "x").pred, "\\frac{\xff}{\xfe}");
  EXPECT_EQ(verify_math_dapo("Answer: \\frac\xE2\x82\xAC\xE2\x82", "x").pred, "\\frac{\xE2\x82\xAC}{\xE2}\x82");
  EXPECT_EQ(verify_math_dapo("Answer:\xC2\xA0" "5\xC2", "5").pred, "5\xC2");
  EXPECT_EQ(verify_math_dapo("Answer: 1,000\xEF\xBC\x91", "x").pred, "1000\xEF\xBC\x91");
  EXPECT_EQ(verify_math_dapo("An\xC5wer: 5", "5").pred, "[INVALID]");  // C5 without its BF
  // Removing "\;" brings E2 82 80 together: still three characters, not U+2080.
  v = verify_math_dapo("Answer: \\sqrt\xE2\\;\x82\x80", "\\sqrt{\u2080}");
  EXPECT_EQ(v.score, -1.0);
  EXPECT_EQ(v.pred, "\\sqrt{\xE2}\x82\x80");
}

TEST(MathDapo, BoundedTimeOnHostileInput) {
  std::string response, gt;
  for (int i = 0; i < 100000; ++i) response += "Answer:  \t";
  for (int i = 0; i < 100000; ++i) gt += "\\text{\\boxed{$frac";
  std::string blanks = "Answer:" + std::string(1 << 20, ' ');
  const double start = cpu_ms();
  verify_math_dapo(response, gt);
  verify_math_dapo(blanks, blanks);
  verify_math_dapo(gt, response);
  EXPECT_LT(cpu_ms() - start, 1000.0 * kSlowBuild);
}

}  // namespace
}  // namespace dapo::reward
