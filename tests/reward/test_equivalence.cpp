// Answer equivalence: a table of (prediction, reference, verdict, why) per
// feature of equivalence.h, including the known failures of public verifiers
// (verl's string match: 0.5 vs \frac{1}{2}; Math-Verify: 1/2004! vs 1/2006!)
// and the guards against reward hacking.
#include "dapo/reward/equivalence.h"

#include <gtest/gtest.h>

#include <vector>

namespace dapo::reward {
namespace {

struct Case {
  const char* pred;
  const char* truth;
  bool equal;
  const char* why;
};

void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(answers_equivalent(c.pred, c.truth), c.equal)
        << "pred '" << c.pred << "' vs truth '" << c.truth << "': expected " << (c.equal ? "equal" : "different")
        << " because " << c.why;
    // Equivalence is symmetric for every case of the table.
    EXPECT_EQ(answers_equivalent(c.truth, c.pred), c.equal) << "swapped: '" << c.truth << "' vs '" << c.pred << "'";
  }
}

TEST(Equivalence, Integers) {
  check({
      {"42", "42", true, "identical text"},
      {"042", "42", true, "leading zeros do not change an integer"},
      {"-7", "-7", true, "identical negative"},
      {"42", "43", false, "different integers"},
      {"-7", "7", false, "sign matters"},
      {"1,000,000", "1000000", true, "thousands separators"},
      {"1{,}000", "1000", true, "LaTeX thousands separator {,}"},
      {"1\\,000", "1000", true, "thin space as thousands separator"},
      {"1\\ 000", "1000", true, "backslash-space as thousands separator"},
      {"123456789012345678901234567890", "123456789012345678901234567890", true, "long integers, exactly"},
      {"123456789012345678901234567891", "123456789012345678901234567890", false,
       "differ in the last of 30 digits: a double would call them equal"},
      {"2^{100}", "1267650600228229401496703205376", true, "exact big power"},
      {"2^{100}+1", "1267650600228229401496703205376", false, "off by one at 31 digits"},
      {"+5", "5", true, "unary plus"},
      {"5.0", "5", true, "a zero fraction is the same integer"},
      {"5.00", "5", true, "trailing zeros"},
      {"-0", "0", true, "negative zero is zero"},
      {"100", "10^2", true, "a power evaluates exactly"},
      {"1e3", "1000", true, "scientific notation"},
      {"1.5\\times10^{3}", "1500", true, "LaTeX scientific notation is exact"},
      {"1.5e3", "1500", true, "e-notation with a fraction"},
      {"2.5E-3", "0.0025", true, "capital E, negative exponent"},
      {"3", "3.0000000001", false, "decimals are exact: 1e-10 apart is different"},
      {"\\frac{5}{1}", "5", true, "a fraction over one"},
      {"5\\cdot 10^{0}", "5", true, "times ten to the zero"},
      {"10^{-100}", "0", false, "a tiny number is not zero"},
      {"10^{-100}", "10^{-101}", false, "tiny numbers keep their relative difference"},
  });
}

