// Strings and bounds checks of the byte codec (byte_codec.h).
#include "dapo/rl/byte_codec.h"

namespace dapo::rl {

void ByteWriter::put_string(const std::string& s) {
  put_array(std::span<const char>(s.data(), s.size()));
}

void ByteWriter::put_strings(const std::vector<std::string>& v) {
  put<int64_t>(int64_t(v.size()));
  for (const std::string& s : v) put_string(s);
}

std::string ByteReader::get_string() {
  const std::vector<char> chars = get_array<char>();
  return std::string(chars.begin(), chars.end());
}

std::vector<std::string> ByteReader::get_strings() {
  const int64_t n = get<int64_t>();
  // Each string takes at least its 8-byte length.
  DAPO_CHECK(n >= 0 && uint64_t(n) <= remaining() / sizeof(int64_t), what_, ": ", n, " strings with ",
             remaining(), " bytes left");
  std::vector<std::string> v;
  v.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) v.push_back(get_string());
  return v;
}

void ByteReader::need(size_t n, const char* kind) const {
  DAPO_CHECK(n <= bytes_.size() - pos_, what_, ": a ", kind, " of ", n, " bytes with ", bytes_.size() - pos_,
             " bytes left");
}

void ByteReader::expect_end() const {
  DAPO_CHECK(pos_ == bytes_.size(), what_, ": ", bytes_.size() - pos_, " bytes left after the last field");
}

}  // namespace dapo::rl
