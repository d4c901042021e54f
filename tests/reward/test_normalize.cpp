// Normalisation rules of normalize.h, one table row per rule.
#include "dapo/reward/normalize.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dapo::reward {
namespace {

struct Case {
  const char* in;
  const char* out;
  const char* why;
};

void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) EXPECT_EQ(normalize_answer(c.in), c.out) << c.why << ": '" << c.in << "'";
}

TEST(Normalize, LatexWrappersAndSpacing) {
  check({
      {"$5$", "5", "math delimiters"},
      {"\\(5\\)", "5", "inline delimiters"},
      {"\\[5\\]", "5", "display delimiters"},
      {"\\left( x+1 \\right)", "(x+1)", "\\left/\\right"},
      {"\\left. x \\right|", "x|", "\\left. is an empty delimiter"},
      {"\\bigl( x+1 \\bigr)", "(x+1)", "\\bigl/\\bigr"},
      {"1\\!2", "1 2", "\\! between digits keeps them apart"},
      {"a \\, b", "a b", "\\, between letters"},
      {"\\frac{1}{2} \\quad", "\\frac{1}{2}", "\\quad"},
      {"\\displaystyle\\frac12", "\\frac12", "\\displaystyle"},
      {"\\text{hello world}", "hello world", "\\text unwrapped, inner space kept"},
      {"\\mathrm{e}^{2}", "e^{2}", "\\mathrm"},
      {"\\mathbf{v}", "v", "\\mathbf"},
      {"\\boxed{\\textbf{7}}", "7", "nested wrappers"},
      {"\\operatorname{sin} x", "sin x", "\\operatorname"},
      {"\\dfrac{1}{2}", "\\frac{1}{2}", "\\dfrac"},
      {"\\tfrac{1}{2}", "\\frac{1}{2}", "\\tfrac"},
      {"\\cfrac{1}{2}", "\\frac{1}{2}", "\\cfrac"},
      {"\\dbinom{5}{2}", "\\binom{5}{2}", "\\dbinom"},
      {"2 \\cdot 3", "2*3", "\\cdot"},
      {"2 \\times 3", "2*3", "\\times"},
      {"6 \\div 3", "6/3", "\\div"},
      {"x \\leq 3", "x<=3", "\\leq"},
      {"x \\geqslant 3", "x>=3", "\\geqslant"},
      {"x \\neq 3", "x\\ne 3", "\\neq"},
      {"\\pi r", "\\pi r", "a command before a letter keeps its space"},
      {"x = 5", "x=5", "spaces around operators go"},
      {"\\hspace{1cm}5", "5", "\\hspace and its argument"},
      {"\\$5", "5", "escaped dollar"},
      {"5\\%", "5", "escaped percent"},
      {"5%", "5", "percent"},
      {"\\{1, 2\\}", "\\{1,2\\}", "set braces stay"},
      {"\\lvert x \\rvert", "|x|", "\\lvert \\rvert"},
      {"\\varnothing", "\\emptyset", "\\varnothing"},
  });
}

TEST(Normalize, DegreesUnitsPunctuation) {
  check({
      {"30^\\circ", "30", "degrees"},
      {"30^{\\circ}", "30", "braced degrees"},
      {"30 ^ { \\circ }", "30", "spaced degrees"},
      {"30\\circ", "30", "\\circ without ^"},
      {"100^\\circ C", "100", "Celsius"},
      {"5 cm", "5", "unit word"},
      {"5 \\text{cm}^2", "5", "unit with power"},
      {"5\\text{ km/h}", "5", "compound unit"},
      {"3 m/s", "3", "compound unit with single letters"},
      {"x/h", "x/h", "a quotient of variables is no unit"},
      {"12 square units", "12", "two unit words"},
      {"5\\text{ m}", "5", "single-letter unit in text after a number"},
      {"x\\text{ m}", "x m", "only after a number"},
      {"12\\text{ students}", "12", "any counted noun in text after a number"},
      {"12 \\text{red apples}", "12", "several words"},
      {"5\\text{ or more}", "5 or more", "a hedge is no unit"},
      {"5\\text{ and }6", "5 and 6", "text in the middle stays"},
      {"\\boxed{5}\\text{ cm}", "5", "after a box"},
      {"5 m", "5 m", "a bare single letter is no unit"},
      {"cm", "cm", "a unit alone is the answer"},
      {"\\sec x", "\\sec x", "\\sec is secant, not seconds"},
      {"5.", "5", "trailing period"},
      {"5 ,", "5", "trailing comma"},
      {"(1,2).", "(1,2)", "period after a tuple"},
      {"= 5", "5", "leading equals sign"},
      {"5\\\\", "5", "trailing line break"},
  });
}

