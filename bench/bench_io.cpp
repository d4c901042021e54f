// Throughput of the io module on one rank and one core, on a synthetic Qwen2
// of about P million parameters (bf16 HF weights -> fp32 checkpoint):
//   st_read_gb_s     safetensors bf16 -> fp32 conversion from the mapping (page cache)
//   import_mb_s      `import-hf` end to end: read + convert + parallel-HDF5 write + fsync
//   load_mb_s        load_model_checkpoint at tp = 1 (all tensors, fp32)
//   load_tp2_mb_s    the same for one tp rank of 2 (half the data, column/row slices)
//   export_mb_s      `export-hf` f32: HDF5 read + safetensors write + fsync
//   save_mb_s, save_fletcher32_mb_s, load_fletcher32_mb_s
//                    save_model_checkpoint from host buffers without / with a
//                    Fletcher-32 checksum per chunk, and loading the latter
// Baseline: the same fp32 bytes written with write()+fsync and read back
// with read() (raw_write_mb_s, raw_read_mb_s). Target: import and load at
// least half the raw speed (the HDF5 layer costs little next to the bytes).
// MB = 10^6 bytes of fp32 checkpoint data. Needs dapo_io linked in.
//
//   bench_io [million_parameters]   (default 60)
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dapo/core/bf16.h"
#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/model/param_spec.h"
#include "dapo/parallel/runtime.h"