TEST(Equivalence, FractionsAndDecimals) {
  check({
      {"0.5", "\\frac{1}{2}", true, "verl's string match gets this wrong"},
      {"\\dfrac{1}{2}", "0.5", true, "\\dfrac is \\frac"},
      {"\\tfrac12", "1/2", true, "\\tfrac with single-character arguments"},
      {"\\cfrac{1}{2}", "\\frac{2}{4}", true, "\\cfrac, and fractions reduce"},
      {"\\frac12", "\\frac{1}{2}", true, "\\frac12 reads its arguments as characters"},
      {"1/2", "2/4", true, "slash fractions reduce"},
      {"\\frac{6}{8}", "\\frac{3}{4}", true, "reduced form"},
      {"\\frac{1}{3}", "0.333", false, "a rounded decimal is not 1/3"},
      {"\\frac{1}{3}", "0.3333333333", false, "10 significant digits are still exact, and not 1/3"},
      {"\\frac{1}{3}", "0.333333333333333", true, "15 significant digits: full double precision"},
      {"\\frac{1}{3}", "0.3333333333333333", true, "16 significant digits"},
      {"\\frac{2}{3}", "0.6666666666666667", true, "a double's printout of 2/3"},
      {"\\frac{2}{3}", "0.67", false, "rounded to two places"},
      {"1", "0.999999999999999", true, "15 nines: the double-precision rendering of 1"},
      {"1", "1.0000000000001", false, "14 significant digits are exact and differ"},
      {"0.\\overline{3}", "\\frac13", true, "a repeating decimal is exact"},
      {"0.1\\overline{6}", "1/6", true, "a repeating tail after a fixed digit"},
      {"1.0001", "1", false, "the relative tolerance is tight"},
      {"1e-9", "1e-10", false, "tiny values are compared relatively"},
      {"0.1+0.2", "0.3", true, "decimals add exactly"},
      {"-\\frac{3}{4}", "\\frac{-3}{4}", true, "where the sign sits does not matter"},
      {"\\frac{-3}{-4}", "0.75", true, "two negatives"},
      {"3\\frac{1}{2}", "\\frac{7}{2}", true, "a mixed number is 3 + 1/2"},
      {"-3\\frac{1}{2}", "-3.5", true, "a negative mixed number"},
      {"2\\frac{x}{3}", "\\frac{2x}{3}", true, "not a mixed number: a product"},
      {"\\frac{1}{2004!}", "\\frac{1}{2006!}", false, "Math-Verify's false positive: both underflow a double"},
      {"\\frac{1}{2004!}", "0", false, "beyond the exact range is never a number"},
      {"\\frac{1}{20!}", "\\frac{1}{2432902008176640000}", true, "20! exactly"},
      {"\\frac{1}{21!}", "\\frac{1}{22!}", false, "tiny exact rationals differ"},
      {"12.50", "12.5", true, "trailing zero of a decimal"},
      {".5", "0.5", true, "a decimal without its leading zero"},
      {"\\frac{1}{2}\\%", "0.5", true, "the percent sign is dropped"},
      {"50\\%", "50", true, "percent dropped, as verl does"},
      {"50\\%", "0.5", false, "a percentage is not rescaled"},
  });
}

TEST(Equivalence, Radicals) {
  check({
      {"2\\sqrt{2}", "\\sqrt{8}", true, "surds in canonical form"},
      {"\\sqrt{12}", "2\\sqrt3", true, "square factor taken out"},
      {"\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", true, "a surd over an integer"},
      {"\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", true, "rationalised denominator"},
      {"\\frac{1}{1+\\sqrt{2}}", "\\sqrt{2}-1", true, "rationalised by the conjugate"},
      {"\\sqrt{2}+\\sqrt{3}", "\\sqrt{3}+\\sqrt{2}", true, "sum of surds commutes"},
      {"\\sqrt{2}", "1.41421356237", false, "12 significant digits are not sqrt 2"},
      {"\\sqrt{2}", "1.4142135623730951", true, "sqrt 2 to double precision"},
      {"\\sqrt[3]{8}", "2", true, "an exact cube root"},
      {"\\sqrt[3]{16}", "2\\sqrt[3]{2}", true, "cube roots by floating point"},
      {"(\\sqrt{2})^2", "2", true, "squaring a surd"},
      {"\\sqrt{8}^3", "16\\sqrt2", true, "a surd to a power"},
      {"\\sqrt{2}\\sqrt{3}", "\\sqrt{6}", true, "product of surds"},
      {"\\sqrt{\\frac{1}{2}}", "\\frac{\\sqrt2}{2}", true, "root of a fraction"},
      {"2^{1/2}", "\\sqrt2", true, "a half power is a square root"},
      {"8^{2/3}", "4", true, "a rational power taken exactly"},
      {"4^{-1/2}", "\\frac12", true, "a negative rational power"},
      {"(-8)^{1/3}", "-2", true, "odd root of a negative number"},
      {"\\sqrt{3}", "1.7320508", false, "a rounded decimal"},
      {"3\\sqrt{2}", "2\\sqrt{3}", false, "different surds"},
      {"\\sqrt{2}+1", "\\sqrt{3}", false, "close-ish, different"},
      {"√2", "\\sqrt{2}", true, "Unicode square root sign"},
      {"(\\sqrt{2})^{200}", "2^{100}", true, "an even power of a surd is an exact integer"},
      {"(\\sqrt{2})^{200}", "2^{100}+1", false, "exact, so an off-by-one shows"},
      {"(1+\\sqrt2)^{100}", "(1+\\sqrt2)^{100}+1", false, "powers of surd sums stay exact, not rounded"},
      {"(\\sqrt2)^{-3}", "\\frac{\\sqrt2}{4}", true, "a negative power of a surd"},
  });
}

