// Reading safetensors files: map, validate the header against the file, and
// convert tensors (or row/column ranges of them) to fp32 or int64.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "dapo/core/bf16.h"
#include "dapo/core/error.h"
#include "dapo/io/safetensors.h"

namespace dapo::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so must the host be");

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

namespace {

using nlohmann::json;

// IEEE half -> float; every half value is exactly representable.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // 112 = 127 - 15
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: mant * 2^-24; normalise so the leading one becomes implicit.
    int e = -14;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --e;
    }
    bits = sign | (uint32_t(e + 127) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// n elements of `dtype` at src (any alignment) -> fp32. Caller checked dtype.
void to_f32(const std::string& dtype, const std::byte* src, int64_t n, float* out) {
  if (dtype == "F32") {
    std::memcpy(out, src, size_t(n) * 4);
  } else if (dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      bf16 b;
      std::memcpy(&b.bits, src + 2 * i, 2);
      out[i] = to_f32(b);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = f16_to_f32(h);
    }
  }
}

// Shape dims are non-negative and their product (times the element size)
// must fit: a header may claim anything.
bool checked_bytes(const std::vector<int64_t>& shape, size_t esize, size_t* bytes) {
  unsigned __int128 n = esize;
  for (const int64_t d : shape) {
    n *= uint64_t(d);
    if (n > std::numeric_limits<int64_t>::max()) return false;
  }
  *bytes = size_t(n);
  return true;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(cat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(cat(path, ": not a regular file"));
  }
  size_ = size_t(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw UserError(cat(path, ": not a safetensors file: ", size_, " bytes, too short for the 8-byte header length"));
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (m == MAP_FAILED) throw UserError(cat(path, ": cannot map the file: ", std::strerror(errno)));
  map_ = static_cast<const std::byte*>(m);
  try {
    uint64_t n = 0;
    std::memcpy(&n, map_, 8);
    // HF's loader refuses headers over 100 MB; a larger value means this is
    // not a safetensors file (or its first bytes are damaged).
    if (n > 100'000'000) throw UserError(cat(path, ": not a safetensors file: header length ", n, " is implausible"));
    if (n > size_ - 8)
      throw UserError(cat(path, ": truncated: the header needs ", n + 8, " bytes but the file has ", size_));
    const size_t data0 = 8 + size_t(n), data_size = size_ - data0;
    json h;
    try {
      h = json::parse(reinterpret_cast<const char*>(map_ + 8), reinterpret_cast<const char*>(map_ + data0));
    } catch (const json::exception& e) {
      throw UserError(cat(path, ": the header is not valid JSON: ", e.what()));
    }
    if (!h.is_object()) throw UserError(cat(path, ": the header is not a JSON object"));
    std::vector<std::pair<size_t, std::string>> by_offset;
    for (const auto& [name, v] : h.items()) {
      if (name == "__metadata__") {
        if (!v.is_object()) throw UserError(cat(path, ": __metadata__ is not an object"));
        for (const auto& [k, s] : v.items()) {
          if (!s.is_string()) throw UserError(cat(path, ": __metadata__ value of '", k, "' is not a string"));
          metadata_[k] = s.get<std::string>();
        }
        continue;
      }
      const std::string where = cat(path, ": tensor '", name, "'");
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
        throw UserError(cat(where, ": needs dtype, shape and data_offsets"));
      Entry e;
      if (!v["dtype"].is_string()) throw UserError(cat(where, ": dtype is not a string"));
      e.info.dtype = v["dtype"].get<std::string>();
      const size_t esize = safetensors_dtype_size(e.info.dtype);
      if (esize == 0) throw UserError(cat(where, ": unknown dtype '", e.info.dtype, "'"));
      const json& shape = v["shape"];
      if (!shape.is_array()) throw UserError(cat(where, ": shape is not a list"));
      for (const auto& d : shape) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 62))
          throw UserError(cat(where, ": shape ", shape.dump(), " has a negative, non-integer or huge entry"));
        e.info.shape.push_back(int64_t(d.get<uint64_t>()));
      }
      const json& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
          off[0].get<uint64_t>() > off[1].get<uint64_t>())
        throw UserError(cat(where, ": data_offsets ", off.dump(), " is not [begin, end] with begin <= end"));
      const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
      size_t bytes = 0;
      const bool fits = checked_bytes(e.info.shape, esize, &bytes);
      if (!fits || bytes != end - b)
        throw UserError(cat(where, ": data_offsets ", off.dump(), " hold ", end - b, " bytes but ", e.info.dtype, " ",
                            e.info.shape_string(), " needs ", fits ? cat(bytes) : std::string("more than 2^63")));
      if (end > data_size)
        throw UserError(cat(path, ": truncated: tensor '", name, "' ends at data byte ", end, " but the file has ",
                            data_size, " bytes of data (", size_, " in all)"));
      e.begin = data0 + size_t(b);
      e.end = data0 + size_t(end);
      by_offset.emplace_back(size_t(b), name);
      entries_.emplace(name, std::move(e));
    }
    // The data must be exactly the tensors, back to back: HF's loader
    // refuses anything else, and a gap usually means a damaged header.
    std::sort(by_offset.begin(), by_offset.end());
    size_t at = 0;
    for (const auto& [b, name] : by_offset) {
      if (b != at)
        throw UserError(cat(path, ": tensor '", name, "' starts at data byte ", b, " but the previous one ends at ", at,
                            b > at ? " (a gap)" : " (overlapping data)"));
      at = entries_.at(name).end - data0;
      names_.push_back(name);
    }
    if (at != data_size)
      throw UserError(cat(path, ": ", data_size - at, " bytes after the last tensor (damaged, or not a safetensors file)"));
  } catch (...) {
    ::munmap(const_cast<std::byte*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      names_(std::move(o.names_)),
      entries_(std::move(o.entries_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    names_ = std::move(o.names_);
    entries_ = std::move(o.entries_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

std::string SafetensorsFile::what(const std::string& name) const { return cat(path_, ": tensor '", name, "'"); }

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw UserError(cat(path_, ": no tensor '", name, "'"));
  return it->second;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const { return entry(name).info; }

const std::byte* SafetensorsFile::raw(const std::string& name) const { return map_ + entry(name).begin; }

namespace {
bool is_float(const std::string& d) { return d == "F32" || d == "BF16" || d == "F16"; }
}  // namespace

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  const Entry& e = entry(name);
  if (!is_float(e.info.dtype))
    throw UserError(cat(what(name), ": dtype ", e.info.dtype, " cannot be read as fp32 (F32, BF16 or F16 expected)"));
  to_f32(e.info.dtype, map_ + e.begin, e.info.numel(), out);
}

void SafetensorsFile::read_f32_slice(const std::string& name, int dim, int64_t begin, int64_t count, float* out) const {
  const Entry& e = entry(name);
  if (!is_float(e.info.dtype))
    throw UserError(cat(what(name), ": dtype ", e.info.dtype, " cannot be read as fp32 (F32, BF16 or F16 expected)"));
  const auto& s = e.info.shape;
  DAPO_CHECK((s.size() == 1 || s.size() == 2) && (dim == 0 || (dim == 1 && s.size() == 2)), what(name), " shape ",
             e.info.shape_string(), ": no slice along dim ", dim);
  DAPO_CHECK(begin >= 0 && count >= 0 && begin + count <= s[size_t(dim)], what(name), " shape ", e.info.shape_string(),
             ": slice [", begin, ", ", begin + count, ") of dim ", dim);
  const size_t es = safetensors_dtype_size(e.info.dtype);
  const std::byte* base = map_ + e.begin;
  const int64_t cols = s.size() == 2 ? s[1] : 1;
  if (dim == 0) {
    to_f32(e.info.dtype, base + size_t(begin * cols) * es, count * cols, out);
  } else {
    for (int64_t r = 0; r < s[0]; ++r) to_f32(e.info.dtype, base + size_t(r * cols + begin) * es, count, out + r * count);
  }
}

void SafetensorsFile::read_i64(const std::string& name, int64_t* out) const {
  const Entry& e = entry(name);
  const int64_t n = e.info.numel();
  const std::byte* src = map_ + e.begin;
  if (e.info.dtype == "I64") {
    std::memcpy(out, src, size_t(n) * 8);
  } else if (e.info.dtype == "I32") {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    }
  } else {
    throw UserError(cat(what(name), ": dtype ", e.info.dtype, " cannot be read as int64 (I64 or I32 expected)"));
  }
}

}  // namespace dapo::io
