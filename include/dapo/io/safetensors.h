// HF safetensors files: reading (memory-mapped, one tensor or a row/column
// range of it at a time, converted to fp32 or int64) and writing (files that
// HF's `safetensors` and transformers load), plus sharded models described by
// `model.safetensors.index.json`.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// ..., "__metadata__": {str: str}}, then the data; offsets are relative to
// the first byte after the header; tensors are row-major, little-endian, and
// cover the data exactly (no gaps, no overlap), as HF's loader demands.
//
// Everything a file says is checked against the file before use: a bad
// file is a UserError naming the file and what is wrong with it (and the
// tensor, where one is at fault). Asking for a tensor the file does not have
// is a UserError too: names come from config files. Slices outside a
// tensor's shape are caller bugs (DAPO_CHECK): callers check shapes first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dapo::io {

// Bytes per element of a safetensors dtype ("F32" -> 4); 0 for an unknown one.
size_t safetensors_dtype_size(const std::string& dtype);

struct TensorInfo {
  std::string dtype;           // "F32", "BF16", "F16", "I32", "I64", "U8", ... as in the file
  std::vector<int64_t> shape;  // row-major; {} is a scalar (one element)
  int64_t numel() const;
  std::string shape_string() const;  // "(2, 3)"
};

// One .safetensors file, mapped read-only for the object's lifetime (the OS
// pages in only what is read). Movable, not copyable. Reads may run
// concurrently from several threads.
class SafetensorsFile {
 public:
  // Maps and validates the file. Throws UserError.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data in the file.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Throws UserError if the file has no such tensor.
  const TensorInfo& info(const std::string& name) const;
  // The "__metadata__" map ({} when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The whole tensor as fp32 into out[numel]: F32 copied, BF16 and F16
  // widened (exact, NaN/Inf/subnormals kept). Other dtypes: UserError.
  void read_f32(const std::string& name, float* out) const;
  // Part of a tensor as fp32, row-major into out: for a 2-D tensor (R, C)
  // rows [begin, begin + count) (dim 0, count*C values) or columns
  // [begin, begin + count) of every row (dim 1, R*count values); for a 1-D
  // tensor elements [begin, begin + count) (dim 0). Only those bytes are read.
  void read_f32_slice(const std::string& name, int dim, int64_t begin, int64_t count, float* out) const;
  // The whole tensor as int64 into out[numel]: I64 copied, I32 widened.
  // Other dtypes: UserError.
  void read_i64(const std::string& name, int64_t* out) const;

  // The raw little-endian bytes of a tensor inside the mapping.
  const std::byte* raw(const std::string& name) const;

 private:
  struct Entry {
    TensorInfo info;
    size_t begin = 0;  // byte offsets into the file (header included)
    size_t end = 0;
  };
  const Entry& entry(const std::string& name) const;
  std::string what(const std::string& name) const;  // "path: tensor 'name'"

  std::string path_;
  const std::byte* map_ = nullptr;
  size_t size_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A model's tensors over one or more files: either a single
// `model.safetensors` or the shards named by `model.safetensors.index.json`
// ({"weight_map": {tensor name: shard file name}}; shards relative to the
// index's directory, each mapped once). Movable, not copyable.
class SafetensorsSet {
 public:
  // `dir`/model.safetensors.index.json if it exists, else `dir`/model.safetensors.
  // Throws UserError if neither exists or a file is bad.
  static SafetensorsSet open_dir(const std::string& dir);
  // A sharded set from its index file. Throws UserError for a bad index, a
  // missing shard, or a tensor the index places in a shard that lacks it.
  static SafetensorsSet open_index(const std::string& index_path);
  // One file.
  static SafetensorsSet open_file(const std::string& path);

  // Sorted tensor names (of the index's weight_map, or of the file).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // The file holding a tensor; throws UserError naming the index (or file)
  // if there is none.
  const SafetensorsFile& file_of(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const { return file_of(name).info(name); }
  void read_f32(const std::string& name, float* out) const { file_of(name).read_f32(name, out); }
  void read_f32_slice(const std::string& name, int dim, int64_t begin, int64_t count, float* out) const {
    file_of(name).read_f32_slice(name, dim, begin, count, out);
  }
  void read_i64(const std::string& name, int64_t* out) const { file_of(name).read_i64(name, out); }
  // The index file, or the single file: what error messages name.
  const std::string& origin() const { return origin_; }
  size_t file_count() const { return files_.size(); }

 private:
  std::string origin_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// ---- writing -----------------------------------------------------------------

struct TensorToWrite {
  std::string name;
  std::string dtype;           // any dtype safetensors_dtype_size knows; dapo writes "F32" or "BF16"
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel elements of `dtype`, little-endian; not owned
};

// Streams a safetensors file whose tensor list is known up front (so the
// header can go first) while the data comes one tensor at a time: a model
// larger than memory can be exported tensor by tensor. The file is written
// as `path`.partial and renamed to `path` by finish(), so a crash never
// leaves a half file under the final name.
//
// Layout: tensors ordered by element size, largest first (stable otherwise),
// so every tensor starts at a multiple of its element size once the header
// is padded with spaces to a multiple of 8 bytes. Write errors: UserError
// naming the file.
class SafetensorsWriter {
 public:
  struct Header {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
  };
  // `metadata` goes to "__metadata__"; HF's torch loader wants {"format": "pt"},
  // which is added when `metadata` has no "format".
  SafetensorsWriter(std::string path, std::vector<Header> tensors, std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // without finish(): removes the .partial file
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The tensors in the order write() expects them (the file's order).
  const std::vector<Header>& order() const { return order_; }
  // The data of the next tensor of order() (checked by name):
  // numel * dtype size bytes.
  void write(const std::string& name, const void* data);
  // Flushes, syncs and renames `path`.partial to `path`. Fails (DAPO_CHECK)
  // unless every tensor was written.
  void finish();

 private:
  std::string path_, partial_;
  std::vector<Header> order_;
  size_t next_ = 0;
  int fd_ = -1;
};

// Writes a whole file at once (see SafetensorsWriter). Throws UserError.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace dapo::io
