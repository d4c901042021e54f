// The answer grammar: how normalised text parses (by canonical form), what
// does not parse, and the size guards.
#include "dapo/reward/expr.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dapo::reward {
namespace {

std::string parsed(const std::string& text) {
  Ast ast;
  if (!parse_answer(text, &ast)) return "<fail>";
  return canonical(ast, ast.root);
}

TEST(Expr, ParsesTheGrammar) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"42", "42"},
      {"007.50", "7.5"},
      {".5", "0.5"},
      {"1.5e-3", "1.5e-3"},
      {"2e", "(* 2 e)"},                     // no digit after e: Euler's number
      {"0.1\\overline{6}", "0.1(6)"},
      {"1+2*3", "(+ 1 (* 2 3))"},
      {"1-2-3", "(- (- 1 2) 3)"},
      {"2^3^2", "(^ 2 (^ 3 2))"},            // right-associative
      {"2^-3", "(^ 2 (- 3))"},
      {"-x^2", "(- (^ x 2))"},
      {"2x", "(* 2 x)"},
      {"2\\pi r", "(* (* 2 \\pi) r)"},
      {"(a)(b)", "(* a b)"},
      {"1/2x", "(* (/ 1 2) x)"},
      {"xyz", "(* (* x y) z)"},
      {"word", "word"},
      {"\\frac12", "(/ 1 2)"},
      {"\\frac{a+1}{b}", "(/ (+ a 1) b)"},
      {"\\frac\\pi2", "(/ \\pi 2)"},
      {"3\\frac{1}{2}", "(+ 3 (/ 1 2))"},    // mixed number
      {"3\\frac{x}{2}", "(* 3 (/ x 2))"},    // not a mixed number
      {"\\sqrt{2}", "(root 2)"},
      {"\\sqrt2", "(root 2)"},
      {"\\sqrt[3]{x}", "(root x 3)"},
      {"\\binom{5}{2}", "(binom 5 2)"},
      {"5!", "(! 5)"},
      {"|x-1|", "(abs (- x 1))"},
      {"\\sin x", "(sin x)"},
      {"\\sin 2x", "(sin (* 2 x))"},
      {"\\sin x\\cos x", "(* (sin x) (cos x))"},
      {"\\sin^2x", "(^ (sin x) 2)"},
      {"\\sin^{-1}x", "(arcsin x)"},
      {"\\log_2 8", "(log 8 2)"},
      {"\\ln(x+1)", "(ln (+ x 1))"},
      {"sqrt(2)", "(root 2)"},
      {"pi", "\\pi"},
      {"x_1", "x_1"},
      {"x_{12}", "x_12"},
      {"\\alpha_1", "\\alpha_1"},
      {"\\infty", "\\infty"},
      {"2\\pm1", "(+- 2 1)"},
      {"\\mp 1", "(-+  1)"},
      {"x=5", "(rel x 0 5)"},
      {"1<x<=2", "(rel 1 2 x 3 2)"},
      {"x\\in[0,1]", "(rel x 6 [0,1])"},
      {"(1,2]", "(1,2]"},
      {"[1,2)", "[1,2)"},
      {"(1)", "1"},
      {"\\{1,2\\}", "{1,2}"},
      {"\\{\\}", "{}"},
      {"\\emptyset", "{}"},
      {"{1,2}", "{1,2}"},
      {"(0,1)\\cup(2,3)", "[cup (0,1),(2,3)]"},
      {"1,2", "[list 1,2]"},
      {"1 or 2", "[list 1,2]"},
      {"1;2", "[list 1,2]"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(parsed(in), out) << in;
}

TEST(Expr, RejectsWhatItCannotRead) {
  for (const char* text : {"", "2 3", "x 2", "(1,2", "1,2)", "(1]", "\\frac{1}", "\\unknown{1}", "1+", "*2",
                           "\\dots", "1,2,\\ldots", "5.", "x_", "2 or", "or", "a and", "\\sqrt[3", "||", "\\log_",
                           "\\sin", "x^", "\\{1,2", "(1,2", "\\cup"})
    EXPECT_EQ(parsed(text), "<fail>") << "'" << text << "'";
}

TEST(Expr, GuardsBoundTheWork) {
  // Nesting beyond kMaxDepth fails instead of exhausting the stack.
  EXPECT_EQ(parsed(std::string(50, '(') + "1" + std::string(50, ')')), "1");
  EXPECT_EQ(parsed(std::string(100000, '(') + "1" + std::string(100000, ')')), "<fail>");
  EXPECT_EQ(parsed(std::string(100000, '-') + "1"), "<fail>");
  std::string powers = "2";
  for (int i = 0; i < 5000; ++i) powers += "^2";
  EXPECT_EQ(parsed(powers), "<fail>");
  // More nodes than kMaxNodes fail (flat, so depth is not the reason).
  std::string sum = "1";
  for (size_t i = 0; i < kMaxNodes; ++i) sum += "+1";
  ASSERT_LE(sum.size(), kMaxParseBytes * 2);
  EXPECT_EQ(parsed(sum.substr(0, kMaxParseBytes)), "<fail>");
  // Longer input than kMaxParseBytes is not parsed at all.
  EXPECT_EQ(parsed(std::string(kMaxParseBytes + 1, '1')), "<fail>");
  EXPECT_EQ(parsed(std::string(kMaxParseBytes, '1')), std::string(kMaxParseBytes, '1'));
}

TEST(Expr, VariablesAndNames) {
  Ast ast;
  ASSERT_TRUE(parse_answer("x_{1}+y*x_1+\\alpha", &ast));
  EXPECT_EQ(collect_variables(ast, ast.root), (std::vector<std::string>{"\\alpha", "x_1", "y"}));
  EXPECT_EQ(variable_name("a_{10}"), "a_10");
  ASSERT_TRUE(parse_answer("e+\\pi", &ast));
  EXPECT_TRUE(collect_variables(ast, ast.root).empty());  // constants are no variables
}

}  // namespace
}  // namespace dapo::reward
