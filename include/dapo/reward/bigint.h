// BigInt: a signed arbitrary-precision integer, just big enough for the
// verifier's exact arithmetic (integers of any length the caps allow, the
// numerators and denominators of rationals). Magnitude in base 2^32 limbs,
// little-endian. Callers bound sizes themselves (see evaluate.h: a bit cap
// and a work budget per answer), so no operation here refuses work.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace dapo::reward {

namespace detail {

// Limbs with room for kInline of them in place: most numbers of an answer
// (42, 1/2, 2 sqrt 3) never touch the heap.
class Limbs {
 public:
  static constexpr uint32_t kInline = 4;

  Limbs() = default;
  explicit Limbs(size_t n, uint32_t fill = 0) { resize(n, fill); }
  Limbs(std::initializer_list<uint32_t> v) {
    reserve(v.size());
    for (uint32_t x : v) push_back(x);
  }
  Limbs(const Limbs& o) { assign(o); }
  Limbs(Limbs&& o) noexcept { take(o); }
  Limbs& operator=(const Limbs& o) {
    if (this != &o) assign(o);
    return *this;
  }
  Limbs& operator=(Limbs&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~Limbs() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint32_t* begin() { return data_; }
  uint32_t* end() { return data_ + size_; }
  const uint32_t* begin() const { return data_; }
  const uint32_t* end() const { return data_ + size_; }
  uint32_t& operator[](size_t i) { return data_[i]; }
  uint32_t operator[](size_t i) const { return data_[i]; }
  uint32_t back() const { return data_[size_ - 1]; }
  void pop_back() { --size_; }
  void push_back(uint32_t x) {
    if (size_ == cap_) reserve(size_t(cap_) * 2);
    data_[size_++] = x;
  }
  void reserve(size_t n) {
    if (n <= cap_) return;
    auto* heap = new uint32_t[n];
    if (size_) std::memcpy(heap, data_, size_ * sizeof(uint32_t));
    release();
    data_ = heap;
    cap_ = uint32_t(n);
  }
  void resize(size_t n, uint32_t fill = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = fill;
    size_ = uint32_t(n);
  }
  friend bool operator==(const Limbs& a, const Limbs& b) {
    return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_ * sizeof(uint32_t)) == 0);
  }

 private:
  void release() {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    cap_ = kInline;
    size_ = 0;
  }
  void assign(const Limbs& o) {
    size_ = 0;
    reserve(o.size_);
    if (o.size_) std::memcpy(data_, o.data_, o.size_ * sizeof(uint32_t));
    size_ = o.size_;
  }
  void take(Limbs& o) {
    if (o.data_ == o.inline_) {
      std::memcpy(inline_, o.inline_, sizeof(inline_));
      data_ = inline_;
      cap_ = kInline;
    } else {
      data_ = o.data_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = kInline;
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  uint32_t inline_[kInline] = {};
  uint32_t* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
};

}  // namespace detail

class BigInt {
 public:
  BigInt() = default;
  BigInt(int64_t v);  // NOLINT: implicit on purpose, small integers are everywhere

  // Decimal digits only (no sign, no separators); nullopt when empty or not digits.
  static std::optional<BigInt> from_decimal(std::string_view digits);

  bool is_zero() const { return mag_.empty(); }
  bool is_negative() const { return neg_; }
  int sign() const { return mag_.empty() ? 0 : (neg_ ? -1 : 1); }
  bool is_one() const { return !neg_ && mag_.size() == 1 && mag_[0] == 1; }
  bool is_even() const { return mag_.empty() || (mag_[0] & 1u) == 0; }
  size_t bit_length() const;             // of the magnitude; 0 for zero
  size_t limb_count() const { return mag_.size(); }
  std::optional<uint64_t> magnitude_u64() const;  // |value| when it fits in 64 bits
  std::optional<int64_t> to_int64() const;

  // |value| = mantissa * 2^exponent with mantissa in [0.5, 1) (0 for zero):
  // lets a ratio of huge integers become a long double without overflow.
  long double scaled(int64_t* exponent) const;
  std::string to_decimal() const;

  BigInt abs() const;
  BigInt operator-() const;
  friend BigInt operator+(const BigInt& a, const BigInt& b);
  friend BigInt operator-(const BigInt& a, const BigInt& b);
  friend BigInt operator*(const BigInt& a, const BigInt& b);
  // Truncating division (C++ semantics); the divisor must not be zero (DAPO_CHECK).
  static void divmod(const BigInt& a, const BigInt& b, BigInt* quotient, BigInt* remainder);
  friend BigInt operator/(const BigInt& a, const BigInt& b);
  friend BigInt operator%(const BigInt& a, const BigInt& b);
  static BigInt gcd(BigInt a, BigInt b);  // non-negative
  static BigInt pow(const BigInt& base, uint64_t exponent);

  friend int compare(const BigInt& a, const BigInt& b);  // -1, 0, 1
  friend bool operator==(const BigInt& a, const BigInt& b) { return a.neg_ == b.neg_ && a.mag_ == b.mag_; }
  friend bool operator<(const BigInt& a, const BigInt& b) { return compare(a, b) < 0; }

 private:
  using Limbs = detail::Limbs;
  static int compare_mag(const Limbs& a, const Limbs& b);
  static Limbs add_mag(const Limbs& a, const Limbs& b);
  static Limbs sub_mag(const Limbs& a, const Limbs& b);  // requires |a| >= |b|
  static Limbs mul_mag(const Limbs& a, const Limbs& b);
  static uint32_t divmod_small(Limbs* a, uint32_t d);    // in place, returns the remainder
  static void divmod_mag(const Limbs& a, const Limbs& b, Limbs* q, Limbs* r);
  static void trim(Limbs* a);
  static BigInt make(Limbs mag, bool neg);

  Limbs mag_;
  bool neg_ = false;
};

}  // namespace dapo::reward
