// BigInt arithmetic: schoolbook add/sub/mul and Knuth's algorithm D for
// division. Sizes stay small (the evaluator caps them at a few hundred limbs),
// so nothing asymptotically faster would pay for itself.
#include "dapo/reward/bigint.h"

#include <algorithm>
#include <cmath>

#include "dapo/core/error.h"

namespace dapo::reward {

BigInt::BigInt(int64_t v) {
  if (v == 0) return;
  neg_ = v < 0;
  uint64_t m = neg_ ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  mag_.push_back(uint32_t(m));
  if (m >> 32) mag_.push_back(uint32_t(m >> 32));
}

void BigInt::trim(Limbs* a) {
  while (!a->empty() && a->back() == 0) a->pop_back();
}

BigInt BigInt::make(Limbs mag, bool neg) {
  trim(&mag);
  BigInt r;
  r.neg_ = neg && !mag.empty();
  r.mag_ = std::move(mag);
  return r;
}

std::optional<BigInt> BigInt::from_decimal(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  for (char c : digits)
    if (c < '0' || c > '9') return std::nullopt;
  Limbs mag;
  mag.reserve(digits.size() / 9 + 1);
  // Nine digits at a time: mag = mag * 10^k + chunk.
  size_t i = 0;
  const size_t first = digits.size() % 9 == 0 ? 9 : digits.size() % 9;
  size_t take = first;
  while (i < digits.size()) {
    uint32_t chunk = 0, scale = 1;
    for (size_t j = 0; j < take; ++j) {
      chunk = chunk * 10 + uint32_t(digits[i + j] - '0');
      scale *= 10;
    }
    uint64_t carry = chunk;
    for (uint32_t& limb : mag) {
      const uint64_t t = uint64_t(limb) * scale + carry;
      limb = uint32_t(t);
      carry = t >> 32;
    }
    if (carry) mag.push_back(uint32_t(carry));
    i += take;
    take = 9;
  }
  return make(std::move(mag), false);
}

size_t BigInt::bit_length() const {
  if (mag_.empty()) return 0;
  return (mag_.size() - 1) * 32 + size_t(32 - __builtin_clz(mag_.back()));
}

std::optional<uint64_t> BigInt::magnitude_u64() const {
  if (mag_.size() > 2) return std::nullopt;
  uint64_t v = 0;
  if (!mag_.empty()) v = mag_[0];
  if (mag_.size() == 2) v |= uint64_t(mag_[1]) << 32;
  return v;
}

std::optional<int64_t> BigInt::to_int64() const {
  const auto m = magnitude_u64();
  if (!m) return std::nullopt;
  if (!neg_) {
    if (*m > uint64_t(INT64_MAX)) return std::nullopt;
    return int64_t(*m);
  }
  if (*m > uint64_t(INT64_MAX) + 1) return std::nullopt;
  return int64_t(uint64_t(0) - *m);
}

long double BigInt::scaled(int64_t* exponent) const {
  if (mag_.empty()) {
    *exponent = 0;
    return 0.0L;
  }
  // The top three limbs carry more than the 64 bits of a long double mantissa.
  long double m = 0;
  const size_t n = mag_.size();
  const size_t lo = n >= 3 ? n - 3 : 0;
  for (size_t i = n; i-- > lo;) m = m * 4294967296.0L + mag_[i];
  int e = 0;
  m = std::frexp(m, &e);
  *exponent = int64_t(e) + int64_t(lo) * 32;
  return neg_ ? -m : m;
}

std::string BigInt::to_decimal() const {
  if (mag_.empty()) return "0";
  Limbs t = mag_;
  std::string out;
  while (!t.empty()) {
    uint32_t r = divmod_small(&t, 1000000000u);
    for (int k = 0; k < 9; ++k) {
      out.push_back(char('0' + r % 10));
      r /= 10;
      if (t.empty() && r == 0) break;
    }
  }
  while (out.size() > 1 && out.back() == '0') out.pop_back();
  if (neg_) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

BigInt BigInt::abs() const { return make(mag_, false); }
BigInt BigInt::operator-() const { return make(mag_, !neg_); }

int BigInt::compare_mag(const Limbs& a, const Limbs& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = a.size(); i-- > 0;)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

int compare(const BigInt& a, const BigInt& b) {
  if (a.neg_ != b.neg_) return a.neg_ ? -1 : 1;
  const int c = BigInt::compare_mag(a.mag_, b.mag_);
  return a.neg_ ? -c : c;
}

BigInt::Limbs BigInt::add_mag(const Limbs& a, const Limbs& b) {
  const Limbs& x = a.size() >= b.size() ? a : b;
  const Limbs& y = a.size() >= b.size() ? b : a;
  Limbs r(x.size() + 1);
  uint64_t carry = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint64_t t = uint64_t(x[i]) + (i < y.size() ? y[i] : 0) + carry;
    r[i] = uint32_t(t);
    carry = t >> 32;
  }
  r[x.size()] = uint32_t(carry);
  trim(&r);
  return r;
}

BigInt::Limbs BigInt::sub_mag(const Limbs& a, const Limbs& b) {
  Limbs r(a.size());
  int64_t borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t t = int64_t(a[i]) - (i < b.size() ? int64_t(b[i]) : 0) - borrow;
    borrow = t < 0;
    if (t < 0) t += int64_t(1) << 32;
    r[i] = uint32_t(t);
  }
  trim(&r);
  return r;
}

