// Evaluation outcomes: exact, floating point, infinity, undefined, unknown,
// and the tolerance rule of values_equal.
#include "dapo/reward/evaluate.h"

#include <gtest/gtest.h>

#include <ctime>
#include <string>

namespace dapo::reward {
namespace {

Value eval(const std::string& text) {
  Ast ast;
  EXPECT_TRUE(parse_answer(text, &ast)) << text;
  if (ast.root < 0) return Value::unknown();
  Evaluator ev(ast);
  return ev.eval(ast.root);
}

ValueKind kind(const std::string& text) { return eval(text).kind; }

TEST(Evaluate, Kinds) {
  EXPECT_EQ(kind("2^{100}"), ValueKind::exact);
  EXPECT_EQ(kind("\\sqrt{8}-2\\sqrt{2}"), ValueKind::exact);
  EXPECT_TRUE(eval("\\sqrt{8}-2\\sqrt{2}").exact.is_zero());  // exactly zero, not 1e-19
  EXPECT_EQ(kind("\\pi"), ValueKind::approx);
  EXPECT_EQ(kind("\\sqrt[3]{2}"), ValueKind::approx);
  EXPECT_EQ(kind("\\infty"), ValueKind::infinity);
  EXPECT_EQ(eval("-\\infty").sign, -1);
  for (const char* undefined : {"1/0", "0/0", "0^0", "0^{-2}", "\\sqrt{-1}", "\\ln 0", "\\log_1 5", "\\arccos 2",
                                "e^{100000}", "(-2)^{1/2}", "(-1)!", "\\frac{1}{2}!", "\\frac{1}{\\pi-\\pi}"})
    EXPECT_EQ(kind(undefined), ValueKind::undefined) << undefined;
  for (const char* unknown : {"9^{9^{9^9}}", "2^{20000}", "2004!", "x+1", "word", "\\infty+1", "\\binom{x}{2}",
                              "1e100000"})
    EXPECT_EQ(kind(unknown), ValueKind::unknown) << unknown;
  // Undefined wins over unknown: the answer is broken either way.
  EXPECT_EQ(kind("1/0+2004!"), ValueKind::undefined);
}

TEST(Evaluate, ExactResults) {
  auto rational = [](const std::string& text) {
    const Value v = eval(text);
    EXPECT_EQ(v.kind, ValueKind::exact) << text;
    EXPECT_TRUE(v.exact.is_rational()) << text;
    const Rational r = v.exact.rational_value();
    return r.num.to_decimal() + "/" + r.den.to_decimal();
  };
  EXPECT_EQ(rational("0.125"), "1/8");
  EXPECT_EQ(rational("1.5e-3"), "3/2000");
  EXPECT_EQ(rational("0.\\overline{142857}"), "1/7");
  EXPECT_EQ(rational("2^{-3}"), "1/8");
  EXPECT_EQ(rational("(-2)^3"), "-8/1");
  EXPECT_EQ(rational("(-1)^{1000001}"), "-1/1");
  EXPECT_EQ(rational("1^{10^{100}}"), "1/1");  // no size check needed for 1
  EXPECT_EQ(rational("27^{2/3}"), "9/1");
  EXPECT_EQ(rational("(-27)^{1/3}"), "-3/1");
  EXPECT_EQ(rational("20!/18!"), "380/1");
  EXPECT_EQ(rational("\\binom{52}{5}"), "2598960/1");
  EXPECT_EQ(rational("\\binom{5}{7}"), "0/1");
  EXPECT_EQ(rational("\\log_3 \\frac{1}{9}"), "-2/1");
  EXPECT_EQ(rational("|-\\frac{7}{3}|"), "7/3");
  EXPECT_EQ(rational("(\\sqrt{3}+1)(\\sqrt{3}-1)"), "2/1");
}

TEST(Evaluate, VariablesAndSigns) {
  Ast ast;
  ASSERT_TRUE(parse_answer("x^2+y", &ast));
  Evaluator ev(ast);
  ev.bind("x", Value::of(Rational(3)));
  ev.bind("y", Value::of(Rational(-1)));
  const Value v = ev.eval(ast.root);
  ASSERT_EQ(v.kind, ValueKind::exact);
  EXPECT_EQ(v.exact.rational_value(), Rational(8));

  ASSERT_TRUE(parse_answer("1\\pm2", &ast));
  Evaluator plus(ast), minus(ast);
  plus.choose_signs({ast.root}, 0);
  minus.choose_signs({ast.root}, 1);
  EXPECT_EQ(plus.eval(ast.root).exact.rational_value(), Rational(3));
  EXPECT_EQ(minus.eval(ast.root).exact.rational_value(), Rational(-1));
  Evaluator unset(ast);
  EXPECT_EQ(unset.eval(ast.root).kind, ValueKind::unknown);  // a sign not chosen is no value
}

TEST(Evaluate, Tolerance) {
  EXPECT_TRUE(values_equal(Value::of(1.0L), Value::of(1.0L + 1e-15L)));
  EXPECT_FALSE(values_equal(Value::of(1.0L), Value::of(1.0001L)));
  EXPECT_FALSE(values_equal(Value::of(1e-9L), Value::of(1e-10L)));
  EXPECT_FALSE(values_equal(Value::of(2.06e-9L), Value::of(Rational(0))));  // e^-20 vs 0
  EXPECT_TRUE(values_equal(Value::of(0.0L), Value::of(Rational(0))));
  EXPECT_FALSE(values_equal(Value::of(Rational(1)), Value::of(Rational(2))));
  EXPECT_TRUE(values_equal(Value::infinite(1), Value::infinite(1)));
  EXPECT_FALSE(values_equal(Value::infinite(1), Value::infinite(-1)));
  EXPECT_FALSE(values_equal(Value::undefined(), Value::undefined()));
  EXPECT_FALSE(values_equal(Value::unknown(), Value::unknown()));
  EXPECT_EQ(Value::of(std::numeric_limits<long double>::infinity()).kind, ValueKind::undefined);
}

// Time limits are for optimised builds; sanitizers and -O0 are ~10x slower.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
constexpr double kSlowBuild = 10.0;
#else
constexpr double kSlowBuild = 1.0;
#endif

TEST(Evaluate, BoundedWork) {
  // Each of these would take seconds or gigabytes if computed naively.
  for (const char* text : {"9^{9^{9^9}}", "(10^{1000})^{1000}", "1000000!", "\\binom{1000000000}{500000000}",
                           "2^{2^{2^{2^{2}}}}", "(10^{4000})^{4}", "10^{4000}*10^{4000}*10^{4000}*10^{4000}",
                           "(1+\\sqrt{2}+\\sqrt{3}+\\sqrt{5})^{64}", "\\sqrt{10^{4000}+1}"}) {
    timespec t0{}, t1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    eval(text);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    const double ms = 1e3 * double(t1.tv_sec - t0.tv_sec) + 1e-6 * double(t1.tv_nsec - t0.tv_nsec);
    EXPECT_LT(ms, 2.0 * kSlowBuild) << text;
  }
}

}  // namespace
}  // namespace dapo::reward
