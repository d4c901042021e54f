// Exact arithmetic under the verifier: BigInt against __int128 and against
// identities on numbers of hundreds of digits, rationals, roots, surds.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "dapo/reward/bigint.h"
#include "dapo/reward/exact.h"

namespace dapo::reward {
namespace {

std::string to_string(__int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  unsigned __int128 m = neg ? (unsigned __int128)(-(v + 1)) + 1 : (unsigned __int128)v;
  std::string s;
  while (m) {
    s.insert(s.begin(), char('0' + int(m % 10)));
    m /= 10;
  }
  return neg ? "-" + s : s;
}

BigInt big(const std::string& s) {
  if (!s.empty() && s[0] == '-') return -*BigInt::from_decimal(s.substr(1));
  return *BigInt::from_decimal(s);
}

std::string random_digits(std::mt19937_64& rng, size_t n) {
  std::string s(1, char('1' + rng() % 9));
  while (s.size() < n) s += char('0' + rng() % 10);
  return s;
}

TEST(BigInt, MatchesInt128OnRandomOperands) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const int64_t a = int64_t(rng()) >> (rng() % 63), b = int64_t(rng()) >> (rng() % 63);
    const BigInt x(a), y(b);
    EXPECT_EQ((x + y).to_decimal(), to_string(__int128(a) + b));
    EXPECT_EQ((x - y).to_decimal(), to_string(__int128(a) - b));
    EXPECT_EQ((x * y).to_decimal(), to_string(__int128(a) * b));
    if (b != 0) {
      EXPECT_EQ((x / y).to_decimal(), to_string(__int128(a) / b)) << a << " / " << b;
      EXPECT_EQ((x % y).to_decimal(), to_string(__int128(a) % b)) << a << " % " << b;
    }
    EXPECT_EQ(compare(x, y), a < b ? -1 : (a > b ? 1 : 0));
    EXPECT_EQ(x.to_int64(), std::optional<int64_t>(a));
  }
}

TEST(BigInt, DecimalRoundTripAndEdgeCases) {
  EXPECT_EQ(BigInt().to_decimal(), "0");
  EXPECT_EQ(BigInt::from_decimal("000")->to_decimal(), "0");
  EXPECT_EQ(BigInt::from_decimal("0001234")->to_decimal(), "1234");
  EXPECT_FALSE(BigInt::from_decimal(""));
  EXPECT_FALSE(BigInt::from_decimal("12a"));
  EXPECT_FALSE(BigInt::from_decimal("-1"));
  const std::string digits = "1234567890123456789012345678901234567890123456789012345678901234567890";
  EXPECT_EQ(BigInt::from_decimal(digits)->to_decimal(), digits);
  EXPECT_EQ(BigInt(INT64_MIN).to_decimal(), "-9223372036854775808");
  EXPECT_EQ(BigInt(INT64_MIN).to_int64(), std::optional<int64_t>(INT64_MIN));
  EXPECT_FALSE((BigInt(INT64_MAX) + BigInt(1)).to_int64());
  EXPECT_EQ(BigInt(-5).abs().to_decimal(), "5");
  EXPECT_EQ((-BigInt(0)).sign(), 0);
  EXPECT_EQ(BigInt(1).bit_length(), 1u);
  EXPECT_EQ(BigInt::pow(BigInt(2), 64).bit_length(), 65u);
  EXPECT_EQ(BigInt::pow(BigInt(10), 30).to_decimal(), "1" + std::string(30, '0'));
  EXPECT_EQ(BigInt::pow(BigInt(-3), 3).to_decimal(), "-27");
}

TEST(BigInt, DivisionIdentityOnLongNumbers) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    const BigInt a = big(random_digits(rng, 1 + rng() % 300));
    BigInt b = big(random_digits(rng, 1 + rng() % 120));
    if (rng() % 2) b = -b;
    BigInt q, r;
    BigInt::divmod(a, b, &q, &r);
    EXPECT_EQ(q * b + r, a);
    EXPECT_LT(compare(r.abs(), b.abs()), 0);
    EXPECT_TRUE(r.is_zero() || r.sign() == a.sign());
  }
  // Knuth's add-back step: divisors whose top limb makes q-hat one too large.
  const BigInt base = BigInt::pow(BigInt(2), 64);
  const BigInt a = base * base * BigInt(0x7fffffff) - BigInt(1), b = base * BigInt(0x7fffffff) + BigInt(1);
  BigInt q, r;
  BigInt::divmod(a, b, &q, &r);
  EXPECT_EQ(q * b + r, a);
  EXPECT_LT(compare(r, b), 0);
}

TEST(BigInt, GcdAndScaled) {
  EXPECT_EQ(BigInt::gcd(BigInt(12), BigInt(-18)).to_decimal(), "6");
  EXPECT_EQ(BigInt::gcd(BigInt(0), BigInt(5)).to_decimal(), "5");
  const BigInt f = BigInt::pow(BigInt(3), 200), g = BigInt::pow(BigInt(3), 150) * BigInt(7);
  EXPECT_EQ(BigInt::gcd(f, g), BigInt::pow(BigInt(3), 150));
  int64_t e = 0;
  const long double m = BigInt::pow(BigInt(2), 5000).scaled(&e);
  EXPECT_EQ(m, 0.5L);
  EXPECT_EQ(e, 5001);
}

