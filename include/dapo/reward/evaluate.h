// Evaluation of an answer's expression tree to a number: exact (a rational or
// a surd sum) wherever the operations allow, floating point (long double)
// for transcendental parts (pi, e, logarithms, trigonometry, irrational
// powers), and two outcomes that never equal anything:
//  - undefined: 0/0, x/0, 0^0, 0^-1, sqrt(-1), log(0), a floating-point
//    result that overflows (e^100000) or is NaN;
//  - unknown: exact results larger than kMaxBits, about 1233 digits
//    (9^9^9^9, 1/2004!, 1000!),
//    literals longer than kMaxLiteralDigits, variables without a value,
//    words, a spent work budget.
// Exact results are never silently approximated: 10^5000 + 1 must not be
// "close to" 10^5000.
//
// Bounds: every BigInt operation is charged against a work budget (about
// one unit per limb product); sizes are estimated before powers and
// factorials are computed, so 9^9^9^9 costs nothing. One evaluation stays
// far below a millisecond.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dapo/reward/exact.h"
#include "dapo/reward/expr.h"

namespace dapo::reward {

enum class ValueKind : uint8_t { exact, approx, infinity, undefined, unknown };

struct Value {
  ValueKind kind = ValueKind::unknown;
  Surd exact;             // kind == exact
  long double approx = 0; // kind == approx: finite
  int sign = 0;           // kind == infinity: +1 or -1

  static Value of(Surd s);
  static Value of(Rational r) { return of(Surd(std::move(r))); }
  static Value of(long double x);  // non-finite -> undefined
  static Value infinite(int sign);
  static Value undefined();
  static Value unknown();
  bool is_number() const { return kind == ValueKind::exact || kind == ValueKind::approx; }
  long double to_long_double() const;  // is_number()
};

inline constexpr size_t kMaxBits = 4096;            // per exact number (numerator + denominator)
inline constexpr int64_t kWorkBudget = 1'000'000;   // limb products per evaluation
inline constexpr long double kRelTolerance = 1e-12L;

// Equal as numbers: exact values exactly; when either is floating point,
// |a - b| <= kRelTolerance * max(|a|, |b|) (so 1.0001 != 1, 1e-9 != 1e-10,
// e^-20 != 0); infinities of the same sign. Undefined and unknown never.
bool values_equal(const Value& a, const Value& b);

class Evaluator {
 public:
  explicit Evaluator(const Ast& ast, int64_t budget = kWorkBudget) : ast_(ast), work_(budget) {}

  // Gives a variable (its name as variable_name() prints it) a value.
  void bind(std::string name, Value value);
  // The signs of the \pm nodes: bit k of mask picks "-" for pm_nodes[k].
  void choose_signs(std::vector<int32_t> pm_nodes, uint32_t mask);

  Value eval(int32_t node);

 private:
  bool charge(size_t bits_a, size_t bits_b);
  Value literal(const Node& n);
  Value add(Value a, Value b, bool subtract);
  Value multiply(const Value& a, const Value& b);
  Value divide(const Value& a, const Value& b);
  Value power(const Value& base, const Value& exponent);
  Value root(const Value& x, const Value& index);
  Value function(Func f, const Value& x, const Value* base);
  Value factorial(const Value& x);
  Value binomial(const Value& n, const Value& k);
  Value exact_or_unknown(Surd s);  // unknown when over kMaxBits

  const Ast& ast_;
  int64_t work_;
  std::vector<std::pair<std::string, Value>> vars_;
  std::vector<int32_t> pm_nodes_;
  uint32_t pm_mask_ = 0;
  int depth_ = 0;
};

}  // namespace dapo::reward