BigInt::Limbs BigInt::mul_mag(const Limbs& a, const Limbs& b) {
  if (a.empty() || b.empty()) return {};
  Limbs r(a.size() + b.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    uint64_t carry = 0;
    const uint64_t ai = a[i];
    for (size_t j = 0; j < b.size(); ++j) {
      const uint64_t t = ai * b[j] + r[i + j] + carry;
      r[i + j] = uint32_t(t);
      carry = t >> 32;
    }
    r[i + b.size()] = uint32_t(carry);
  }
  trim(&r);
  return r;
}

BigInt operator+(const BigInt& a, const BigInt& b) {
  if (a.neg_ == b.neg_) return BigInt::make(BigInt::add_mag(a.mag_, b.mag_), a.neg_);
  const int c = BigInt::compare_mag(a.mag_, b.mag_);
  if (c == 0) return BigInt();
  if (c > 0) return BigInt::make(BigInt::sub_mag(a.mag_, b.mag_), a.neg_);
  return BigInt::make(BigInt::sub_mag(b.mag_, a.mag_), b.neg_);
}

BigInt operator-(const BigInt& a, const BigInt& b) { return a + (-b); }

BigInt operator*(const BigInt& a, const BigInt& b) {
  return BigInt::make(BigInt::mul_mag(a.mag_, b.mag_), a.neg_ != b.neg_);
}

uint32_t BigInt::divmod_small(Limbs* a, uint32_t d) {
  uint64_t rem = 0;
  for (size_t i = a->size(); i-- > 0;) {
    const uint64_t cur = (rem << 32) | (*a)[i];
    (*a)[i] = uint32_t(cur / d);
    rem = cur % d;
  }
  trim(a);
  return uint32_t(rem);
}