TEST(Rational, ReducesAndConverts) {
  const Rational half = Rational::make(BigInt(2), BigInt(4));
  EXPECT_EQ(half.num.to_decimal(), "1");
  EXPECT_EQ(half.den.to_decimal(), "2");
  EXPECT_EQ(Rational::make(BigInt(3), BigInt(-6)).num.to_decimal(), "-1");
  EXPECT_TRUE(Rational::make(BigInt(0), BigInt(-6)).den.is_one());
  EXPECT_EQ(half + half, Rational(1));
  EXPECT_EQ(half * Rational(4), Rational(2));
  EXPECT_EQ(Rational(1) / Rational(3) - Rational::make(BigInt(1), BigInt(3)), Rational(0));
  EXPECT_EQ(compare(Rational::make(BigInt(1), BigInt(3)), Rational::make(BigInt(1), BigInt(2))), -1);
  EXPECT_DOUBLE_EQ(double(Rational::make(BigInt(1), BigInt(8)).to_long_double()), 0.125);
  // A ratio of numbers far beyond a long double's range still converts.
  const Rational huge = Rational::make(BigInt::pow(BigInt(10), 6000) + BigInt(1), BigInt::pow(BigInt(10), 5999));
  EXPECT_NEAR(double(huge.to_long_double()), 10.0, 1e-12);
}

TEST(Rational, ExactRoots) {
  EXPECT_EQ(exact_root(Rational::make(BigInt(9), BigInt(4)), 2), Rational::make(BigInt(3), BigInt(2)));
  EXPECT_EQ(exact_root(Rational(27), 3), Rational(3));
  EXPECT_FALSE(exact_root(Rational(2), 2));
  EXPECT_FALSE(exact_root(Rational(-8), 3));  // the caller handles signs
  // A cube beyond 64 bits: located by floating point, confirmed exactly.
  EXPECT_EQ(exact_root(Rational(BigInt::pow(BigInt(12345678901LL), 3)), 3), Rational(BigInt(12345678901LL)));
  EXPECT_FALSE(exact_root(Rational(BigInt::pow(BigInt(12345678901LL), 3) + BigInt(1)), 3));
  EXPECT_EQ(exact_root(Rational(0), 5), Rational(0));
}

TEST(Surd, SplitSquare) {
  EXPECT_EQ(split_square(12), (std::pair<uint64_t, uint64_t>{2, 3}));
  EXPECT_EQ(split_square(1), (std::pair<uint64_t, uint64_t>{1, 1}));
  EXPECT_EQ(split_square(72), (std::pair<uint64_t, uint64_t>{6, 2}));
  // Two large primes left after trial division: squarefree, or a square.
  EXPECT_EQ(split_square(999983ULL * 999979ULL), (std::pair<uint64_t, uint64_t>{1, 999983ULL * 999979ULL}));
  EXPECT_EQ(split_square(999983ULL * 999983ULL), (std::pair<uint64_t, uint64_t>{999983ULL, 1}));
  EXPECT_FALSE(split_square(0));
  EXPECT_FALSE(split_square(kMaxRadicand + 1));
}

TEST(Surd, ArithmeticIsCanonical) {
  const Surd r2 = *Surd::sqrt_of(Rational(2)), r8 = *Surd::sqrt_of(Rational(8)), r3 = *Surd::sqrt_of(Rational(3));
  EXPECT_EQ(r2 + r2, r8);
  EXPECT_TRUE((r8 - r2 - r2).is_zero());
  EXPECT_EQ(*Surd::multiply(r2, r2), Surd(Rational(2)));
  EXPECT_EQ(*Surd::multiply(r2, r3), *Surd::sqrt_of(Rational(6)));
  EXPECT_FALSE(r2 + r3 == r3 + r3);
  // 1/(1+sqrt2) = sqrt2 - 1
  const Surd one_plus = Surd(Rational(1)) + r2;
  EXPECT_EQ(*one_plus.reciprocal(), r2 - Surd(Rational(1)));
  EXPECT_EQ(*r2.reciprocal(), *Surd::sqrt_of(Rational::make(BigInt(1), BigInt(2))));
  EXPECT_FALSE((r2 + r3 + Surd(Rational(1))).reciprocal());  // three terms: floating point takes over
  EXPECT_FALSE(Surd().reciprocal());
  EXPECT_FALSE(Surd::sqrt_of(Rational(-1)));
  EXPECT_EQ((r2 - r3).sign(), -1);
  EXPECT_NEAR(double((r2 + r3).to_long_double()), 1.4142135623730951 + 1.7320508075688772, 1e-15);
}

}  // namespace
}  // namespace dapo::reward
