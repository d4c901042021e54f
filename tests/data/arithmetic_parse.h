// Shared by the demo-task tests: reads an arithmetic word problem back from
// its text alone, with its own sentence patterns and arithmetic, so that the
// generator's answers (and the shipped files' ground truths) are checked by
// code that does not share the generator's logic.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

namespace dapo::data::testing {

struct ParsedArithmetic {
  std::string error;             // empty when the text was understood
  std::vector<int64_t> numbers;  // in the order of the text
  std::vector<char> ops;         // '+', '-', '*': ops[i] applies numbers[i + 1]
  int64_t answer = 0;
  std::string solution;          // "a op b = c" lines, then "Answer: N"
};

inline ParsedArithmetic parse_arithmetic_text(const std::string& text) {
  ParsedArithmetic r;
  const auto fail = [&](const std::string& why) {
    r.error = why + " in: " + text;
    return r;
  };
  static const std::regex sentence_re(R"( ?([^.?]+[.?]))");
  std::vector<std::string> sentences;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), sentence_re); it != std::sregex_iterator(); ++it)
    sentences.push_back((*it)[1].str());
  if (sentences.size() < 2) return fail("fewer than two sentences");

  static const std::regex start_re(R"(^([A-Z][a-z]+) has (\d+) ([a-z]+)\.$)");
  static const std::regex boxes_re(R"(^([A-Z][a-z]+) has (\d+) (bags|boxes) of (\d+) ([a-z]+)\.$)");
  static const std::regex add_re(R"(^(He|She) (buys|finds|gets) (\d+) more\.$)");
  static const std::regex give_re(R"(^(He|She) gives (\d+) away\.$)");
  static const std::regex lose_re(R"(^(He|She) (loses|sells) (\d+)\.$)");
  static const std::regex times_re(R"(^Then (he|she) has (\d+) times as many\.$)");
  static const std::regex question_re(R"(^How many ([a-z]+) does (he|she) have now\?$)");

  std::smatch m;
  std::string items, pronoun;  // lower case
  int64_t total = 0;
  const auto step = [&](char op, int64_t x) {
    const int64_t before = total;
    total = op == '+' ? total + x : op == '-' ? total - x : total * x;
    r.ops.push_back(op);
    r.numbers.push_back(x);
    r.solution += std::to_string(before) + " " + op + " " + std::to_string(x) + " = " + std::to_string(total) + "\n";
  };
  const auto same_pronoun = [&](std::string p) {
    for (char& c : p) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (pronoun.empty()) pronoun = p;
    return p == pronoun;
  };
  if (std::regex_match(sentences[0], m, boxes_re)) {
    total = std::stoll(m[2].str());
    r.numbers.push_back(total);
    items = m[5].str();
    step('*', std::stoll(m[4].str()));
  } else if (std::regex_match(sentences[0], m, start_re)) {
    total = std::stoll(m[2].str());
    r.numbers.push_back(total);
    items = m[3].str();
  } else {
    return fail("no start sentence");
  }
  for (size_t i = 1; i + 1 < sentences.size(); ++i) {
    const std::string& s = sentences[i];
    if (std::regex_match(s, m, add_re)) {
      if (!same_pronoun(m[1].str())) return fail("pronoun changes");
      step('+', std::stoll(m[3].str()));
    } else if (std::regex_match(s, m, give_re)) {
      if (!same_pronoun(m[1].str())) return fail("pronoun changes");
      step('-', std::stoll(m[2].str()));
    } else if (std::regex_match(s, m, lose_re)) {
      if (!same_pronoun(m[1].str())) return fail("pronoun changes");
      step('-', std::stoll(m[3].str()));
    } else if (std::regex_match(s, m, times_re)) {
      if (!same_pronoun(m[1].str())) return fail("pronoun changes");
      step('*', std::stoll(m[2].str()));
    } else {
      return fail("unknown sentence '" + s + "'");
    }
    if (total < 0) return fail("more is taken away than there is");
  }
  if (!std::regex_match(sentences.back(), m, question_re)) return fail("no question at the end");
  if (m[1].str() != items) return fail("the question asks about other items");
  if (!same_pronoun(m[2].str())) return fail("pronoun changes");
  r.answer = total;
  r.solution += "Answer: " + std::to_string(total);
  return r;
}

}  // namespace dapo::data::testing