// Knuth, TAOCP vol. 2, 4.3.1, algorithm D, on 32-bit limbs.
void BigInt::divmod_mag(const Limbs& a, const Limbs& b, Limbs* q, Limbs* r) {
  DAPO_CHECK(!b.empty(), "division by zero");
  if (compare_mag(a, b) < 0) {
    *q = {};
    *r = a;
    return;
  }
  if (b.size() == 1) {
    *q = a;
    const uint32_t rem = divmod_small(q, b[0]);
    *r = rem ? Limbs{rem} : Limbs{};
    return;
  }
  const int s = __builtin_clz(b.back());
  const size_t n = b.size(), m = a.size() - b.size();
  Limbs v(n), u(a.size() + 1);
  for (size_t i = n; i-- > 0;)
    v[i] = (b[i] << s) | (s && i > 0 ? uint32_t(uint64_t(b[i - 1]) >> (32 - s)) : 0);
  u[a.size()] = s ? uint32_t(uint64_t(a.back()) >> (32 - s)) : 0;
  for (size_t i = a.size(); i-- > 0;)
    u[i] = (a[i] << s) | (s && i > 0 ? uint32_t(uint64_t(a[i - 1]) >> (32 - s)) : 0);
  Limbs quot(m + 1, 0);
  const uint64_t base = uint64_t(1) << 32;
  for (size_t j = m + 1; j-- > 0;) {
    const uint64_t num = (uint64_t(u[j + n]) << 32) | u[j + n - 1];
    uint64_t qhat = num / v[n - 1];
    uint64_t rhat = num % v[n - 1];
    while (qhat >= base || qhat * v[n - 2] > ((rhat << 32) | u[j + n - 2])) {
      --qhat;
      rhat += v[n - 1];
      if (rhat >= base) break;
    }
    // Multiply and subtract.
    int64_t borrow = 0;
    uint64_t carry = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t p = qhat * v[i] + carry;
      carry = p >> 32;
      const int64_t t = int64_t(u[i + j]) - int64_t(uint32_t(p)) - borrow;
      borrow = t < 0;
      u[i + j] = uint32_t(t + (t < 0 ? int64_t(base) : 0));
    }
    const int64_t t = int64_t(u[j + n]) - int64_t(carry) - borrow;
    u[j + n] = uint32_t(t + (t < 0 ? int64_t(base) : 0));
    if (t < 0) {  // qhat was one too large: add back
      --qhat;
      uint64_t c = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t s2 = uint64_t(u[i + j]) + v[i] + c;
        u[i + j] = uint32_t(s2);
        c = s2 >> 32;
      }
      u[j + n] = uint32_t(uint64_t(u[j + n]) + c);
    }
    quot[j] = uint32_t(qhat);
  }
  trim(&quot);
  *q = std::move(quot);
  Limbs rem(n);
  for (size_t i = 0; i < n; ++i)
    rem[i] = (u[i] >> s) | (s ? uint32_t(uint64_t(u[i + 1]) << (32 - s)) : 0);
  trim(&rem);
  *r = std::move(rem);
}

void BigInt::divmod(const BigInt& a, const BigInt& b, BigInt* quotient, BigInt* remainder) {
  Limbs q, r;
  divmod_mag(a.mag_, b.mag_, &q, &r);
  if (quotient) *quotient = make(std::move(q), a.neg_ != b.neg_);
  if (remainder) *remainder = make(std::move(r), a.neg_);
}

BigInt operator/(const BigInt& a, const BigInt& b) {
  BigInt q;
  BigInt::divmod(a, b, &q, nullptr);
  return q;
}

BigInt operator%(const BigInt& a, const BigInt& b) {
  BigInt r;
  BigInt::divmod(a, b, nullptr, &r);
  return r;
}

BigInt BigInt::gcd(BigInt a, BigInt b) {
  a = a.abs();
  b = b.abs();
  while (!b.is_zero()) {
    const auto x = a.magnitude_u64(), y = b.magnitude_u64();
    if (x && y) {
      uint64_t p = *x, q = *y;
      while (q) {
        const uint64_t t = p % q;
        p = q;
        q = t;
      }
      return make(Limbs{uint32_t(p), uint32_t(p >> 32)}, false);
    }
    BigInt r = a % b;
    a = std::move(b);
    b = std::move(r);
  }
  return a;
}

BigInt BigInt::pow(const BigInt& base, uint64_t exponent) {
  BigInt result(1), b = base;
  while (exponent) {
    if (exponent & 1) result = result * b;
    exponent >>= 1;
    if (exponent) b = b * b;
  }
  return result;
}

}  // namespace dapo::reward
