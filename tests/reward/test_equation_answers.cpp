// Answers written as an equation that restates the asked-for quantity on one
// side ("f(3) = 7", "a+b = 7", "P(A) = 1/2"): judged by the other side when
// that side is a value, and never a way to pass with a wrong or ambiguous
// answer ("7 = 7", "3 = 7", "x = 5 or x = 7", "f(3)^2 = 49").
#include "dapo/reward/verifier.h"
#include "reward/equivalence_cases.h"

namespace dapo::reward {
namespace {

using test::check;

TEST(EquationAnswers, FunctionValues) {
  check({
      {"f(3) = 7", "7", true, "the value of f at 3"},
      {"f(3)=7", "7", true, "without spaces"},
      {"f(3) = 7", "8", false, "the value still has to be right"},
      {"g(-1) = \\frac{1}{2}", "0.5", true, "any argument, any form of the value"},
      {"f(1/2) = 3", "3", true, "a fraction as argument"},
      {"f(2, 3) = 5", "5", true, "several arguments"},
      {"f(f(2)) = 5", "5", true, "a nested value"},
      {"f(x) = 7", "7", true, "a constant function"},
      {"a_1(2) = 4", "4", true, "a subscripted function name"},
      {"P(A) = \\frac{1}{2}", "1/2", true, "a probability"},
      {"P(X=2) = 0.3", "0.3", true, "a probability of an event written as an equation"},
      {"7 = f(3)", "7", true, "the value on the left"},
      {"7 = f(3)", "8", false, "the value on the left, wrong"},
      {"f(1)+f(2) = 10", "10", true, "a sum of values"},
      {"f(3) = 7", "f(3) = 7", true, "the same equation"},
      {"f(3) = 7", "f(3) = 8", false, "the same quantity, another value"},
  });
}

TEST(EquationAnswers, SumsAndOtherNames) {
  check({
      {"a+b = 7", "7", true, "a sum of variables"},
      {"x+y+z = 12", "12", true, "three variables"},
      {"m+n = 25", "25", true, "the competition's m+n"},
      {"m-n = 3", "3", true, "a difference"},
      {"a/b = \\frac{3}{4}", "0.75", true, "a ratio"},
      {"|z| = 5", "5", true, "a modulus"},
      {"\\sin x = \\frac{1}{2}", "1/2", true, "a known function of a variable"},
      {"\\log_2 x = 3", "3", true, "a logarithm of a variable"},
      {"x+y+z = 12", "13", false, "a wrong sum"},
  });
}

TEST(EquationAnswers, NoFalsePositives) {
  check({
      {"7 = 7", "7", false, "a number on the left names nothing"},
      {"3 = 7", "7", false, "a false equation of numbers"},
      {"3 = 7", "3", false, "either side"},
      {"3 = x", "5", false, "the value is 3"},
      {"x = 5 or x = 7", "5", false, "two candidates are not one answer"},
      {"f(3) = 7 or f(3) = 8", "7", false, "two candidates for a function value"},
      {"f(3) = 7, f(3) = 8", "7", false, "two candidates as a list"},
      {"f(3) = 7 = 8", "7", false, "a chain is no restatement"},
      {"2(3) = 6", "6", false, "a number times a number is no function value"},
      {"f \\cdot 3 = 7", "7", false, "an explicit product with a number"},
      {"f*(3) = 7", "7", false, "an explicit product is no function value"},
      {"3f = 7", "7", false, "a multiple: an equation for f"},
      {"f(3)^2 = 49", "49", false, "a power of the value is not the value"},
      {"f(3)! = 6", "6", false, "a factorial of the value is not the value"},
      {"2x = 6", "6", false, "an equation for x"},
      {"a+2b = 7", "7", false, "a number on the named side"},
      {"x^2 = 4", "4", false, "a power on the left"},
      {"\\sin(\\pi/2) = 1", "1", false, "a constant on the left names nothing"},
      {"f(x) = 2x+1", "2x+1", false, "the right side is no value: still an equation, as before"},
      {"f(3) = 2x", "2x", false, "the right side is no value"},
      {"f(3) = x", "7", false, "the variable side is the other one"},
      {"a+b = c", "7", false, "names on both sides"},
  });
}

TEST(EquationAnswers, EndToEnd) {
  Verdict v = verify_math("So $f(3) = 7$.\nAnswer: $f(3) = 7$", "7");
  EXPECT_EQ(v.score, 1.0);
  EXPECT_EQ(v.pred, "$f(3) = 7$");
  EXPECT_EQ(verify_math("Thus \\boxed{a+b = 7}.", "7").score, 1.0);
  EXPECT_EQ(verify_math("Thus \\boxed{7 = 7}.", "7").score, -1.0);
  EXPECT_EQ(verify_math("Answer: x = 5 or x = 7", "5").score, -1.0);
}

}  // namespace
}  // namespace dapo::reward
