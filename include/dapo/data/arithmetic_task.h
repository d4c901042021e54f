// The demo task: short arithmetic word problems with integer answers, made
// from a seed, with a worked solution for the supervised warm start. A tiny
// model trained from scratch on a laptop's CPU must be able to learn them, so
// the problems are short, ASCII, built from a small vocabulary of templates,
// and their difficulty is a knob (number of operands, digits, operators).
//
// A problem is a story applied left to right to a running total, e.g.
//   "Mia has 3 bags of 12 pens. She gives 5 away. Then she has 2 times as
//    many. How many pens does she have now?"
//   solution "3 * 12 = 36\n36 - 5 = 31\n31 * 2 = 62\nAnswer: 62"
// Sentences per operation:
//   start          "{Name} has {a} {items}."
//   start with *   "{Name} has {k} {bags|boxes} of {a} {items}."   (k * a)
//   +              "{He} {buys|finds|gets} {x} more."
//   -              "{He} gives {x} away." | "{He} {loses|sells} {x}."
//   * (later)      "Then {he} has {k} times as many."
//   question       "How many {items} does {he} have now?"
// The running total never goes below zero (nobody gives away more than they
// have), so every answer is a non-negative integer. A subtraction drawn when
// the total is 0 becomes an addition (a multiplication when the spec allows
// no addition).
//
// Randomness: Philox (core/rng.h) keyed by the seed, one stream per problem,
// so a problem is the same on every machine and compiler and does not depend
// on how many other problems are made.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dapo::data {

enum class ArithOp { add, sub, mul };

// How a worked solution is written.
//   compact: one line per operation, "a op b = c", then "Answer: N" (the CPU
//            demo: a tiny model can learn one-digit arithmetic in one line).
//   columns: each operation worked digit by digit as on paper, ones first,
//            one line per column, so that a model of a few tens of millions
//            of parameters can do multi-digit arithmetic one small step at a
//            time (the GPU demo; solutions run to hundreds of tokens):
//              347 + 86          the operation
//              7 + 6 = 13        ones: digit + digit (+ 1 carried in)
//              4 + 8 + 1 = 13    the shorter number padded with 0
//              3 + 0 + 1 = 4
//              = 433             the result (the last column whole)
//              433 - 158
//              13 - 8 = 5        "1d": the column borrows 10 ...
//              13 - 5 - 1 = 7    ... and the next one gives back 1
//              4 - 1 - 1 = 2
//              = 275             (leading zeros dropped)
//              275 * 6           a multiplication by a one-digit factor
//              5 * 6 = 30        digit * factor (+ the carry of the last column)
//              7 * 6 + 3 = 45
//              2 * 6 + 4 = 16
//              = 1650
//              Answer: 1650
//            "k bags of a" is written "a * k". No colons: the verifier reads
//            the last "Answer:" line.
enum class SolutionStyle { compact, columns };

SolutionStyle parse_solution_style(std::string_view name);  // "compact" | "columns"; UserError otherwise
const char* solution_style_name(SolutionStyle style);

char arith_op_symbol(ArithOp op);  // '+', '-', '*'

// What problems to make. Numbers written in a problem ("a" and "x" above)
// have between min_digits and max_digits digits (the digit count is drawn
// first, uniformly, then the value; one-digit numbers are 2..9). Factors
// ("k") are drawn from 2..max_factor whatever the digit counts. A subtracted
// number larger than the running total is redrawn from 1..total.
struct ArithmeticSpec {
  int min_operands = 2;  // numbers in a problem, 2..8 (operations = operands - 1)
  int max_operands = 2;
  int min_digits = 1;    // 1..6
  int max_digits = 1;
  bool add = true;       // allowed operations (at least one)
  bool sub = false;
  bool mul = false;
  int max_factor = 9;    // 2..9
  // 0: no cap. Otherwise a later multiplication ("Then ... times as many")
  // drawn when total * max_factor could pass max_total becomes an addition
  // (a subtraction when adding is not allowed): totals then pass max_total
  // only by additions, which keeps the length of a columns solution in
  // check. >= 100.
  int64_t max_total = 0;
  SolutionStyle solution = SolutionStyle::compact;
};

// The difficulty presets of `dapo demo-data --difficulty D`:
//   1: 2 operands, 1 digit, +           4: 2-3 operands, 1-2 digits, + - *, factors 2-5
//   2: 2 operands, 1 digit, + -         5: 3-4 operands, 1-3 digits, + - *, factors 2-9
//   3: 2 operands, 1-2 digits, + -      6: 5-7 operands, 2-3 digits, + - *, factors 2-9,
//                                          totals <= 99999 (the GPU demo, with columns)
// All with the compact solution style (the caller picks the style).
// UserError "difficulty D: ..." outside 1..6.
ArithmeticSpec arithmetic_difficulty(int level);
inline constexpr int kMaxArithmeticDifficulty = 6;

// UserError "arithmetic spec: ..." naming the field out of range.
void check_arithmetic_spec(const ArithmeticSpec& spec);

struct ArithmeticProblem {
  std::string problem;            // the word problem (no instruction around it)
  std::string solution;           // in spec.solution's style, ending with "Answer: N"
  int64_t answer = 0;             // >= 0
  std::vector<int64_t> operands;  // in the order they appear in the text
  std::vector<ArithOp> ops;       // ops[i] combines the running total with operands[i + 1]
};

// One problem: a pure function of (spec, seed, stream). Checks the spec.
ArithmeticProblem make_arithmetic_problem(const ArithmeticSpec& spec, uint64_t seed, uint64_t stream);

// How the problem becomes the user message.
//   dapo:    verl's DAPO-Math-17k wording, exactly:
//            "Solve the following math problem step by step. The last line of
//            your response should be of the form Answer: $Answer (without
//            quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n
//            Remember to put your answer on its own line after \"Answer:\"."
//            (about 40 tokens of instruction with Qwen's tokenizer, about 180
//            with the demo's, which has no merges for its words)
//   compact: the problem alone. The demo model is tiny and learns from
//            scratch: the instruction would dominate its context and teach it
//            nothing, since the supervised warm start already shows the
//            "Answer: N" line the verifier reads.
enum class PromptFormat { dapo, compact };

PromptFormat parse_prompt_format(std::string_view name);  // "dapo" | "compact"; UserError otherwise
const char* prompt_format_name(PromptFormat format);
std::string render_prompt(std::string_view problem, PromptFormat format);

}  // namespace dapo::data
