// Rational and surd arithmetic for the verifier's exact evaluation.
#include "dapo/reward/exact.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dapo/core/error.h"

namespace dapo::reward {

Rational Rational::make(BigInt num, BigInt den) {
  DAPO_CHECK(!den.is_zero(), "rational with zero denominator");
  if (den.is_negative()) {
    num = -num;
    den = -den;
  }
  Rational r;
  if (num.is_zero()) return r;
  if (!den.is_one()) {
    const BigInt g = BigInt::gcd(num, den);
    if (!g.is_one()) {
      num = num / g;
      den = den / g;
    }
  }
  r.num = std::move(num);
  r.den = std::move(den);
  return r;
}

long double Rational::to_long_double() const {
  int64_t en = 0, ed = 0;
  const long double mn = num.scaled(&en), md = den.scaled(&ed);
  const int64_t e = en - ed;
  if (e > 20000) return mn > 0 ? HUGE_VALL : -HUGE_VALL;
  if (e < -20000) return 0.0L;
  return std::ldexp(mn / md, int(e));
}

Rational Rational::reciprocal() const {
  DAPO_CHECK(!num.is_zero(), "reciprocal of zero");
  return make(den, num);
}

Rational operator+(const Rational& a, const Rational& b) {
  if (a.den.is_one() && b.den.is_one()) return Rational(a.num + b.num);
  return Rational::make(a.num * b.den + b.num * a.den, a.den * b.den);
}
Rational operator-(const Rational& a, const Rational& b) { return a + (-b); }
Rational operator*(const Rational& a, const Rational& b) {
  if (a.den.is_one() && b.den.is_one()) return Rational(a.num * b.num);
  return Rational::make(a.num * b.num, a.den * b.den);
}
Rational operator/(const Rational& a, const Rational& b) {
  DAPO_CHECK(!b.is_zero(), "rational division by zero");
  return Rational::make(a.num * b.den, a.den * b.num);
}
Rational Rational::operator-() const {
  Rational r = *this;
  r.num = -r.num;
  return r;
}
int compare(const Rational& a, const Rational& b) { return compare(a.num * b.den, b.num * a.den); }

namespace {

// floor(x^(1/k)) for x < 2^64, exact.
uint64_t integer_root(uint64_t x, uint64_t k) {
  if (x < 2 || k == 1) return x;
  if (k >= 64) return 1;
  const long double lx = static_cast<long double>(x);
  const long double guess =
      k == 2 ? std::sqrt(lx) : (k == 3 ? std::cbrt(lx) : std::pow(lx, 1.0L / static_cast<long double>(k)));
  uint64_t r = uint64_t(guess);
  auto pow_le = [&](uint64_t base) {  // base^k <= x, without overflow
    unsigned __int128 p = 1;
    for (uint64_t i = 0; i < k; ++i) {
      p *= base;
      if (p > x) return false;
    }
    return true;
  };
  while (r > 0 && !pow_le(r)) --r;
  while (pow_le(r + 1)) ++r;
  return r;
}

std::optional<BigInt> exact_root_int(const BigInt& x, uint64_t k) {
  if (x.is_negative()) return std::nullopt;
  if (const auto small = x.magnitude_u64()) {
    const uint64_t r = integer_root(*small, k);
    if (BigInt::pow(BigInt(int64_t(r)), k) == x) return BigInt(int64_t(r));
    return std::nullopt;
  }
  // A root that fits in 63 bits, located by floating point and checked exactly.
  if (x.bit_length() > 63 * k) return std::nullopt;
  int64_t e = 0;
  const long double m = x.scaled(&e);
  const long double approx = std::exp2((std::log2(m) + static_cast<long double>(e)) / static_cast<long double>(k));
  if (!(approx < 9.2e18L)) return std::nullopt;
  const int64_t guess = int64_t(std::llround(approx));
  for (int64_t r = std::max<int64_t>(guess - 2, 0); r <= guess + 2; ++r)
    if (BigInt::pow(BigInt(r), k) == x) return BigInt(r);
  return std::nullopt;
}

}  // namespace

std::optional<Rational> exact_root(const Rational& x, uint64_t k) {
  DAPO_CHECK(k >= 1);
  if (x.sign() < 0) return std::nullopt;
  if (x.is_zero() || k == 1) return x;
  auto n = exact_root_int(x.num, k);
  if (!n) return std::nullopt;
  auto d = exact_root_int(x.den, k);
  if (!d) return std::nullopt;
  return Rational::make(std::move(*n), std::move(*d));
}

std::optional<std::pair<uint64_t, uint64_t>> split_square(uint64_t n) {
  if (n == 0 || n > kMaxRadicand) return std::nullopt;
  uint64_t s = 1, r = 1;
  for (uint64_t d = 2; d * d * d <= n; d += (d == 2 ? 1 : 2)) {
    if (n % d) continue;
    int e = 0;
    while (n % d == 0) {
      n /= d;
      ++e;
    }
    for (int i = 0; i + 1 < e; i += 2) s *= d;
    if (e % 2) r *= d;
  }
  // n has at most two prime factors left, all larger than the divisors tried.
  const uint64_t q = integer_root(n, 2);
  if (q * q == n && n > 1) {
    s *= q;
  } else {
    r *= n;
  }
  return std::pair{s, r};
}

Surd::Surd(Rational r) {
  if (!r.is_zero()) terms_.push_back({std::move(r), 1});
}

std::optional<Surd> Surd::sqrt_of(const Rational& x) {
  if (x.sign() < 0) return std::nullopt;
  if (x.is_zero()) return Surd();
  if (auto q = exact_root(x, 2)) return Surd(std::move(*q));
  // sqrt(p/q) = sqrt(p q) / q, then p q = s^2 r.
  const auto p = x.num.magnitude_u64(), q = x.den.magnitude_u64();
  if (!p || !q) return std::nullopt;
  const unsigned __int128 pq = (unsigned __int128)(*p) * (*q);
  if (pq > kMaxRadicand) return std::nullopt;
  const auto sr = split_square(uint64_t(pq));
  if (!sr) return std::nullopt;
  Surd out;
  out.terms_.push_back({Rational::make(BigInt(int64_t(sr->first)), x.den), sr->second});
  return out;
}

Rational Surd::rational_value() const {
  DAPO_CHECK(is_rational());
  return terms_.empty() ? Rational() : terms_[0].coef;
}

size_t Surd::bit_length() const {
  size_t b = 0;
  for (const auto& t : terms_) b += t.coef.bit_length() + 40;
  return b;
}

long double Surd::to_long_double() const {
  long double v = 0;
  for (const auto& t : terms_)
    v += t.coef.to_long_double() * (t.radicand == 1 ? 1.0L : std::sqrt(static_cast<long double>(t.radicand)));
  return v;
}

int Surd::sign() const {
  if (terms_.empty()) return 0;
  if (terms_.size() == 1) return terms_[0].coef.sign();
  const long double v = to_long_double();
  return v > 0 ? 1 : (v < 0 ? -1 : 0);
}

void Surd::add_term(const Rational& coef, uint64_t radicand) {
  if (coef.is_zero()) return;
  auto it = std::lower_bound(terms_.begin(), terms_.end(), radicand,
                             [](const SurdTerm& t, uint64_t r) { return t.radicand < r; });
  if (it != terms_.end() && it->radicand == radicand) {
    it->coef = it->coef + coef;
    if (it->coef.is_zero()) terms_.erase(it);
    return;
  }
  terms_.insert(it, SurdTerm{coef, radicand});
}

Surd Surd::operator-() const {
  Surd r = *this;
  for (auto& t : r.terms_) t.coef = -t.coef;
  return r;
}

Surd operator+(const Surd& a, const Surd& b) {
  Surd r = a;
  for (const auto& t : b.terms_) r.add_term(t.coef, t.radicand);
  return r;
}

Surd operator-(const Surd& a, const Surd& b) { return a + (-b); }

void Surd::accumulate(const Surd& b, bool subtract) {
  for (const auto& t : b.terms_) add_term(subtract ? -t.coef : t.coef, t.radicand);
}

std::optional<Surd> Surd::multiply(const Surd& a, const Surd& b) {
  if (a.terms_.size() * b.terms_.size() > kMaxTerms * 4) return std::nullopt;
  Surd r;
  for (const auto& x : a.terms_) {
    for (const auto& y : b.terms_) {
      // sqrt(x) sqrt(y) = g sqrt((x/g)(y/g)) with g = gcd: squarefree inputs
      // make (x/g)(y/g) squarefree again.
      const uint64_t g = std::gcd(x.radicand, y.radicand);
      const unsigned __int128 rad = (unsigned __int128)(x.radicand / g) * (y.radicand / g);
      if (rad > kMaxRadicand) return std::nullopt;
      r.add_term(x.coef * y.coef * Rational(int64_t(g)), uint64_t(rad));
    }
  }
  if (r.terms_.size() > kMaxTerms) return std::nullopt;
  return r;
}

std::optional<Surd> Surd::reciprocal() const {
  if (terms_.empty()) return std::nullopt;
  if (terms_.size() == 1) {
    // 1 / (c sqrt(r)) = sqrt(r) / (c r)
    const auto& t = terms_[0];
    Surd out;
    out.terms_.push_back({(t.coef * Rational(int64_t(t.radicand))).reciprocal(), t.radicand});
    return out;
  }
  if (terms_.size() == 2 && terms_[0].radicand == 1) {
    // 1 / (a + b sqrt(r)) = (a - b sqrt(r)) / (a^2 - b^2 r); the denominator is
    // non-zero because sqrt(r) is irrational.
    const Rational& a = terms_[0].coef;
    const Rational& b = terms_[1].coef;
    const Rational den = a * a - b * b * Rational(int64_t(terms_[1].radicand));
    Surd out;
    out.terms_.push_back({a / den, 1});
    out.terms_.push_back({-b / den, terms_[1].radicand});
    return out;
  }
  return std::nullopt;
}

bool operator==(const Surd& a, const Surd& b) {
  if (a.terms_.size() != b.terms_.size()) return false;
  for (size_t i = 0; i < a.terms_.size(); ++i)
    if (a.terms_[i].radicand != b.terms_[i].radicand || !(a.terms_[i].coef == b.terms_[i].coef)) return false;
  return true;
}

}  // namespace dapo::reward