TEST(Equivalence, ConstantsAndFunctions) {
  check({
      {"\\pi", "3.14159", false, "a rounding of pi"},
      {"\\pi", "3.141592653589793", true, "pi to double precision"},
      {"2\\pi", "\\pi\\cdot2", true, "commuted product"},
      {"\\frac{\\pi}{4}", "\\frac14\\pi", true, "pi over four"},
      {"π", "\\pi", true, "Unicode pi"},
      {"e^{-20}", "0", false, "a small number is not zero"},
      {"e^{2}", "e\\cdot e", true, "powers of e"},
      {"e", "2.718281828459045", true, "e to double precision"},
      {"\\ln(e^3)", "3", true, "logarithm of a power of e"},
      {"\\log_2 8", "3", true, "an exact logarithm"},
      {"\\log_{2}(8)", "\\log_2 8", true, "braced base, parenthesised argument"},
      {"\\log 1000", "3", true, "\\log is base 10"},
      {"\\ln 2", "0.693", false, "a rounding of ln 2"},
      {"\\sin(\\pi/6)", "\\frac12", true, "sine of a special angle, by floating point"},
      {"\\cos 0", "1", true, "cosine of zero is exactly one"},
      {"\\arctan 1", "\\frac{\\pi}{4}", true, "inverse tangent"},
      {"\\tan^{-1} 1", "\\arctan 1", true, "^{-1} on a function is its inverse"},
      {"\\pi^2", "9.8696", false, "a rounding of pi squared"},
      {"|{-3}|", "3", true, "absolute value"},
      {"\\left|-\\frac{1}{2}\\right|", "0.5", true, "absolute value with \\left|"},
  });
}

TEST(Equivalence, ExpressionsInVariables) {
  check({
      {"x^2+2x+1", "(x+1)^2", true, "expanded square"},
      {"(x+1)^2", "x^2+1", false, "missing cross term"},
      {"\\frac{x^2-1}{x-1}", "x+1", true, "equal wherever both are defined"},
      {"2x", "x+x", true, "like terms"},
      {"2xy", "2yx", true, "a product commutes"},
      {"a+b", "b+a", true, "a sum commutes"},
      {"a-b", "b-a", false, "a difference does not"},
      {"x^2", "x^3", false, "different powers"},
      {"\\frac{1}{x}", "x^{-1}", true, "reciprocal"},
      {"\\sqrt{x^2}", "|x|", true, "the root of a square is the absolute value"},
      {"\\sqrt{x^2}", "x", false, "not for negative x (checked at negative points)"},
      {"|x|", "x", false, "negative points tell these apart"},
      {"x+1", "x+2", false, "different constants"},
      {"2^n", "2^n", true, "identical"},
      {"2^{n+1}", "2\\cdot2^n", true, "power rule at non-integer points"},
      {"\\frac{n(n+1)}{2}", "\\frac{n^2+n}{2}", true, "triangular numbers"},
      {"x_1+x_2", "x_2+x_1", true, "subscripted variables"},
      {"a_{10}", "a_10", true, "braces of a subscript do not matter"},
      {"a_1", "a_2", false, "different subscripts are different variables"},
      {"\\alpha+\\beta", "\\beta+\\alpha", true, "Greek letters as variables"},
      {"\\theta", "\\alpha", false, "different Greek letters"},
      {"k", "5", false, "a variable is not a number"},
      {"x", "y", false, "different variables"},
      {"xy", "yx", false, "letters-only answers are words (documented limit)"},
      {"2x+3y", "3y+2x", true, "sum of terms commutes"},
      {"x^{10}", "x^10", true, "an unbraced multi-digit exponent is taken whole"},
      {"\\frac{1}{2x}", "\\frac{1}{2}x", false, "1/(2x) is not x/2"},
      {"1/2x", "\\frac{x}{2}", true, "1/2x reads as (1/2) x"},
      {"\\frac{a}{b}+\\frac{c}{d}", "\\frac{ad+bc}{bd}", true, "common denominator"},
      {"\\pi r^2", "r^2\\pi", true, "area formula"},
      {"\\sin^2 x+\\cos^2 x", "1", true, "Pythagorean identity at the sample points"},
      {"\\sin 2x", "2\\sin x\\cos x", true, "\\sin 2x is sin(2x)"},
      {"5+0\\cdot x", "5", true, "the variable cancels"},
      {"\\sqrt{x}\\sqrt{y}", "\\sqrt{xy}", true, "agree where both are defined"},
      {"x/0", "x/0", false, "undefined everywhere"},
  });
}

