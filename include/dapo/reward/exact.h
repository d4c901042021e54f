// Exact numbers of the verifier: rationals over BigInt, and surd sums
// (finite sums of rational * sqrt(squarefree integer)), so that 0.5, 1/2 and
// \frac{2}{4} are the same value, sqrt(8) equals 2 sqrt(2) exactly, and
// 1/2004! differs from 1/2006!. Operations that would leave this domain
// return nullopt; the evaluator then falls back to floating point or gives up.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dapo/reward/bigint.h"

namespace dapo::reward {

// num/den in lowest terms, den > 0.
struct Rational {
  BigInt num{0};
  BigInt den{1};

  Rational() = default;
  Rational(int64_t v) : num(v) {}  // NOLINT: small integers convert implicitly
  explicit Rational(BigInt v) : num(std::move(v)) {}
  static Rational make(BigInt num, BigInt den);  // den != 0 (DAPO_CHECK); reduces

  bool is_zero() const { return num.is_zero(); }
  bool is_integer() const { return den.is_one(); }
  int sign() const { return num.sign(); }
  size_t bit_length() const { return num.bit_length() + den.bit_length(); }
  long double to_long_double() const;  // correctly scaled even when num, den overflow a long double
  Rational reciprocal() const;         // non-zero (DAPO_CHECK)

  friend Rational operator+(const Rational& a, const Rational& b);
  friend Rational operator-(const Rational& a, const Rational& b);
  friend Rational operator*(const Rational& a, const Rational& b);
  friend Rational operator/(const Rational& a, const Rational& b);  // b != 0 (DAPO_CHECK)
  Rational operator-() const;
  friend bool operator==(const Rational& a, const Rational& b) { return a.num == b.num && a.den == b.den; }
  friend int compare(const Rational& a, const Rational& b);
};

// The k-th root of a non-negative rational when it is rational (both parts
// perfect k-th powers); nullopt otherwise or when the root would not fit in
// 63 bits per part.
std::optional<Rational> exact_root(const Rational& x, uint64_t k);

// n = square * squarefree for 1 <= n <= kMaxRadicand; nullopt above it.
// Trial division up to the cube root, after which what is left has at most two
// prime factors and is squarefree unless it is a perfect square.
inline constexpr uint64_t kMaxRadicand = 1000000000000ULL;  // 10^12
std::optional<std::pair<uint64_t, uint64_t>> split_square(uint64_t n);  // {s, r}: n = s^2 r

struct SurdTerm {
  Rational coef;      // non-zero
  uint64_t radicand;  // squarefree, >= 1 (1: the rational part)
};

// A sum of SurdTerms with distinct radicands in increasing order; empty is 0.
// Two Surds are equal as real numbers iff their terms are identical, because
// square roots of distinct squarefree integers are linearly independent over Q.
class Surd {
 public:
  static constexpr size_t kMaxTerms = 16;

  Surd() = default;
  explicit Surd(Rational r);
  static std::optional<Surd> sqrt_of(const Rational& x);  // x >= 0 and num*den <= kMaxRadicand

  const std::vector<SurdTerm>& terms() const { return terms_; }
  bool is_zero() const { return terms_.empty(); }
  bool is_rational() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].radicand == 1); }
  Rational rational_value() const;  // is_rational() (DAPO_CHECK)
  size_t bit_length() const;        // sum over the coefficients: a size for budgets
  long double to_long_double() const;
  int sign() const;  // exact for one term; by floating point otherwise (terms do not cancel to 0)

  Surd operator-() const;
  friend Surd operator+(const Surd& a, const Surd& b);  // may exceed kMaxTerms: check term count
  friend Surd operator-(const Surd& a, const Surd& b);
  void accumulate(const Surd& b, bool subtract);  // *this += b or -= b, without a copy of *this
  static std::optional<Surd> multiply(const Surd& a, const Surd& b);  // nullopt: radicand or term overflow
  // 1/x for one term, or two terms of which one is rational (by the conjugate); nullopt otherwise or x = 0.
  std::optional<Surd> reciprocal() const;
  friend bool operator==(const Surd& a, const Surd& b);

 private:
  void add_term(const Rational& coef, uint64_t radicand);  // keeps the invariants
  std::vector<SurdTerm> terms_;
};

}  // namespace dapo::reward
