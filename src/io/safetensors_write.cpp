// Writing safetensors files that HF's loader accepts: header first (padded
// to 8 bytes), then the data back to back, largest elements first so every
// tensor is aligned to its element size; written to `.partial` and renamed.
#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "dapo/core/error.h"
#include "dapo/io/file_sync.h"
#include "dapo/io/safetensors.h"

namespace dapo::io {
namespace {

size_t bytes_of(const SafetensorsWriter::Header& h) {
  size_t n = safetensors_dtype_size(h.dtype);
  for (const int64_t d : h.shape) n *= size_t(d);
  return n;
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw UserError(cat(path, ": cannot write: ", std::strerror(w < 0 ? errno : EIO)));
    p += w;
    n -= size_t(w);
  }
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<Header> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), partial_(path_ + ".partial"), order_(std::move(tensors)) {
  std::set<std::string> seen;
  for (const auto& t : order_) {
    DAPO_CHECK(safetensors_dtype_size(t.dtype) != 0, "safetensors writer: unknown dtype '", t.dtype, "' of ", t.name);
    DAPO_CHECK(!t.name.empty() && t.name != "__metadata__" && seen.insert(t.name).second,
               "safetensors writer: bad or repeated tensor name '", t.name, "'");
    for (const int64_t d : t.shape) DAPO_CHECK(d >= 0, "safetensors writer: ", t.name, " has a negative dimension");
  }
  std::stable_sort(order_.begin(), order_.end(), [](const Header& a, const Header& b) {
    return safetensors_dtype_size(a.dtype) > safetensors_dtype_size(b.dtype);
  });
  if (!metadata.count("format")) metadata["format"] = "pt";
  nlohmann::ordered_json h;
  h["__metadata__"] = metadata;
  size_t at = 0;
  for (const auto& t : order_) {
    const size_t n = bytes_of(t);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();  // little-endian host (checked in safetensors_read.cpp)
  fd_ = create_temporary(partial_, "safetensors file", 0644);  // fresh: never through a stale symlink
  try {
    write_all(fd_, &len, 8, partial_);
    write_all(fd_, text.data(), text.size(), partial_);
  } catch (...) {
    ::close(fd_);
    ::unlink(partial_.c_str());
    fd_ = -1;
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(partial_.c_str());
  }
}

void SafetensorsWriter::write(const std::string& name, const void* data) {
  DAPO_CHECK(fd_ >= 0 && next_ < order_.size() && order_[next_].name == name, "safetensors writer: got '", name,
             "', expected ", next_ < order_.size() ? order_[next_].name : std::string("no more tensors"));
  write_all(fd_, data, bytes_of(order_[next_]), partial_);
  ++next_;
}

void SafetensorsWriter::finish() {
  DAPO_CHECK(fd_ >= 0 && next_ == order_.size(), "safetensors writer: finish() after ", next_, " of ", order_.size(),
             " tensors");
  if (::fsync(fd_) != 0) throw UserError(cat(partial_, ": cannot sync: ", std::strerror(errno)));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    ::unlink(partial_.c_str());
    throw UserError(cat(partial_, ": cannot close: ", std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec) throw UserError(cat(path_, ": cannot rename ", partial_, " to it: ", ec.message()));
  // The rename itself reaches the disk with the directory.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Header> headers;
  std::map<std::string, const void*> data;
  for (const auto& t : tensors) {
    headers.push_back({t.name, t.dtype, t.shape});
    data[t.name] = t.data;
  }
  SafetensorsWriter w(path, std::move(headers), metadata);
  for (const auto& h : w.order()) w.write(h.name, data.at(h.name));
  w.finish();
}

}  // namespace dapo::io