TEST(Equivalence, TuplesIntervalsSets) {
  check({
      {"(1,2)", "(1, 2)", true, "spaces do not matter"},
      {"(1,2)", "(2,1)", false, "tuples are ordered"},
      {"(1,2]", "(1,2)", false, "bracket kinds of intervals matter"},
      {"[1,2)", "[1,2)", true, "identical half-open interval"},
      {"[0.5, 1]", "[\\frac12, 1]", true, "endpoints compare by value"},
      {"(-\\infty, 3)", "(-\\infty,3)", true, "infinite endpoint"},
      {"(-\\infty, 3]", "(-\\infty, 3)", false, "closed vs open end"},
      {"(3,\\infty)", "(3,-\\infty)", false, "the sign of infinity matters"},
      {"(3, \\infty)", "(3, +\\infty)", true, "+infinity is infinity"},
      {"\\{1,2,3\\}", "\\{3,2,1\\}", true, "sets are unordered"},
      {"\\{1,2\\}", "\\{1,2,3\\}", false, "a missing element"},
      {"\\{1,1,2\\}", "\\{1,2\\}", true, "sets ignore repetition"},
      {"\\emptyset", "\\{\\}", true, "two ways to write the empty set"},
      {"\\varnothing", "\\emptyset", true, "\\varnothing"},
      {"\\emptyset", "\\{0\\}", false, "the set of zero is not empty"},
      {"(1,2)\\cup(3,4)", "(3,4)\\cup(1,2)", true, "a union is unordered"},
      {"(1,2)\\cup(3,4)", "(1,2)\\cup[3,4]", false, "brackets inside a union"},
      {"(1, \\frac{1}{2})", "(1, 0.5)", true, "elements compare by value"},
      {"(1,2,3)", "(1,2)", false, "different lengths"},
      {"[1,2]", "\\{1,2\\}", false, "an interval is not a set"},
      {"(2,3)", "2,3", false, "a tuple is not a list of answers"},
      {"\\left( 1, 2 \\right)", "(1,2)", true, "\\left( \\right)"},
      {"\\left[ -1, 1 \\right]", "[-1,1]", true, "\\left[ \\right]"},
      {"x \\in [0, 1]", "[0,1]", true, "membership names the interval"},
      {"(\\sqrt{2}, \\pi)", "(\\sqrt2,\\pi)", true, "irrational elements"},
      {"\\left\\{ 1, 2 \\right\\}", "\\{2, 1\\}", true, "\\left\\{ set"},
      {"\\lbrace 1 \\rbrace", "\\{1\\}", true, "\\lbrace"},
      {"1, 2, 3", "\\{3, 2, 1\\}", true, "a list of answers is the set of them"},
      {"1, 2", "\\{1, 2, 3\\}", false, "but all of them"},
  });
}

TEST(Equivalence, SeveralAnswers) {
  check({
      {"2, 3", "3, 2", true, "a list of solutions is unordered"},
      {"2 or 3", "2", false, "hedging between candidates is not an answer"},
      {"2, 3", "2", false, "two candidates do not match one answer"},
      {"2 and 3", "2,3", true, "'and' lists like a comma"},
      {"x=2, x=3", "2,3", true, "each solution as an equation"},
      {"x = 1 \\text{ or } x = 2", "1, 2", true, "or in text"},
      {"2\\pm\\sqrt{3}", "2+\\sqrt3, 2-\\sqrt3", true, "plus-minus is two answers"},
      {"2\\pm\\sqrt{3}", "2+\\sqrt3", false, "one of the two is not enough"},
      {"\\pm 2", "2, -2", true, "unary plus-minus"},
      {"\\pm2", "2", false, "plus-minus is two answers"},
      {"1, 1", "1", false, "a repeated candidate is still a list"},
      {"1, 2, 3", "1,2", false, "an extra candidate"},
      {"2; 3", "2, 3", true, "semicolon separates like a comma"},
      {"5, 6, 7, 8", "5", false, "naming many numbers"},
  });
}