namespace {

using dapo::Clock;
using dapo::seconds_since;

namespace fs = std::filesystem;

dapo::model::Qwen2Config make_config(double million) {
  dapo::model::Qwen2Config c;
  c.vocab_size = 8192;
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  const double per_layer = 11.3e6, fixed = 2.0 * 8192 * 1024;
  c.num_hidden_layers = std::max<int64_t>(1, int64_t((million * 1e6 - fixed) / per_layer + 0.5));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  dapo::parallel::Runtime runtime(&argc, &argv);
  const double million = argc > 1 ? std::atof(argv[1]) : 60.0;
  const auto config = make_config(million);
  const auto specs = dapo::model::qwen2_param_specs(config);
  char tmpl[] = "/tmp/dapo_bench_io_XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const fs::path dir = tmpl;
  try {
    const dapo::parallel::Comm world = dapo::parallel::Comm::world();
    // HF directory: bf16 weights with varied values.
    int64_t params = 0;
    std::vector<std::vector<dapo::bf16>> data;
    std::vector<dapo::io::TensorToWrite> tensors;
    for (const auto& s : specs) {
      int64_t n = 1;
      for (const int64_t d : s.shape) n *= d;
      params += n;
      data.emplace_back(size_t(n));
      for (int64_t i = 0; i < n; ++i) data.back()[size_t(i)] = dapo::to_bf16(float((i * 2654435761u) % 10007) * 1e-4f - 0.5f);
    }
    for (size_t i = 0; i < specs.size(); ++i) tensors.push_back({specs[i].name, "BF16", specs[i].shape, data[i].data()});
    fs::create_directories(dir / "hf");
    {
      std::FILE* f = std::fopen((dir / "hf" / "config.json").c_str(), "w");
      std::fputs(dapo::model::qwen2_config_to_json(config).c_str(), f);
      std::fclose(f);
    }
    dapo::io::write_safetensors((dir / "hf" / "model.safetensors").string(), tensors);
    data.clear();
    const double mb = double(params) * 4 / 1e6;

    // Conversion from the mapping.
    const auto set = dapo::io::SafetensorsSet::open_dir((dir / "hf").string());
    std::vector<float> buf;
    auto t0 = Clock::now();
    for (const auto& s : specs) {
      buf.resize(size_t(set.info(s.name).numel()));
      set.read_f32(s.name, buf.data());
    }
    const double st_s = seconds_since(t0);

    t0 = Clock::now();
    dapo::io::import_hf((dir / "hf").string(), (dir / "c.h5").string(), world);
    const double import_s = seconds_since(t0);

    // Buffers are allocated and touched before the clock starts, as a
    // model's parameter buffer would be.
    auto load = [&](int64_t rank, int64_t tp) {
      std::vector<std::vector<float>> out;
      for (const auto& s : specs) {
        int64_t n = 1;
        for (const int64_t d : dapo::model::local_slice(s, config, rank, tp).local_shape) n *= d;
        out.emplace_back(size_t(n), 0.0f);
      }
      size_t next = 0;
      const auto start = Clock::now();
      dapo::io::load_model_checkpoint((dir / "c.h5").string(), world, rank, tp,
                                      [&](const dapo::model::ParamSpec&, const dapo::model::SliceSpec&) {
                                        return out[next++].data();
                                      });
      return seconds_since(start);
    };
    const double load_s = load(0, 1);
    const double load_tp2_s = load(1, 2);

    // save_model_checkpoint from host buffers (what the trainer will do),
    // plain and with Fletcher-32 per chunk; then loading the checksummed one.
    std::vector<std::vector<float>> host;
    for (const auto& s : specs) host.emplace_back(size_t(set.info(s.name).numel()), 0.25f);
    auto save = [&](const std::string& name, bool fletcher) {
      dapo::io::CheckpointInfo info;
      info.model = config;
      dapo::io::DatasetOptions options;
      options.fletcher32 = fletcher;
      size_t next = 0;
      const auto start = Clock::now();
      dapo::io::save_model_checkpoint((dir / name).string(), world, dapo::io::ShardPlace{}, info,
                                      [&](const dapo::model::ParamSpec&, const dapo::model::SliceSpec&) {
                                        return host[next++].data();
                                      },
                                      options);
      return seconds_since(start);
    };
    const double save_s = save("plain.h5", false);
    const double save_sum_s = save("sum.h5", true);
    fs::rename(dir / "sum.h5", dir / "c.h5");
    const double load_sum_s = load(0, 1);

    t0 = Clock::now();
    dapo::io::export_hf((dir / "c.h5").string(), (dir / "out").string(), dapo::io::ExportDtype::f32, world);
    const double export_s = seconds_since(t0);

    // Baseline: the same number of fp32 bytes, in tensor-sized writes.
    std::vector<float> raw(size_t(std::max<int64_t>(1, params / int64_t(specs.size()) * 4)), 0.5f);
    const std::string raw_path = (dir / "raw.bin").string();
    t0 = Clock::now();
    {
      const int fd = ::open(raw_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int64_t left = params * 4;
      while (left > 0) {
        const ssize_t w = ::write(fd, raw.data(), size_t(std::min<int64_t>(left, int64_t(raw.size() * 4))));
        if (w <= 0) return 1;
        left -= w;
      }
      ::fsync(fd);
      ::close(fd);
    }
    const double raw_write_s = seconds_since(t0);
    t0 = Clock::now();
    {
      const int fd = ::open(raw_path.c_str(), O_RDONLY);
      while (::read(fd, raw.data(), raw.size() * 4) > 0) {
      }
      ::close(fd);
    }
    const double raw_read_s = seconds_since(t0);

    std::printf(
        "{\"bench\": \"io\", \"parameters\": %lld, \"layers\": %lld, \"st_read_gb_s\": %.2f, \"import_mb_s\": %.0f, "
        "\"load_mb_s\": %.0f, \"load_tp2_mb_s\": %.0f, \"export_mb_s\": %.0f, \"raw_write_mb_s\": %.0f, "
        "\"raw_read_mb_s\": %.0f, \"save_mb_s\": %.0f, \"save_fletcher32_mb_s\": %.0f, \"load_fletcher32_mb_s\": %.0f, \"target\": \"import_mb_s >= 0.5 * raw_write_mb_s and load_mb_s >= 0.5 * raw_read_mb_s\"}\n",
        (long long)params, (long long)config.num_hidden_layers, mb / 1e3 / st_s, mb / import_s, mb / load_s,
        mb / 2 / load_tp2_s, mb / export_s, mb / raw_write_s, mb / raw_read_s, mb / save_s, mb / save_sum_s,
        mb / load_sum_s);
  } catch (const dapo::UserError& e) {
    std::fprintf(stderr, "bench_io: %s\n", e.what());
    fs::remove_all(dir);
    return 2;
  }
  fs::remove_all(dir);
  return 0;
}
