// Helpers of the io tests: a temporary directory, tiny Qwen2 configurations,
// deterministic tensor values, and tiny HF model directories written with
// our safetensors writer (single file or sharded with an index).
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "dapo/core/bf16.h"
#include "dapo/core/error.h"
#include "dapo/io/safetensors.h"
#include "dapo/model/param_spec.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::test {

namespace fs = std::filesystem;

// While it lives, writes that would make a file larger than `bytes` fail
// (write() returns EFBIG, SIGXFSZ ignored) as they would on a full disk;
// the old limit and handler come back with its end. ok() is false when the
// limit could not be set (a hard limit below it).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(size_t bytes) {
    if (getrlimit(RLIMIT_FSIZE, &old_) != 0) return;
    if (old_.rlim_max != RLIM_INFINITY && old_.rlim_max < rlim_t(bytes)) return;
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_;
    small.rlim_cur = rlim_t(bytes);
    ok_ = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    if (!ok_) return;
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  struct rlimit old_ {};
  void (*handler_)(int) = SIG_DFL;
  bool ok_ = false;
};

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dapo_io_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The message of the UserError that f throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// A tiny Qwen2 (GQA: 4 heads, 2 KV heads, head_dim 4; 2 layers) that splits
// over tp = 1, 2 and 4 (tp = 4 replicates KV heads).
inline std::string tiny_config_json(bool tied) {
  return std::string(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 32,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "hidden_act": "silu", "use_sliding_window": false, "eos_token_id": 3, "bos_token_id": 1,
    "torch_dtype": "bfloat16", "tie_word_embeddings": )") +
         (tied ? "true" : "false") + "}";
}
inline model::Qwen2Config tiny_config(bool tied) { return model::parse_qwen2_config(tiny_config_json(tied), "tiny"); }

// A deterministic value for element i of tensor `name`: varied, signed, not
// a small integer, and exactly representable in bf16 (so every dtype
// round-trips exactly) unless `any_f32`.
inline float value_of(const std::string& name, int64_t i, bool any_f32 = false) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  h ^= uint64_t(i) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  const float v = (float(h % 200001) - 100000.0f) / 65536.0f;
  return any_f32 ? v * 1.0001f : to_f32(to_bf16(v));
}

inline std::vector<float> full_tensor(const model::ParamSpec& spec, bool any_f32 = false) {
  int64_t n = 1;
  for (const int64_t d : spec.shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value_of(spec.name, i, any_f32);
  return v;
}

// The part of a full tensor that `slice` describes, row-major.
inline std::vector<float> slice_of(const model::ParamSpec& spec, const model::SliceSpec& s, const std::vector<float>& full) {
  if (s.dim < 0) return full;
  const int64_t rows = spec.shape[0], cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
  std::vector<float> out;
  if (s.dim == 0) {
    out.assign(full.begin() + s.begin * cols, full.begin() + (s.begin + s.count) * cols);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      out.insert(out.end(), full.begin() + r * cols + s.begin, full.begin() + r * cols + s.begin + s.count);
  }
  return out;
}

// Tensors of an HF dir: dtype per tensor, values from value_of().
struct HfTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline HfTensor make_hf_tensor(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape) {
  HfTensor t{name, dtype, shape, {}};
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  t.bytes.resize(size_t(n) * io::safetensors_dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = value_of(name, i);
    if (dtype == "F32") {
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else if (dtype == "BF16") {
      const bf16 b = to_bf16(v);
      std::memcpy(t.bytes.data() + 2 * i, &b.bits, 2);
    } else if (dtype == "I32") {
      const int32_t x = int32_t(i);
      std::memcpy(t.bytes.data() + 4 * i, &x, 4);
    } else {
      throw std::runtime_error("make_hf_tensor: dtype " + dtype);
    }
  }
  return t;
}

// The tensors of a tiny HF model: 2-D weights in BF16, 1-D ones in F32 (as a
// mixed-precision save might), plus a rotary inv_freq buffer as older
// transformers saved it. `drop` leaves a tensor out; `dtype_of` overrides.
inline std::vector<HfTensor> tiny_hf_tensors(const model::Qwen2Config& c, const std::string& drop = "",
                                              const std::map<std::string, std::string>& dtype_of = {},
                                              const std::map<std::string, std::vector<int64_t>>& shape_of = {}) {
  std::vector<HfTensor> out;
  for (const auto& spec : model::qwen2_param_specs(c)) {
    if (spec.name == drop) continue;
    std::string dtype = spec.shape.size() == 2 ? "BF16" : "F32";
    if (dtype_of.count(spec.name)) dtype = dtype_of.at(spec.name);
    const auto shape = shape_of.count(spec.name) ? shape_of.at(spec.name) : spec.shape;
    out.push_back(make_hf_tensor(spec.name, dtype, shape));
  }
  out.push_back(make_hf_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {c.head_dim / 2}));
  return out;
}

inline void write_tensors(const std::string& path, const std::vector<HfTensor>& tensors) {
  std::vector<io::TensorToWrite> w;
  for (const auto& t : tensors) w.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  io::write_safetensors(path, w);
}

// config.json + model.safetensors, or (shards > 1) model-0000i-of-0000n
// .safetensors files with model.safetensors.index.json.
inline void write_hf_dir(const fs::path& dir, const std::string& config_json, const std::vector<HfTensor>& tensors,
                         int shards = 1) {
  fs::create_directories(dir);
  write_text((dir / "config.json").string(), config_json);
  if (shards == 1) {
    write_tensors((dir / "model.safetensors").string(), tensors);
    return;
  }
  std::string index = R"({"metadata": {"total_size": 0}, "weight_map": {)";
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<HfTensor> part;
    for (size_t i = size_t(s); i < tensors.size(); i += size_t(shards)) {
      part.push_back(tensors[i]);
      index += std::string(index.back() == '{' ? "" : ", ") + "\"" + tensors[i].name + "\": \"" + name + "\"";
    }
    write_tensors((dir / name).string(), part);
  }
  write_text((dir / "model.safetensors.index.json").string(), index + "}}");
}

}  // namespace dapo::test