TEST(Equivalence, Relations) {
  check({
      {"x=5", "5", true, "the right side of x = 5"},
      {"5 = x", "5", true, "the side that is not the variable"},
      {"y = 2x+1", "2x+1", true, "a function's right side"},
      {"x > 5", "5 < x", true, "a relation read backwards"},
      {"x \\ge 5", "x>5", false, "strict and non-strict differ"},
      {"x \\geq 5", "x >= 5", true, "\\geq is >="},
      {"1 < x < 3", "3 > x > 1", true, "a chain read backwards"},
      {"x^2+y^2=1", "y^2+x^2=1", true, "sides compare as expressions"},
      {"x^2+y^2=1", "1=x^2+y^2", true, "an equation is symmetric"},
      {"x \\ne 3", "x \\neq 3", true, "\\ne and \\neq"},
      {"x<5", "x>5", false, "opposite relations"},
      {"x \\le 2", "x ≤ 2", true, "Unicode less-or-equal"},
      {"m+n = 204", "204", true, "a compound name on the left: judged by the right side"},
      {"m+n = 205", "204", false, "the right side still has to be right"},
      {"\\boxed{p+q=\\frac{7}{2}}", "3.5", true, "a boxed equation restating the asked-for sum"},
      {"a_5 = 17", "17", true, "a subscripted name"},
      {"AB = 12", "12", true, "a product of names (a segment)"},
      {"m+n = 204", "m + n = 204", true, "the same equation"},
      {"2x = 6", "6", false, "a number on the left: an equation for x, not 6"},
      {"x^2 = 4", "4", false, "a power on the left is not a name"},
      {"m+n = 2k", "2k", false, "variables on both sides stay an equation"},
  });
}

TEST(Equivalence, TextAnswers) {
  check({
      {"\\text{Monday}", "Monday", true, "\\text is unwrapped"},
      {"Monday", "monday", true, "words ignore case"},
      {"\\text{yes}", "Yes", true, "yes"},
      {"yes", "no", false, "different words"},
      {"(A)", "A", true, "a choice letter in parentheses"},
      {"\\text{(B)}", "B", true, "a choice letter in text"},
      {"A", "B", false, "different choices"},
      {"\\textbf{C}", "C", true, "bold choice"},
      {"no solution", "No Solution", true, "several words"},
      {"odd", "even", false, "different words"},
      {"\\text{the answer is 5 or 6}", "5", false, "a sentence with two numbers"},
      {"any real number", "5", false, "a phrase is not a number"},
  });
}

TEST(Equivalence, LatexAndUnicodeNormalisation) {
  check({
      {"\\$5", "5", true, "dollar sign"},
      {"5\\text{ cm}", "5", true, "unit in text"},
      {"5 \\mathrm{cm}^2", "5", true, "unit with a power"},
      {"12 \\text{ meters}", "12", true, "unit word"},
      {"10 \\text{ dollars}", "10", true, "currency word"},
      {"\\frac{1}{2}\\text{ units}^2", "\\frac12", true, "unit after a fraction"},
      {"5\\text{ m}", "5", true, "single-letter unit in text after a number"},
      {"5m", "5", false, "a bare letter is a variable, not a unit"},
      {"30^\\circ", "30", true, "degrees"},
      {"30^{\\circ}", "30", true, "braced degrees"},
      {"30°", "30", true, "Unicode degree sign"},
      {"100^\\circ C", "100", true, "degrees Celsius"},
      {"45\\%", "45", true, "percent"},
      {"\\left(\\frac{1}{2}\\right)", "\\frac12", true, "\\left( \\right) around a number"},
      {"\\displaystyle \\frac{1}{2}", "0.5", true, "\\displaystyle"},
      {"\\!\\frac{1}{2}\\,", "1/2", true, "spacing commands"},
      {"\\boxed{5}", "5", true, "a boxed reference"},
      {"$\\frac{1}{2}$", "1/2", true, "math delimiters"},
      {"\\(x+1\\)", "x+1", true, "inline math delimiters"},
      {"\\[x+1\\]", "1+x", true, "display math delimiters"},
      {"5.", "5", true, "trailing period"},
      {"5;", "5", true, "trailing semicolon"},
      {"\\mathbf{7}", "7", true, "bold number"},
      {"x²+1", "x^2+1", true, "Unicode superscript"},
      {"x⁻¹", "\\frac{1}{x}", true, "Unicode superscript minus"},
      {"½", "0.5", true, "vulgar fraction"},
      {"3·4", "12", true, "middle dot"},
      {"６", "6", true, "full-width digit (NFKC)"},
      {"2×3", "6", true, "multiplication sign"},
      {"6÷4", "1.5", true, "division sign"},
      {"−5", "-5", true, "U+2212 minus"},
      {"∞", "\\infty", true, "Unicode infinity"},
      {"3{,}5", "3.5", true, "decimal comma"},
      {"\\operatorname{lcm}", "\\operatorname{lcm}", true, "unknown text compares as text"},
      {"\\overline{AB}", "\\overline{AB}", true, "an unparsed answer equals its own text"},
      {"\\overline{AB}", "\\overline{BA}", false, "and nothing else"},
  });
}