TEST(Normalize, NumbersAndChoices) {
  check({
      {"1,000", "1000", "thousands"},
      {"-1,234,567.25", "-1234567.25", "thousands with sign and decimals"},
      {"1{,}000", "1000", "LaTeX thousands"},
      {"3{,}14", "3.14", "LaTeX decimal comma"},
      {"1\\,000\\,000", "1000000", "thin-space thousands"},
      {"1,00", "1,00", "not a thousands pattern"},
      {"12,345,67", "12,345,67", "broken groups stay"},
      {"(1,000)", "(1,000)", "a tuple is not a number"},
      {"(A)", "A", "choice in parentheses"},
      {"\\text{(C)}", "C", "choice in text"},
  });
}

TEST(Normalize, Unicode) {
  EXPECT_EQ(normalize_unicode("plain ascii"), "plain ascii");
  check({
      {"−5", "-5", "U+2212 minus"},
      {"5–3", "5-3", "en dash"},
      {"3·4", "3*4", "middle dot"},
      {"3×4", "3*4", "multiplication sign"},
      {"6÷3", "6/3", "division sign"},
      {"x²", "x^{2}", "superscript two"},
      {"x²³", "x^{23}", "a run of superscripts"},
      {"x⁻¹", "x^{-1}", "superscript minus"},
      {"a₁", "a_{1}", "subscript"},
      {"½", "\\frac{1}{2}", "vulgar fraction"},
      {"3½", "3\\frac{1}{2}", "mixed number"},
      {"2π", "2\\pi", "pi"},
      {"√2", "\\sqrt2", "square root sign"},
      {"∞", "\\infty", "infinity"},
      {"x ≤ 1", "x<=1", "less or equal"},
      {"x ≠ 1", "x\\ne 1", "not equal"},
      {"±1", "\\pm 1", "plus-minus"},
      {"45°", "45", "degree sign"},
      {"１２", "12", "full-width digits (NFKC)"},
      {"5\u00a0000", "5000", "no-break space as thousands separator (NFKC)"},
      {"θ", "\\theta", "Greek letter"},
      {"a\xe2\x80\x8b" "b", "ab", "zero-width space"},
  });
  // Invalid UTF-8 bytes are dropped, never passed on.
  EXPECT_EQ(normalize_answer("5\xff\xfe"), "5");
  EXPECT_EQ(normalize_answer(std::string("5\0" "6", 3)), "56");
  // Other control characters are invisible too (stray bytes before an answer).
  EXPECT_EQ(normalize_answer(std::string("\0\x01\x1b 5\x7f", 6)), "5");
}

TEST(Normalize, Stages) {
  EXPECT_EQ(strip_latex("\\left( \\frac{1}{2} \\right)"), "(\\frac{1}{2})");
  EXPECT_EQ(strip_trailing_units("5 meters"), "5");
  EXPECT_EQ(strip_trailing_units("5 apples and 3 cookies"), "5 apples and 3");
  EXPECT_EQ(strip_trailing_units("meters"), "meters");
}

TEST(Normalize, MalformedInputIsSafe) {
  // Unbalanced groups, dangling backslashes, deep nesting.
  EXPECT_EQ(normalize_answer("\\text{abc"), "abc");
  EXPECT_EQ(normalize_answer("\\"), "");
  EXPECT_EQ(normalize_answer("\\frac{"), "\\frac{");
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += "\\text{";
  deep += "5";
  EXPECT_FALSE(normalize_answer(deep).empty());
  EXPECT_EQ(normalize_answer(""), "");
}

}  // namespace
}  // namespace dapo::reward
