// The JSONL fast path of `dapo verify` against the nlohmann path it replaces:
// what the scanner decodes and writes, which lines it declines, and a
// differential test over the existing test inputs plus random lines (escapes,
// Unicode, numbers, nesting, whitespace, duplicate keys, mutations) that
// demands identical output bytes and identical error messages.
#include "dapo/reward/jsonl_fast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dapo/core/error.h"
#include "dapo/reward/jsonl_line.h"
#include "dapo/reward/score_jsonl.h"

namespace dapo::reward {
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// ---- the scanner on its own ---------------------------------------------------

TEST(JsonlFast, DecodesTheFieldsAndWritesWhatNlohmannWrites) {
  JsonlLineScanner s;
  // Whitespace, "\/", \u escapes (a pair among them), short escapes, "-0",
  // numbers in non-canonical forms: all rewritten as dump() does.
  const std::string line =
      " {\"a\" : -0 ,\t\"response\":\"x\\/y \\u00e9\\u00E9 \\ud83d\\ude00 \\u0001\\u001F \\n\\\"\\\\\","
      "\"b\":[1.50, 1E+2,2.5e-3,-0.0,18446744073709551616 , true,null,false,{}],"
      "\"ground_truth\":\"\\u0031/2\",\"c\":{\"d\":[[]]}} \r";
  ASSERT_TRUE(s.scan(line));
  EXPECT_EQ(s.response(), "x/y \xC3\xA9\xC3\xA9 \xF0\x9F\x98\x80 \x01\x1F \n\"\\");
  EXPECT_EQ(s.truth(), "1/2");
  EXPECT_EQ(s.canonical(),
            "{\"a\":0,\"response\":\"x/y \xC3\xA9\xC3\xA9 \xF0\x9F\x98\x80 \\u0001\\u001f \\n\\\"\\\\\","
            "\"b\":[1.5,100.0,0.0025,-0.0,1.8446744073709552e+19,true,null,false,{}],"
            "\"ground_truth\":\"1/2\",\"c\":{\"d\":[[]]}}");
  EXPECT_EQ(s.canonical(), dump(Json::parse(line)));
}

TEST(JsonlFast, TheReferenceAsNlohmannsPathReadsIt) {
  JsonlLineScanner s;
  // A number is compared as dump() writes it.
  ASSERT_TRUE(s.scan(R"({"response":"r","ground_truth":1E2})"));
  EXPECT_EQ(s.truth(), "100.0");
  ASSERT_TRUE(s.scan(R"({"response":"r","ground_truth":-0})"));
  EXPECT_EQ(s.truth(), "0");
  // verl's nested reference, in either key order, and the top-level one wins.
  ASSERT_TRUE(s.scan(R"({"reward_model":{"style":"rule","ground_truth":"7"},"response":"r"})"));
  EXPECT_EQ(s.truth(), "7");
  ASSERT_TRUE(s.scan(R"({"reward_model":{"ground_truth":"7"},"response":"r","ground_truth":8})"));
  EXPECT_EQ(s.truth(), "8");
  // A bad nested reference does not matter when the top-level one is there.
  ASSERT_TRUE(s.scan(R"({"reward_model":{"ground_truth":[7]},"response":"r","ground_truth":"8"})"));
  EXPECT_EQ(s.truth(), "8");
  // Only the top level's reward_model, and only its direct ground_truth.
  EXPECT_FALSE(s.scan(R"({"response":"r","x":{"reward_model":{"ground_truth":"1"}}})"));
  EXPECT_FALSE(s.scan(R"({"response":"r","reward_model":{"x":{"ground_truth":"1"}}})"));
  // Keys are compared decoded.
  ASSERT_TRUE(s.scan(R"({"respons\u0065":"r","ground\u005ftruth":"5"})"));
  EXPECT_EQ(s.response(), "r");
  EXPECT_EQ(s.truth(), "5");
}

TEST(JsonlFast, DeclinesWhatItLeavesToNlohmann) {
  JsonlLineScanner s;
  const std::vector<std::string> declined = {
      // malformed
      "", "   ", "{", "}", "[1]", "\"x\"", "{\"response\":\"r\",\"ground_truth\":\"1\"} x",
      "{\"response\":\"r\",\"ground_truth\":\"1\",}", "{\"response\":\"r\" \"ground_truth\":\"1\"}",
      "{\"response\":\"r\",\"ground_truth\":01}", "{\"response\":\"r\",\"ground_truth\":1.}",
      "{\"response\":\"r\",\"ground_truth\":.5}", "{\"response\":\"r\",\"ground_truth\":+1}",
      "{\"response\":\"r\",\"ground_truth\":1e}", "{\"response\":\"r\",\"ground_truth\":\"1\",\"x\":tru}",
      "{\"response\":\"r\",\"ground_truth\":\"1\",\"x\":[1,]}", "{'response':'r'}",
      "{\"response\":\"a\x01\",\"ground_truth\":\"1\"}",        // raw control character
      "{\"response\":\"\\ud800\",\"ground_truth\":\"1\"}",       // lone high surrogate
      "{\"response\":\"\\ud800\\u0041\",\"ground_truth\":\"1\"}",  // high + not low
      "{\"response\":\"\\udc00\",\"ground_truth\":\"1\"}",       // lone low surrogate
      "{\"response\":\"\\u12g4\",\"ground_truth\":\"1\"}", "{\"response\":\"\\x\",\"ground_truth\":\"1\"}",
      "{\"response\":\"\xC0\xAF\",\"ground_truth\":\"1\"}",      // overlong UTF-8
      "{\"response\":\"\xED\xA0\x80\",\"ground_truth\":\"1\"}",  // a surrogate in UTF-8
      "{\"response\":\"\xF4\x90\x80\x80\",\"ground_truth\":\"1\"}",  // beyond U+10FFFF
      "{\"response\":\"\xE2\x88\",\"ground_truth\":\"1\"}",      // cut short
      "\xEF\xBB\xBF{\"response\":\"r\",\"ground_truth\":\"1\"}",  // BOM: nlohmann skips it
      "{\"response\":\"r\",\"ground_truth\":1e999}",             // overflow
      // missing or mistyped
      "{\"ground_truth\":\"1\"}", "{\"response\":\"r\"}", "{\"response\":5,\"ground_truth\":\"1\"}",
      "{\"response\":null,\"ground_truth\":\"1\"}", "{\"response\":\"r\",\"ground_truth\":[\"1\"]}",
      "{\"response\":\"r\",\"ground_truth\":true}", "{\"response\":\"r\",\"reward_model\":{}}",
      "{\"response\":\"r\",\"reward_model\":\"1\"}", "{\"response\":\"r\",\"reward_model\":{\"ground_truth\":null}}",
      // unusual: output keys present, duplicate keys at any depth
      "{\"response\":\"r\",\"ground_truth\":\"1\",\"score\":0}", "{\"acc\":1,\"response\":\"r\",\"ground_truth\":\"1\"}",
      "{\"response\":\"r\",\"ground_truth\":\"1\",\"pred\":\"\"}", "{\"response\":\"r\",\"response\":\"s\",\"ground_truth\":\"1\"}",
      "{\"response\":\"r\",\"ground_truth\":\"1\",\"x\":{\"a\":1,\"a\":2}}",
      "{\"response\":\"r\",\"ground_truth\":\"1\",\"a\":1,\"\\u0061\":2}",
  };
  for (const std::string& line : declined) EXPECT_FALSE(s.scan(line)) << line;
  // Score, acc and pred deeper down are ordinary keys.
  EXPECT_TRUE(s.scan(R"({"response":"r","ground_truth":"1","x":{"score":1,"acc":2,"pred":3}})"));
}

TEST(JsonlFast, DeclinesDeepNestingAndHugeObjects) {
  JsonlLineScanner s;
  const auto nested = [](int depth) {
    return "{\"response\":\"r\",\"ground_truth\":\"1\",\"x\":" + std::string(size_t(depth), '[') +
           std::string(size_t(depth), ']') + "}";
  };
  EXPECT_TRUE(s.scan(nested(JsonlLineScanner::kMaxDepth - 1)));
  EXPECT_FALSE(s.scan(nested(JsonlLineScanner::kMaxDepth)));
  EXPECT_FALSE(s.scan(nested(100000)));  // no stack overflow
  std::string wide = "{\"response\":\"r\",\"ground_truth\":\"1\"";
  for (size_t i = 2; i < JsonlLineScanner::kMaxKeys; ++i) wide += ",\"k" + std::to_string(i) + "\":" + std::to_string(i);
  EXPECT_TRUE(s.scan(wide + "}"));
  EXPECT_FALSE(s.scan(wide + ",\"one_more\":0}"));
}

TEST(JsonlFast, AppendJsonStringMatchesNlohmannOnAnyBytes) {
  std::mt19937 rng(7);
  const std::string alphabet = std::string("ab\"\\/\x01\x1f\x7f\t\n\r\b\f", 15) + std::string("\0", 1) +
                               "\xC3\xA9\xE2\x88\x92\xF0\x9F\x98\x80\xC0\xFF\xED\xA0\x80\xF4\x90\x80\x80";
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const size_t n = rng() % 12;
    for (size_t k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    std::string ours = "prefix:";
    append_json_string(&ours, text);
    ASSERT_EQ(ours, "prefix:" + dump(Json(text))) << i;
  }
}

TEST(JsonlFast, AppendJsonDoubleMatchesNlohmann) {
  for (double v : {1.0, -1.0, 0.0, -0.0, 0.5, -0.25, 1e15, 1e16, 1e-5, 1e300, 123.456, 1.0 / 3.0,
                   std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    std::string ours;
    append_json_double(&ours, v);
    EXPECT_EQ(ours, Json(v).dump()) << v;
  }
}

// ---- the differential test --------------------------------------------------

struct Outcome {
  std::string text, error;
  bool correct = false;
  bool operator==(const Outcome&) const = default;
};

// Runs f(&text) -> acc, catching the UserError.
template <class F>
Outcome outcome_of(F&& f) {
  Outcome o;
  try {
    o.correct = f(&o.text);
  } catch (const UserError& e) {
    o.text.clear();
    o.error = e.what();
  }
  return o;
}

// Random JSONL lines: mostly well-formed verify inputs written in every way
// JSON allows, some with fields missing or mistyped, some mutated at random.
class LineGenerator {
 public:
  explicit LineGenerator(uint64_t seed) : rng_(seed) {}

  std::string line() {
    std::vector<std::string> members;
    if (chance(95)) members.push_back(member(key("response"), chance(97) ? string_of(response()) : value(2)));
    const int truth = pick_index(10);
    if (truth < 5) {
      members.push_back(member(key("ground_truth"), string_of(answer())));
    } else if (truth < 7) {
      members.push_back(member(key("ground_truth"), number()));
    } else if (truth < 9) {
      std::vector<std::string> rm = {member("\"style\"", "\"rule\"")};
      if (chance(95)) rm.push_back(member(key("ground_truth"), chance(80) ? string_of(answer()) : value(2)));
      shuffle(rm);
      members.push_back(member(key("reward_model"), object_of(rm)));
    } else if (chance(50)) {
      members.push_back(member(key("ground_truth"), value(2)));
    }
    for (int i = pick_index(5); i > 0; --i) members.push_back(member(string_of(word()), value(0)));
    if (chance(3)) members.push_back(member(choice({"\"score\"", "\"acc\"", "\"pred\""}), value(2)));
    if (chance(3) && !members.empty()) members.push_back(members[size_t(pick_index(int(members.size())))]);
    shuffle(members);
    std::string text = ws() + object_of(members) + ws();
    if (chance(10)) text = mutate(text);
    return text;
  }

 private:
  bool chance(int percent) { return int(rng_() % 100) < percent; }
  int pick_index(int n) { return int(rng_() % uint64_t(n)); }
  std::string choice(std::initializer_list<const char*> options) {
    return *(options.begin() + pick_index(int(options.size())));
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    std::shuffle(v.begin(), v.end(), rng_);
  }

  std::string ws() {
    if (chance(75)) return "";
    return choice({" ", "  ", "\t", " \t ", "\r", "\n", " \r\n "});
  }

  // A key spelled plainly or with escapes that decode to it.
  std::string key(const std::string& name) {
    if (chance(90)) return "\"" + name + "\"";
    return string_of(name, 30, false);
  }

  std::string member(const std::string& key_text, const std::string& value_text) {
    return ws() + key_text + ws() + ":" + ws() + value_text + ws();
  }

  static std::string object_of(const std::vector<std::string>& members) {
    std::string text = "{";
    for (size_t i = 0; i < members.size(); ++i) text += (i ? "," : "") + members[i];
    return text + "}";
  }

  // A JSON string literal for `text` (decoded UTF-8), escaped in any of the
  // ways JSON allows (ASCII as \u escapes `escape_percent` of the time), with
  // random literal fragments (escaped code points, surrogate pairs, now and
  // then an invalid one) mixed in if `fragments`.
  std::string string_of(const std::string& text, int escape_percent = 2, bool fragments = true) {
    std::string out = "\"";
    for (unsigned char c : text) {
      if (fragments && chance(4)) out += fragment();
      if (c == '"') {
        out += choice({"\\\"", "\\u0022"});
      } else if (c == '\\') {
        out += choice({"\\\\", "\\u005c", "\\u005C"});
      } else if (c == '/') {
        out += choice({"/", "\\/"});
      } else if (c < 0x20 || (c < 0x80 && chance(escape_percent))) {
        const char* short_escape = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : nullptr;
        char buf[8];
        std::snprintf(buf, sizeof buf, chance(50) ? "\\u%04x" : "\\u%04X", unsigned(c));
        out += short_escape && chance(70) ? short_escape : buf;
      } else {
        out += char(c);
      }
    }
    return out + "\"";
  }

  std::string fragment() {
    if (chance(5)) {  // invalid: nlohmann must reject the line, and so must the scanner
      return choice({"\\ud800", "\\udc00", "\\ud800\\u0041", "\x01", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                     "\xE2\x88", "\xFF", "\\q", "\\u12G4", "\\u12"});
    }
    return choice({"\\u00e9", "\\u00E9", "\\u2212", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\u0000", "\\u001f",
                   "\\u007f", "\\u0080", "\\u07ff", "\\u0800", "\\uffff", "\\udbff\\udfff", "\\u0041", "\\u002f",
                   "\xC3\xA9", "\xE2\x88\x92", "\xF0\x9F\x98\x80", "\xE4\xB8\xAD", "\x7F", "\\t", "\\b", "\\f"});
  }

  std::string answer() {
    return choice({"42", "\\frac12", "\\frac{1}{2}", "0.5", "x = 5", "5", "(3, 7)", "(3,7)", "a\"b", "10\\text{ cm}",
                   "\xE2\x88\x92" "3", "-3", "1,000", "\xC3\xA9", "\xF0\x9F\x98\x80", "2\\sqrt{3}", "\\sqrt{12}", "",
                   "\t7", "7\x01", "\\{1,2\\}", "[0, 1)", "x^2+2x+1", "(x+1)^2", "\\pi", "e^{-20}"});
  }

  std::string response() {
    std::string text;
    if (chance(20)) {
      for (int i = pick_index(6); i >= 0; --i)
        text += choice({"Let us compute $x + y = 10$ and $xy = 21$.\n", "So $\\frac{a^2+b^2}{ab}$ simplifies. ",
                        "Wait, \"check\" this: 15 \\times 4 = 60.\n\n", "Taking $3^{6} \\equiv 1 \\pmod{7}$. ",
                        "The path /usr/bin is not maths.\t", "\xE2\x88\x91 \xCF\x80 \xC3\xA9t\xC3\xA9. "});
    }
    switch (pick_index(6)) {
      case 0: return text + "Answer: " + answer();
      case 1: return text + "**Answer:** " + answer() + "\n";
      case 2: return text + "no answer here";
      default: return text + "so the answer is $\\boxed{" + answer() + "}$.";
    }
  }

  std::string word() {
    return choice({"id", "uid", "data_source", "extra_info", "index", "\xC3\xA9t\xC3\xA9", "a b", "q\"uote",
                   "back\\slash", "", "prompt", "response_length", "x"});
  }

  std::string number() {
    if (chance(5)) return choice({"01", "1.", ".5", "+1", "-", "1e", "--1", "0x10", "1e999", "Infinity", "NaN"});
    if (chance(30)) {
      return choice({"0", "-0", "42", "-17", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                     "-9223372036854775809", "18446744073709551615", "18446744073709551616",
                     "123456789012345678901234567890", "1.5", "1.50", "-0.0", "0.0", "1e2", "1E+2", "1e-2", "2.5e-3",
                     "1e308", "1e-320", "1e-400", "0.1", "100.0", "3.14159265358979323846", "5e0", "-2E-0"});
    }
    if (chance(50)) return std::to_string(int64_t(rng_()) >> pick_index(64));
    char buf[40];
    std::uniform_real_distribution<double> mantissa(-10, 10);
    std::snprintf(buf, sizeof buf, "%.*g", 1 + pick_index(17), mantissa(rng_) * std::pow(10.0, pick_index(40) - 20));
    return buf;
  }

  std::string value(int depth) {
    const int kind = pick_index(depth > 3 ? 4 : 6);
    if (kind == 0) return string_of(chance(50) ? word() : answer());
    if (kind == 1) return number();
    if (kind == 2) return chance(5) ? choice({"tru", "nul", "False"}) : choice({"true", "false", "null"});
    if (kind == 3) return string_of(response());
    std::vector<std::string> items;
    for (int i = pick_index(4); i > 0; --i)
      items.push_back(kind == 4 ? ws() + value(depth + 1) + ws() : member(string_of(word()), value(depth + 1)));
    if (kind == 5) {
      if (chance(10) && !items.empty()) items.push_back(items.front());  // duplicate key below the top
      return object_of(items);
    }
    std::string text = "[";
    for (size_t i = 0; i < items.size(); ++i) text += (i ? "," : "") + items[i];
    return text + ws() + "]";
  }

  std::string mutate(std::string text) {
    if (text.empty()) return text;
    const size_t at = size_t(pick_index(int(text.size())));
    switch (pick_index(3)) {
      case 0: text.erase(at, 1); break;
      case 1: text.insert(at, 1, text[at]); break;
      default: text.insert(at, choice({"{", "}", "[", "]", ",", ":", "\"", "\\", " ", "0", "a", "\x01", "\xC3"}));
    }
    return text;
  }

  std::mt19937_64 rng_;
};

// The inputs of test_score_jsonl.cpp and test_verify_cli.cpp, and lines like
// the benchmark's.
std::vector<std::string> existing_inputs() {
  std::vector<std::string> lines = {
      "{\"id\":7,\"response\":\"so \\\\boxed{\\\\frac12}\",\"ground_truth\":\"0.5\",\"zeta\":[1,2]}",
      "{\"zz\":null,\"response\":\"Answer: 3\",\"reward_model\":{\"ground_truth\":\"4\",\"style\":\"rule\"}}",
      "{\"response\":\"\\\\boxed{42}\",\"ground_truth\":42}",
      "{\"response\":\"x\",\"ground_truth\":\"1\"}",
      "{\"response\": ",
      "[1,2]",
      "{\"ground_truth\":\"1\"}",
      "{\"response\":5,\"ground_truth\":\"1\"}",
      "{\"response\":\"x\"}",
      "{\"response\":\"x\",\"reward_model\":{}}",
      "{\"response\":\"x\",\"ground_truth\":[\"1\"]}",
      "bad",
      "worse",
      "{\"response\":\"\\\\boxed{0.5}\",\"ground_truth\":\"\\\\frac{1}{2}\",\"uid\":\"a\"}",
      "{\"response\":\"Answer: 4\",\"reward_model\":{\"ground_truth\":\"5\"}}",
      "{\"response\":\"no answer\",\"ground_truth\":\"5\"}",
      "{\"response\":\"\\\\boxed{5}\",\"ground_truth\":5}",
      "{\"response\":\"\\\\boxed{7}\",\"ground_truth\":\"7\"}",
      "{oops",
      "{\"index\":3,\"data_source\":\"math_dapo\",\"response\":\"Let us first understand the problem. We are given "
      "that $x + y = 10$ and $xy = 21$, so by Vieta's formulas the roots of $t^2 - 10t + 21 = 0$ are $t = 3$ and "
      "$t = 7$.\\nSubstituting back, we obtain $2\\\\sqrt{3} \\\\cdot \\\\sqrt{3} = 6$.\\n\\nPutting it all "
      "together, the final answer is $\\\\boxed{\\\\frac{\\\\pi}{4}}$.\",\"reward_model\":{\"ground_truth\":"
      "\"\\\\frac{\\\\pi}{4}\",\"style\":\"rule\"}}",
  };
  for (int i = 0; i < 50; ++i) {
    const bool right = (i * 7919) % 3 == 0;
    lines.push_back("{\"i\":" + std::to_string(i) + ",\"response\":\"\\\\boxed{" + std::to_string(i) +
                    "}\",\"ground_truth\":\"" + std::to_string(right ? i : i + 1) + "\"}");
  }
  return lines;
}

TEST(JsonlFast, SameBytesAndErrorsAsNlohmannOnTestInputsAndRandomLines) {
  std::vector<std::string> corpus = existing_inputs();
  LineGenerator gen(20250314);
  for (int i = 0; i < 30000; ++i) corpus.push_back(gen.line());

  JsonlLineScanner scanner;
  std::string reused;
  int mismatches = 0;
  size_t fast = 0, valid = 0;
  for (size_t i = 0; i < corpus.size() && mismatches < 10; ++i) {
    const std::string& line = corpus[i];
    const int64_t number = int64_t(i) + 1;
    const Outcome reference =
        outcome_of([&](std::string* out) { return score_jsonl_line_nlohmann(line, "R.jsonl", number, out); });
    // The output buffer is reused from line to line, as verify_jsonl does.
    const Outcome ours = outcome_of([&](std::string* out) {
      const bool acc = score_jsonl_line(line, "R.jsonl", number, &scanner, &reused);
      *out = reused;
      return acc;
    });
    if (!(ours == reference)) {
      ++mismatches;
      ADD_FAILURE() << "line " << number << ": " << line << "\n  nlohmann: " << reference.text << reference.error
                    << "\n  fast:     " << ours.text << ours.error;
    }
    // The scanner on its own: accepts only what nlohmann parses, and then
    // writes what dump() writes and finds the fields nlohmann finds.
    const bool accepted = scanner.scan(line);
    Json parsed;
    bool parses = true;
    try {
      parsed = Json::parse(line);
    } catch (const Json::exception&) {
      parses = false;
    }
    valid += reference.error.empty();
    if (!accepted) continue;
    ++fast;
    ASSERT_TRUE(parses && reference.error.empty()) << line;
    EXPECT_EQ(scanner.canonical(), dump(parsed)) << line;
    EXPECT_EQ(scanner.response(), parsed["response"].get<std::string>()) << line;
    const Json& truth = parsed.contains("ground_truth") ? parsed["ground_truth"] : parsed["reward_model"]["ground_truth"];
    EXPECT_EQ(scanner.truth(), truth.is_string() ? truth.get<std::string>() : truth.dump()) << line;
  }
  EXPECT_EQ(mismatches, 0);
  // The corpus must exercise both paths: most valid lines take the fast one.
  EXPECT_GT(valid, corpus.size() / 3);
  EXPECT_GT(fast, valid * 2 / 3);
  EXPECT_LT(fast, valid);
  std::printf("corpus %zu lines: %zu valid, %zu through the fast path\n", corpus.size(), valid, fast);
}

TEST(JsonlFast, VerifyJsonlOnManyThreadsEqualsTheNlohmannPath) {
  LineGenerator gen(99);
  std::string input, expected;
  int64_t responses = 0, correct = 0;
  for (int64_t n = 1; responses < 3000;) {
    const std::string line = gen.line();
    if (line.find_first_of("\r\n") != std::string::npos) continue;  // would not be one line of a file
    const Outcome o = outcome_of([&](std::string* out) { return score_jsonl_line_nlohmann(line, "R.jsonl", n, out); });
    if (!o.error.empty()) continue;
    input += line + "\n";
    expected += o.text + "\n";
    ++responses, ++n;
    correct += o.correct;
  }
  std::istringstream in(input);
  std::ostringstream out;
  const VerifySummary s = verify_jsonl(in, out, "R.jsonl", 3);
  EXPECT_EQ(out.str(), expected);
  EXPECT_EQ(s.responses, responses);
  EXPECT_EQ(s.correct, correct);
}

}  // namespace
}  // namespace dapo::reward
