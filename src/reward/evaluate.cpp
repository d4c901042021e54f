// Exact-where-possible evaluation of answer expressions (evaluate.h).
#include "dapo/reward/evaluate.h"

#include <cmath>

namespace dapo::reward {
namespace {

constexpr long double kPi = 3.141592653589793238462643383279502884L;
constexpr long double kE = 2.718281828459045235360287471352662498L;

bool is_zero(const Value& v) { return v.kind == ValueKind::exact && v.exact.is_zero(); }

bool is_rational(const Value& v) { return v.kind == ValueKind::exact && v.exact.is_rational(); }

Rational rational_value(const Value& v) { return v.exact.rational_value(); }

// Undefined wins over unknown: 1/0 + (something too big) is still undefined.
bool propagate(const Value& a, const Value& b, Value* out) {
  if (a.kind == ValueKind::undefined || b.kind == ValueKind::undefined) {
    *out = Value::undefined();
    return true;
  }
  if (a.kind == ValueKind::unknown || b.kind == ValueKind::unknown || a.kind == ValueKind::infinity ||
      b.kind == ValueKind::infinity) {
    *out = Value::unknown();
    return true;
  }
  return false;
}

// variable_name(text) == name, without building the string.
bool same_name(std::string_view text, std::string_view name) {
  size_t j = 0;
  for (char c : text) {
    if (c == '{' || c == '}') continue;
    if (j >= name.size() || name[j] != c) return false;
    ++j;
  }
  return j == name.size();
}

// log2 |x| for x != 0: the size of a power before it is computed.
double log2_abs(const BigInt& x) {
  int64_t e = 0;
  const long double m = x.scaled(&e);
  return double(std::log2(std::fabs(m)) + static_cast<long double>(e));
}

BigInt pow10(int64_t k) { return BigInt::pow(BigInt(10), uint64_t(k)); }

}  // namespace

Value Value::of(Surd s) {
  Value v;
  v.kind = ValueKind::exact;
  v.exact = std::move(s);
  return v;
}
Value Value::of(long double x) {
  if (!std::isfinite(x)) return undefined();
  Value v;
  v.kind = ValueKind::approx;
  v.approx = x;
  return v;
}
Value Value::infinite(int sign) {
  Value v;
  v.kind = ValueKind::infinity;
  v.sign = sign;
  return v;
}
Value Value::undefined() {
  Value v;
  v.kind = ValueKind::undefined;
  return v;
}
Value Value::unknown() { return Value(); }

long double Value::to_long_double() const { return kind == ValueKind::exact ? exact.to_long_double() : approx; }

bool values_equal(const Value& a, const Value& b) {
  if (a.kind == ValueKind::exact && b.kind == ValueKind::exact) return a.exact == b.exact;
  if (a.kind == ValueKind::infinity && b.kind == ValueKind::infinity) return a.sign == b.sign;
  if (!a.is_number() || !b.is_number()) return false;
  const long double x = a.to_long_double(), y = b.to_long_double();
  if (!std::isfinite(x) || !std::isfinite(y)) return false;
  if (x == y) return true;
  return std::fabs(x - y) <= kRelTolerance * std::fmax(std::fabs(x), std::fabs(y));
}

void Evaluator::bind(std::string name, Value value) { vars_.emplace_back(std::move(name), std::move(value)); }

void Evaluator::choose_signs(std::vector<int32_t> pm_nodes, uint32_t mask) {
  pm_nodes_ = std::move(pm_nodes);
  pm_mask_ = mask;
}

bool Evaluator::charge(size_t bits_a, size_t bits_b) {
  work_ -= int64_t((bits_a / 32 + 1) * (bits_b / 32 + 1));
  return work_ > 0;
}

Value Evaluator::exact_or_unknown(Surd s) {
  if (s.bit_length() > kMaxBits + 64 * s.terms().size()) return Value::unknown();
  return Value::of(std::move(s));
}

Value Evaluator::literal(const Node& n) {
  const size_t dot = n.text.find('.');
  const std::string_view whole = n.text.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? std::string_view() : n.text.substr(dot + 1);
  if (whole.size() + frac.size() + n.repeat.size() > kMaxLiteralDigits) return Value::unknown();
  if (std::abs(int64_t(n.exp10)) > int64_t(kMaxBits / 3)) return Value::unknown();
  const size_t digits = whole.size() + frac.size() + n.repeat.size();
  if (digits <= 18 && n.repeat.empty() && n.exp10 == 0 && !n.approx) {
    // The common case, without building BigInts from text: 42, 0.5, 12.25.
    int64_t num = 0, den = 1;
    for (char c : whole) num = num * 10 + (c - '0');
    for (char c : frac) {
      num = num * 10 + (c - '0');
      den *= 10;
    }
    return Value::of(den == 1 ? Rational(num) : Rational::make(BigInt(num), BigInt(den)));
  }
  if (!charge(digits * 4, digits * 4)) return Value::unknown();
  const std::string all = std::string(whole) + std::string(frac);
  Rational value = Rational::make(*BigInt::from_decimal(all.empty() ? "0" : all), pow10(int64_t(frac.size())));
  if (!n.repeat.empty()) {
    // 0.a(b) = a/10^|a| + b / (10^|a| (10^|b| - 1))
    const BigInt rep = *BigInt::from_decimal(n.repeat);
    value = value + Rational::make(rep, pow10(int64_t(frac.size())) * (pow10(int64_t(n.repeat.size())) - BigInt(1)));
  }
  if (n.exp10 > 0) value = value * Rational(pow10(n.exp10));
  if (n.exp10 < 0) value = value / Rational(pow10(-int64_t(n.exp10)));
  if (n.approx) return Value::of(value.to_long_double());
  return exact_or_unknown(Surd(std::move(value)));
}

Value Evaluator::add(Value a, Value b, bool subtract) {
  Value out;
  if (propagate(a, b, &out)) return out;
  if (a.kind == ValueKind::exact && b.kind == ValueKind::exact) {
    if (!charge(a.exact.bit_length(), b.exact.bit_length())) return Value::unknown();
    Surd s = std::move(a.exact);
    s.accumulate(b.exact, subtract);
    if (s.terms().size() > Surd::kMaxTerms) return Value::of(s.to_long_double());
    return exact_or_unknown(std::move(s));
  }
  const long double x = a.to_long_double(), y = b.to_long_double();
  return Value::of(subtract ? x - y : x + y);
}

Value Evaluator::multiply(const Value& a, const Value& b) {
  Value out;
  if (propagate(a, b, &out)) return out;
  if (a.kind == ValueKind::exact && b.kind == ValueKind::exact) {
    // Before reduction the product has the sum of the sizes; reducing it
    // (a gcd) costs about the square of that, charged up front.
    const size_t bits = a.exact.bit_length() * a.exact.terms().size() + b.exact.bit_length() * b.exact.terms().size();
    if (bits > 2 * kMaxBits + 256) return Value::unknown();
    if (!charge(bits, bits)) return Value::unknown();
    if (auto s = Surd::multiply(a.exact, b.exact)) return exact_or_unknown(std::move(*s));
  }
  return Value::of(a.to_long_double() * b.to_long_double());
}

Value Evaluator::divide(const Value& a, const Value& b) {
  Value out;
  if (a.kind == ValueKind::undefined || b.kind == ValueKind::undefined) return Value::undefined();
  if (is_zero(b) || (b.kind == ValueKind::approx && b.approx == 0)) return Value::undefined();
  if (propagate(a, b, &out)) return out;
  if (a.kind == ValueKind::exact && b.kind == ValueKind::exact) {
    if (!charge(b.exact.bit_length(), b.exact.bit_length())) return Value::unknown();
    if (auto inv = b.exact.reciprocal()) return multiply(a, Value::of(std::move(*inv)));
  }
  return Value::of(a.to_long_double() / b.to_long_double());
}

Value Evaluator::power(const Value& base, const Value& exponent) {
  Value out;
  if (propagate(base, exponent, &out)) return out;
  if (is_rational(exponent)) {
    const Rational e = rational_value(exponent);
    if (e.is_integer()) {
      const BigInt& n = e.num;
      if (base.kind == ValueKind::exact) {
        if (base.exact.is_zero()) return n.sign() > 0 ? Value::of(Rational(0)) : Value::undefined();
        if (n.is_zero()) return Value::of(Rational(1));
        if (base.exact.is_rational()) {
          const Rational b = rational_value(base);
          if (b.num.abs().is_one() && b.den.is_one()) return Value::of(Rational(b.sign() < 0 && !n.is_even() ? -1 : 1));
          const auto small = n.to_int64();
          if (!small || (log2_abs(b.num) + log2_abs(b.den)) * double(std::llabs(*small)) > double(kMaxBits))
            return Value::unknown();
          const uint64_t k = uint64_t(std::llabs(*small));
          if (!charge(b.bit_length() * k, b.bit_length() * k)) return Value::unknown();
          Rational r = Rational::make(BigInt::pow(b.num, k), BigInt::pow(b.den, k));
          if (*small < 0) r = r.reciprocal();
          return exact_or_unknown(Surd(std::move(r)));
        }
        // A surd to an integer power by squaring (multiply() enforces the
        // size cap); a step that leaves the surd domain (too many terms)
        // sends the whole power to floating point.
        const auto small = n.to_int64();
        if (!small) return Value::unknown();
        {
          Value acc = Value::of(Rational(1));
          Value b = base;
          bool exact = true;
          for (uint64_t k = uint64_t(std::llabs(*small)); k && exact; k >>= 1) {
            if (k & 1) acc = multiply(acc, b);
            if (k > 1) b = multiply(b, b);
            exact = acc.kind == ValueKind::exact && b.kind == ValueKind::exact;
          }
          if (exact) return *small < 0 ? divide(Value::of(Rational(1)), acc) : acc;
          if (acc.kind == ValueKind::unknown || b.kind == ValueKind::unknown) return Value::unknown();
        }
      }
      return Value::of(std::pow(base.to_long_double(), e.to_long_double()));
    }
    // A fractional exponent p/q: the q-th root of base^p.
    if (is_rational(base)) {
      const Rational b = rational_value(base);
      const auto q = e.den.to_int64();
      const auto p = e.num.to_int64();
      if (b.is_zero()) return e.sign() > 0 ? Value::of(Rational(0)) : Value::undefined();
      if (b.sign() < 0 && e.den.is_even()) return Value::undefined();
      if (!q || !p) return Value::unknown();
      if (*q <= 64) {
        const Value bp = power(base, Value::of(Rational(int64_t(std::llabs(*p)))));
        if (bp.kind == ValueKind::unknown) return bp;  // too big to hold exactly: no rounding either
        if (is_rational(bp)) {
          const Rational x = rational_value(bp);
          const Rational mag = x.sign() < 0 ? -x : x;
          Value r = Value::unknown();
          if (auto exact = exact_root(mag, uint64_t(*q))) {
            r = Value::of(x.sign() < 0 ? -*exact : *exact);
          } else if (*q == 2 && x.sign() >= 0) {
            if (auto s = Surd::sqrt_of(mag)) r = Value::of(std::move(*s));
          }
          if (r.kind == ValueKind::exact) return *p < 0 ? divide(Value::of(Rational(1)), r) : r;
        }
      }
      const long double magnitude = std::pow(std::fabs(b.to_long_double()), e.to_long_double());
      return Value::of(b.sign() < 0 && !e.num.is_even() ? -magnitude : magnitude);
    }
  }
  const long double x = base.to_long_double(), y = exponent.to_long_double();
  if (x < 0) return Value::undefined();  // a real power of a negative number
  if (x == 0) return y > 0 ? Value::of(Rational(0)) : Value::undefined();
  return Value::of(std::pow(x, y));
}

Value Evaluator::root(const Value& x, const Value& index) {
  if (index.kind == ValueKind::undefined) return Value::undefined();
  if (!is_rational(index) || is_zero(index)) {
    if (index.kind == ValueKind::exact || index.kind == ValueKind::approx)
      return power(x, divide(Value::of(Rational(1)), index));
    return Value::unknown();
  }
  const Rational k = rational_value(index);
  if (!k.is_integer() || k.sign() < 0) return power(x, Value::of(k.reciprocal()));
  if (x.kind == ValueKind::exact && !x.exact.is_rational()) {
    const long double v = x.to_long_double();
    if (v < 0 && k.num.is_even()) return Value::undefined();
    const long double m = std::pow(std::fabs(v), 1.0L / k.to_long_double());
    return Value::of(v < 0 ? -m : m);
  }
  return power(x, Value::of(k.reciprocal()));
}

Value Evaluator::function(Func f, const Value& x, const Value* base) {
  if (x.kind == ValueKind::undefined || (base && base->kind == ValueKind::undefined)) return Value::undefined();
  if (!x.is_number() || (base && !base->is_number())) return Value::unknown();
  // Exact values where the answer is rational.
  if (is_zero(x)) {
    switch (f) {
      case Func::sin: case Func::tan: case Func::arcsin: case Func::arctan: case Func::sinh: case Func::tanh:
        return Value::of(Rational(0));
      case Func::cos: case Func::cosh: case Func::exp: case Func::sec:
        return Value::of(Rational(1));
      case Func::ln: case Func::log:
        return Value::undefined();
      default:
        break;
    }
  }
  if (f == Func::ln || f == Func::log) {
    const long double v = x.to_long_double();
    if (v <= 0) return Value::undefined();
    long double b = f == Func::ln ? kE : 10.0L;
    if (base) {
      b = base->to_long_double();
      if (b <= 0 || b == 1) return Value::undefined();
    }
    const long double l = std::log(v) / std::log(b);
    // log_b(x) is an integer k when x = b^k exactly: log_2 8 = 3, log 1000 = 3.
    if (is_rational(x) && (f == Func::log) && (!base || is_rational(*base))) {
      const long double k = std::nearbyint(l);
      if (std::fabs(l - k) < 1e-6L && std::fabs(k) <= 4096) {
        const Value bv = base ? *base : Value::of(Rational(10));
        const Value p = power(bv, Value::of(Rational(int64_t(k))));
        if (p.kind == ValueKind::exact && p.exact == x.exact) return Value::of(Rational(int64_t(k)));
      }
    }
    if (f == Func::ln && is_rational(x) && rational_value(x) == Rational(1)) return Value::of(Rational(0));
    return Value::of(l);
  }
  const long double v = x.to_long_double();
  long double r = 0;
  switch (f) {
    case Func::sin: r = std::sin(v); break;
    case Func::cos: r = std::cos(v); break;
    case Func::tan: r = std::tan(v); break;
    case Func::cot: r = 1.0L / std::tan(v); break;
    case Func::sec: r = 1.0L / std::cos(v); break;
    case Func::csc: r = 1.0L / std::sin(v); break;
    case Func::arcsin: r = std::asin(v); break;
    case Func::arccos: r = std::acos(v); break;
    case Func::arctan: r = std::atan(v); break;
    case Func::sinh: r = std::sinh(v); break;
    case Func::cosh: r = std::cosh(v); break;
    case Func::tanh: r = std::tanh(v); break;
    case Func::exp: r = std::exp(v); break;
    default: return Value::unknown();
  }
  return Value::of(r);  // NaN (asin(2)) and overflow become undefined
}

Value Evaluator::factorial(const Value& x) {
  if (x.kind == ValueKind::undefined) return Value::undefined();
  if (!is_rational(x)) return Value::unknown();
  const Rational n = rational_value(x);
  if (!n.is_integer() || n.sign() < 0) return Value::undefined();
  const auto k = n.num.to_int64();
  if (!k || *k > 100000) return Value::unknown();
  // log2(k!) from lgamma, checked before a single multiplication.
  if (std::lgamma(double(*k) + 1.0) / std::log(2.0) > double(kMaxBits)) return Value::unknown();
  BigInt acc(1);
  for (int64_t i = 2; i <= *k; ++i) {
    if (!charge(acc.bit_length(), 32)) return Value::unknown();
    acc = acc * BigInt(i);
  }
  return Value::of(Rational(std::move(acc)));
}

Value Evaluator::binomial(const Value& n, const Value& k) {
  if (n.kind == ValueKind::undefined || k.kind == ValueKind::undefined) return Value::undefined();
  if (!is_rational(n) || !is_rational(k)) return Value::unknown();
  const Rational rn = rational_value(n), rk = rational_value(k);
  if (!rn.is_integer() || !rk.is_integer()) return Value::unknown();
  const auto nn = rn.num.to_int64(), kk = rk.num.to_int64();
  if (!nn || !kk || *nn < 0) return Value::unknown();
  if (*kk < 0 || *kk > *nn) return Value::of(Rational(0));
  const int64_t m = std::min(*kk, *nn - *kk);
  if (m > 20000) return Value::unknown();
  // C(n, m) <= n^m: a size bound before the loop.
  if (double(m) * std::log2(double(*nn) + 1) > double(kMaxBits)) return Value::unknown();
  BigInt acc(1);
  for (int64_t i = 1; i <= m; ++i) {
    if (!charge(acc.bit_length(), 64)) return Value::unknown();
    acc = acc * BigInt(*nn - m + i) / BigInt(i);
  }
  return Value::of(Rational(std::move(acc)));
}

Value Evaluator::eval(int32_t index) {
  // Trees are at most kMaxNodes deep (a long sum is a deep left spine), so
  // the recursion is bounded; the depth check is a second fence.
  if (index < 0 || work_ <= 0 || depth_ > int(kMaxNodes) + 8) return Value::unknown();
  struct Depth {
    explicit Depth(int* d) : d(d) { ++*d; }
    ~Depth() { --*d; }
    int* d;
  } depth(&depth_);
  const Node& n = ast_.at(index);
  switch (n.kind) {
    case NodeKind::number: return literal(n);
    case NodeKind::variable: {
      for (const auto& [var, value] : vars_)
        if (same_name(n.text, var)) return value;
      return Value::unknown();
    }
    case NodeKind::pi: return Value::of(kPi);
    case NodeKind::euler: return Value::of(kE);
    case NodeKind::infinity: return Value::infinite(1);
    case NodeKind::neg: {
      Value v = eval(n.a);
      if (v.kind == ValueKind::exact) v.exact = -v.exact;
      if (v.kind == ValueKind::approx) v.approx = -v.approx;
      if (v.kind == ValueKind::infinity) v.sign = -v.sign;
      return v;
    }
    case NodeKind::add: return add(eval(n.a), eval(n.b), false);
    case NodeKind::sub: return add(eval(n.a), eval(n.b), true);
    case NodeKind::mul: return multiply(eval(n.a), eval(n.b));
    case NodeKind::div: return divide(eval(n.a), eval(n.b));
    case NodeKind::pow: return power(eval(n.a), eval(n.b));
    case NodeKind::factorial: return factorial(eval(n.a));
    case NodeKind::root: return root(eval(n.a), n.b >= 0 ? eval(n.b) : Value::of(Rational(2)));
    case NodeKind::func: {
      const Value x = eval(n.a);
      if (n.b >= 0) {
        const Value b = eval(n.b);
        return function(Func(n.op), x, &b);
      }
      return function(Func(n.op), x, nullptr);
    }
    case NodeKind::abs: {
      Value v = eval(n.a);
      if (v.kind == ValueKind::exact && v.exact.sign() < 0) v.exact = -v.exact;
      if (v.kind == ValueKind::approx) v.approx = std::fabs(v.approx);
      if (v.kind == ValueKind::infinity) v.sign = 1;
      return v;
    }
    case NodeKind::binom: return binomial(eval(n.a), eval(n.b));
    case NodeKind::plus_minus: {
      int choice = -1;
      for (size_t k = 0; k < pm_nodes_.size(); ++k)
        if (pm_nodes_[k] == index) choice = int(k);
      if (choice < 0) return Value::unknown();
      const bool minus = ((pm_mask_ >> choice) & 1u) != (n.op != 0);
      Value b = eval(n.b);
      if (n.a < 0) {
        if (!minus) return b;
        if (b.kind == ValueKind::exact) b.exact = -b.exact;
        if (b.kind == ValueKind::approx) b.approx = -b.approx;
        if (b.kind == ValueKind::infinity) b.sign = -b.sign;
        return b;
      }
      return add(eval(n.a), std::move(b), minus);
    }
    default: return Value::unknown();  // words, relations, tuples, sets: not numbers
  }
}

}  // namespace dapo::reward