TEST(Equivalence, GuardsAndHacks) {
  check({
      {"1/0", "1/0", false, "division by zero is never equal, not even to itself"},
      {"0/0", "0", false, "0/0 is undefined"},
      {"0/0", "0/0", false, "0/0 is undefined"},
      {"\\frac{1}{0}", "\\infty", false, "1/0 is undefined, not infinity"},
      {"\\infty", "5", false, "infinity is no number"},
      {"\\infty", "\\infty", true, "the symbol itself"},
      {"9^{9^{9^9}}", "9^{9^{9^9}}", true, "identical expression; its value is never computed"},
      {"9^{9^{9^9}}", "\\infty", false, "an overflowing power is not infinity"},
      {"9^{9^{9^9}}", "9^{9^{9^{10}}}", false, "overflowing powers are not compared by value"},
      {"9^{9^{9^9}}", "1", false, "nor to anything small"},
      {"10^{10^{10}}", "10^{10^{10}}+1", false, "too big to compute, different trees"},
      {"2^{4000}", "2^{4000}+1", false, "exact at 1205 digits"},
      {"2^{4000}", "4^{2000}", true, "exact at 1205 digits"},
      {"2^{10000}", "2^{10000}", true, "beyond the exact range identical trees still match"},
      {"2^{10000}", "4^{5000}", false, "beyond the exact range (kMaxBits) nothing is computed or guessed"},
      {"e^{100000}", "e^{100000}", false, "floating-point overflow is undefined"},
      {"\\sqrt{-4}", "2i", false, "no complex numbers: sqrt(-4) is undefined"},
      {"\\log 0", "-\\infty", false, "log 0 is undefined"},
      {"0^0", "1", false, "0^0 is undefined"},
      {"0^{-1}", "\\infty", false, "0^-1 is undefined"},
      {"(-4)^{1/2}", "2", false, "even root of a negative number"},
      {"\\arcsin 2", "\\arcsin 2", false, "outside the domain"},
      {"1e400", "10^{400}", true, "big but exact"},
      {"5!", "120", true, "factorial"},
      {"(3!)!", "720", true, "nested factorial"},
      {"\\frac{10!}{8!}", "90", true, "ratio of factorials"},
      {"\\binom{5}{2}", "10", true, "binomial coefficient"},
      {"\\dbinom{10}{3}", "120", true, "\\dbinom"},
      {"100!", "99!\\cdot100", true, "158-digit factorials, exactly"},
      {"(-3)!", "(-3)!", false, "factorial of a negative number is undefined"},
      {"2.5!", "2.5!", false, "no gamma function: undefined"},
      {"x", "5", false, "a bare variable matches no number"},
      {"", "5", false, "nothing is never right"},
      {"5", "", false, "an empty reference matches nothing"},
      {"\\text{}", "\\text{}", false, "empty after normalisation"},
      {"\\frac{1}{2", "\\frac{1}{2", true, "malformed LaTeX equals only its own text"},
      {"\\frac{1}{2", "0.5", false, "malformed LaTeX is not evaluated"},
      {"((((1))))", "1", true, "nested parentheses"},
  });
}

}  // namespace
}  // namespace dapo::reward
