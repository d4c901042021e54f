// Throughput of the io module on a synthetic Qwen2 of about P million
// parameters (bf16 HF weights -> fp32 checkpoint). One rank measures the
// model-checkpoint paths; every rank of `mpirun -np N` (tp 1 x dp N, the
// ranks of one node) takes part in the training-checkpoint part:
//   st_read_gb_s     safetensors bf16 -> fp32 conversion from the mapping (page cache)
//   import_mb_s      `import-hf` end to end: read + convert + parallel-HDF5 write + fsync
//   load_mb_s        load_model_checkpoint at tp = 1 (all tensors, fp32)
//   load_tp2_mb_s    the same for one tp rank of 2 (half the data, column/row slices)
//   export_mb_s      `export-hf` f32: HDF5 read + safetensors write + fsync
//   save_mb_s, save_fletcher32_mb_s, load_fletcher32_mb_s
//                    save_model_checkpoint from host buffers without / with a
//                    Fletcher-32 checksum per chunk, and loading the latter
// Training checkpoints (weights + both AdamW moments, 12 bytes a parameter),
// all ranks together, the same state each way:
//   train_shared_file_mb_s   format 2: one parallel-HDF5 file, ZeRO-1 shards
//                            gathered to dp rank 0 (the layout before format 3)
//   train_sharded_mb_s       format 3 (CheckpointSaver, not in the background):
//                            a file per rank + index, at sync_save_s
//   async_save_stall_s       the same save in the background: what the step
//                            waits for (the snapshot to host memory)
//   async_save_total_s       from that start to the commit
//   train_load_mb_s          resume of the sharded checkpoint (digests verified)
//   raw_rank_write_mb_s      every rank write()s + fsyncs its share of the
//                            same bytes to a file of its own: the disk's aggregate
// Baseline for one rank: the same fp32 bytes written with write()+fsync and read back
// with read() (raw_write_mb_s, raw_read_mb_s). Target: import and load at
// least half the raw speed (the HDF5 layer costs little next to the bytes);
// the training save at 0.8 of raw_rank_write_mb_s, the stall at most 0.1 of
// sync_save_s (issue #37).
// MB = 10^6 bytes of fp32 checkpoint data. Needs dapo_io linked in.
//
//   [mpirun -np N] bench_io [million_parameters]   (default 60)
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dapo/core/bf16.h"
#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/model/param_spec.h"
#include "dapo/model/param_store.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/checkpoint_saver.h"
#include "bench/checkpoint_bench.h"

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

// The training-checkpoint part (all ranks, tp 1 x dp N): JSON fields.
std::string training_part(const dapo::model::Qwen2Config& config, const fs::path& dir) {
  using namespace dapo;
  const parallel::Grid grid = parallel::make_grid(1);
  model::ParamStore params(config, 0, 1);
  params.init_random({});
  optim::AdamW opt(params, optim::adamw_options(OptimConfig{}), optim::shard_options(OptimConfig{}, grid.dp));
  return bench::checkpoint_bench(grid, params, opt, dir);
}

}  // namespace

int main(int argc, char** argv) {
  dapo::parallel::Runtime runtime(&argc, &argv);
  const double million = argc > 1 ? std::atof(argv[1]) : 60.0;
  const auto config = make_config(million);
  const auto specs = dapo::model::qwen2_param_specs(config);
  const dapo::parallel::Comm world = dapo::parallel::Comm::world();
  const fs::path dir = dapo::bench::shared_tmp_dir(world, "/tmp/dapo_bench_io");
  if (dir.empty()) return 1;
  try {
    if (world.size() > 1) {  // the ranks of a node: the training-checkpoint part only
      const std::string train = training_part(config, dir);
      if (world.rank() == 0) std::printf("{\"bench\": \"io\", %s}\n", train.c_str());
      world.barrier();
      if (world.rank() == 0) fs::remove_all(dir);
      return 0;
    }
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

    const std::string train = training_part(config, dir);
    std::printf(
        "{\"bench\": \"io\", %s, \"parameters\": %lld, \"layers\": %lld, \"st_read_gb_s\": %.2f, \"import_mb_s\": %.0f, "
        "\"load_mb_s\": %.0f, \"load_tp2_mb_s\": %.0f, \"export_mb_s\": %.0f, \"raw_write_mb_s\": %.0f, "
        "\"raw_read_mb_s\": %.0f, \"save_mb_s\": %.0f, \"save_fletcher32_mb_s\": %.0f, \"load_fletcher32_mb_s\": %.0f, \"target\": \"import_mb_s >= 0.5 * raw_write_mb_s and load_mb_s >= 0.5 * raw_read_mb_s; train_sharded_mb_s >= 0.8 * raw_rank_write_mb_s and async_save_stall_s <= 0.1 * sync_save_s\"}\n",
        train.c_str(), (long long)params, (long long)config.num_hidden_layers, mb / 1e3 / st_s, mb / import_s, mb / load_s,
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
