// A flat little-endian-host byte encoding of scalars, arrays and strings,
// the wire format of rollout groups moved between dp ranks (balance.h) by
// Comm::all_to_all_v. Values are copied bit for bit (a float NaN keeps its
// payload), so decode(encode(x)) == x exactly.
//
// Both ends are the same build on the same kind of machine (one job), so
// the encoding is the host's native byte order and type sizes; it is not a
// file format. A truncated or corrupt buffer is a bug of the sender (the
// bytes never come from a user), so the reader fails with DAPO_CHECK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "dapo/core/error.h"

namespace dapo::rl {

template <class T>
concept WireScalar = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// Appends to a growing byte vector.
class ByteWriter {
 public:
  template <WireScalar T>
  void put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  // An element count (int64) followed by the elements.
  template <WireScalar T>
  void put_array(std::span<const T> values) {
    put<int64_t>(int64_t(values.size()));
    const size_t at = bytes_.size();
    bytes_.resize(at + values.size_bytes());
    if (!values.empty()) std::memcpy(bytes_.data() + at, values.data(), values.size_bytes());
  }
  template <WireScalar T>
  void put_array(const std::vector<T>& values) { put_array(std::span<const T>(values)); }
  void put_string(const std::string& s);
  void put_strings(const std::vector<std::string>& v);

  const std::vector<std::byte>& bytes() const { return bytes_; }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

// Reads back what a ByteWriter wrote, in the same order. `what` names the
// payload in failure messages. The buffer must outlive the reader.
class ByteReader {
 public:
  ByteReader(std::span<const std::byte> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  template <WireScalar T>
  T get() {
    need(sizeof(T), "scalar");
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <WireScalar T>
  std::vector<T> get_array() {
    const int64_t n = get<int64_t>();
    DAPO_CHECK(n >= 0 && uint64_t(n) <= (bytes_.size() - pos_) / sizeof(T), what_, ": array of ", n,
               " elements with ", bytes_.size() - pos_, " bytes left");
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), bytes_.data() + pos_, size_t(n) * sizeof(T));
    pos_ += size_t(n) * sizeof(T);
    return v;
  }
  std::string get_string();
  std::vector<std::string> get_strings();

  size_t remaining() const { return bytes_.size() - pos_; }
  // Fails unless every byte was consumed (a length mismatch between the
  // writer and the reader).
  void expect_end() const;

 private:
  void need(size_t n, const char* kind) const;

  std::span<const std::byte> bytes_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace dapo::rl
