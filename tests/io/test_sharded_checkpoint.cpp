// Format-3 (sharded) training checkpoints on one rank: the plan covers
// every tensor once over any tp x dp; weights, moments and state round-trip
// exactly and reshard on load; damaged, truncated or missing rank files and
// a refused write are UserErrors naming the file; a save that never
// commits leaves nothing under the checkpoint's name; a stale temporary
// folder is dapo's to remove only when it holds dapo's files alone.
#include "dapo/io/sharded_checkpoint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "dapo/io/tensor_digest.h"
#include "dapo/optim/shard_layout.h"
#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> offsets_of(const model::ParamStore& store) {
  std::vector<int64_t> out;
  for (const auto& e : store.entries()) out.push_back(e.offset);
  return out;
}

// The full-tensor index of element `i` of tp rank `r`'s slice.
int64_t global_index(const model::ParamSpec& spec, const model::SliceSpec& s, int64_t i) {
  if (s.dim < 0) return i;
  const int64_t cols_local = spec.shape.size() == 2 ? s.local_shape[1] : 1;
  int64_t row = spec.shape.size() == 2 ? i / cols_local : i, col = spec.shape.size() == 2 ? i % cols_local : 0;
  if (s.dim == 0) row += s.begin;
  else col += s.begin;
  return spec.shape.size() == 2 ? row * spec.shape[1] + col : row;
}

TEST(ShardedPlan, PiecesCoverEveryTensorOnceOverAnyTpAndDp) {
  for (const bool tied : {false, true}) {
    const model::Qwen2Config config = test::tiny_config(tied);
    const auto specs = model::qwen2_param_specs(config);
    for (const int64_t tp : {1, 2, 4}) {
      for (const int dp : {1, 2, 3}) {
        std::vector<std::vector<int>> hits(specs.size() * 3);
        for (size_t t = 0; t < hits.size(); ++t) hits[t].assign(size_t(elements(specs[t % specs.size()].shape)), 0);
        int64_t rank = 0;
        for (int64_t r = 0; r < tp; ++r) {
          const model::ParamStore store(config, r, tp);
          for (int d = 0; d < dp; ++d, ++rank) {
            const optim::ShardLayout layout(store.buffer_elements(), dp, d, 4096);
            const ShardedSavePlan plan =
                plan_sharded_save(config, ShardPlace{r, tp, d}, rank, offsets_of(store), layout.ranges(), true);
            ASSERT_EQ(plan.tensors.size(), specs.size() * 3);
            int64_t at = 0;
            for (size_t i = 0; i < plan.pieces.size(); ++i) {
              const ShardPiece& p = plan.pieces[i];
              EXPECT_EQ(p.offset, at);  // back to back in /data
              EXPECT_EQ(p.rank, rank);
              at += p.end - p.begin;
              const model::ParamSpec& spec = specs[size_t(p.tensor) % specs.size()];
              const model::SliceSpec slice = model::local_slice(spec, config, r, tp);
              EXPECT_EQ(plan.flat_begin[i], store.entry(spec.name).offset + p.begin);
              for (int64_t e = p.begin; e < p.end; ++e) ++hits[size_t(p.tensor)][size_t(global_index(spec, slice, e))];
            }
            EXPECT_EQ(at, plan.elements);
          }
        }
        for (size_t t = 0; t < hits.size(); ++t)
          for (size_t e = 0; e < hits[t].size(); ++e)
            ASSERT_EQ(hits[t][e], 1) << "tied " << tied << " tp " << tp << " dp " << dp << " tensor " << t
                                     << " element " << e;
      }
    }
  }
}

TEST(ShardedPlan, RangeDigestsAddUpToTheSlab) {
  const std::vector<int64_t> full{12, 10};
  const Hyperslab slab{{2, 3}, {7, 5}};
  std::vector<float> data(35);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(i) * 0.37f - 3.0f;
  const uint64_t whole = slab_digest(full, slab, data.data());
  for (const std::vector<int64_t>& cuts : std::vector<std::vector<int64_t>>{
           {0, 35}, {0, 3, 35}, {0, 5, 10, 35}, {0, 1, 2, 17, 34, 35}, {0, 12, 13, 27}}) {
    uint64_t sum = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      sum += range_digest(full, slab, cuts[i], cuts[i + 1], data.data() + cuts[i]);
    if (cuts.back() == 35) EXPECT_EQ(sum, whole);
    else EXPECT_NE(sum, whole);
  }
  const std::vector<int64_t> vec{20};
  const Hyperslab vslab{{4}, {9}};
  EXPECT_EQ(range_digest(vec, vslab, 0, 4, data.data()) + range_digest(vec, vslab, 4, 9, data.data() + 4),
            slab_digest(vec, vslab, data.data()));
}

CheckpointInfo info_of(const model::Qwen2Config& config) {
  CheckpointInfo info;
  info.step = 7;
  info.config_ini = "[train]\ntotal_steps = 20\n";
  info.model = config;
  info.training = true;
  info.state.optimizer_steps = 13;
  info.state.rng_seed = 0xFEDCBA9876543210ull;
  info.state.data_seed = 3;
  info.state.data_size = 2000;
  info.state.data_epoch = 1;
  info.state.data_position = 144;
  return info;
}

// weights full_tensor, exp_avg = w / 10, exp_avg_sq = |w|, by dataset name.
std::map<std::string, std::vector<float>> want_tensors(const model::Qwen2Config& config) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& spec : model::qwen2_param_specs(config)) {
    const std::vector<float> w = test::full_tensor(spec, true);
    out[model_dataset(spec.name)] = w;
    for (const float x : w) {
      out[exp_avg_dataset(spec.name)].push_back(x / 10);
      out[exp_avg_sq_dataset(spec.name)].push_back(std::abs(x));
    }
  }
  return out;
}

// Saves at tp 1 on this one rank, /data cut into pieces of at most 100
// elements (as a dp split would cut it). Returns the writer's data.
std::vector<float> save(const std::string& path, const parallel::Comm& world, const CheckpointInfo& info) {
  const model::ParamStore store(info.model, 0, 1);
  std::vector<model::ShardRange> ranges;
  for (int64_t b = 0; b < store.buffer_elements(); b += 100)
    ranges.push_back({b, std::min(b + 100, store.buffer_elements()), b});
  const ShardedSavePlan plan = plan_sharded_save(info.model, ShardPlace{}, 0, offsets_of(store), ranges, true);
  const auto want = want_tensors(info.model);
  std::vector<float> data(size_t(plan.elements));
  for (const ShardPiece& p : plan.pieces) {
    const std::vector<float>& t = want.at(plan.tensors[size_t(p.tensor)]);
    std::copy(t.begin() + p.begin, t.begin() + p.end, data.begin() + p.offset);
  }
  ShardedCheckpointWriter writer(path, world, info, plan, info.state.rng_seed);
  writer.write(data.data());
  writer.commit();
  return data;
}

SliceSink sink_into(std::map<std::string, std::vector<float>>& map) {
  return [&map](const model::ParamSpec& spec, const model::SliceSpec& slice) {
    std::vector<float>& v = map[spec.name];
    v.assign(size_t(elements(slice.local_shape)), -1.0f);
    return v.data();
  };
}

TEST(ShardedCheckpoint, RoundTripsExactlyAndReshardsOnLoad) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  for (const bool tied : {false, true}) {
    const CheckpointInfo info = info_of(test::tiny_config(tied));
    const std::string path = dir.file(tied ? "tied" : "untied");
    save(path, world, info);
    EXPECT_TRUE(is_sharded_checkpoint(path));
    EXPECT_FALSE(fs::exists(path + ".partial"));
    EXPECT_TRUE(fs::exists(fs::path(path) / "rank_00000.h5"));
    std::map<std::string, std::vector<float>> w, m, v;
    const CheckpointInfo back = load_training_checkpoint(path, world, 0, 1, sink_into(w), sink_into(m), sink_into(v));
    EXPECT_EQ(back.format_version, kShardedFormatVersion);
    EXPECT_EQ(back.step, 7);
    EXPECT_TRUE(back.training);
    EXPECT_EQ(back.state, info.state);
    EXPECT_EQ(back.tp, 1);
    const auto want = want_tensors(info.model);
    for (const auto& spec : model::qwen2_param_specs(info.model)) {
      EXPECT_EQ(w[spec.name], want.at(model_dataset(spec.name))) << spec.name;
      EXPECT_EQ(m[spec.name], want.at(exp_avg_dataset(spec.name))) << spec.name;
      EXPECT_EQ(v[spec.name], want.at(exp_avg_sq_dataset(spec.name))) << spec.name;
    }
    // Any tp reads its slices (row, column, vocab and replicated KV splits).
    for (const int64_t tp : {2, 4})
      for (int64_t r = 0; r < tp; ++r) {
        std::map<std::string, std::vector<float>> s;
        load_model_checkpoint(path, world, r, tp, sink_into(s));
        for (const auto& spec : model::qwen2_param_specs(info.model))
          EXPECT_EQ(s[spec.name], test::slice_of(spec, model::local_slice(spec, info.model, r, tp),
                                                 want.at(model_dataset(spec.name))))
              << spec.name << " tp " << tp << " rank " << r;
      }
    // The digests stored are format 2's: the same full-tensor digests.
    const CheckpointReader reader(path, world);
    for (const auto& spec : model::qwen2_param_specs(info.model)) {
      uint64_t d = 0;
      ASSERT_TRUE(reader.stored_digest(exp_avg_dataset(spec.name), &d));
      const std::vector<float>& t = want.at(exp_avg_dataset(spec.name));
      EXPECT_EQ(d, slab_digest(spec.shape, Hyperslab::whole(spec.shape), t.data())) << spec.name;
    }
  }
}

// The first value of /data in a rank file, overwritten in place.
void poke(const std::string& rank_file, float value) {
  const int64_t offset = H5File::open_local(rank_file).data_offset("/data");
  std::fstream f(rank_file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST(ShardedCheckpoint, DamagedTruncatedOrMissingRankFilesAreNamed) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = info_of(test::tiny_config(false));
  std::map<std::string, std::vector<float>> w, m, v;
  auto load = [&](const std::string& path) {
    load_training_checkpoint(path, world, 0, 1, sink_into(w), sink_into(m), sink_into(v));
  };
  const std::string good = dir.file("good");
  save(good, world, info);
  EXPECT_EQ(error_of([&] { load(good); }), "");

  const std::string changed = dir.file("changed");
  fs::copy(good, changed);
  poke((fs::path(changed) / "rank_00000.h5").string(), 12345.0f);
  EXPECT_NE(error_of([&] { load(changed); }).find("does not match its stored digest (the file is damaged)"),
            std::string::npos);

  const std::string cut = dir.file("cut");
  fs::copy(good, cut);
  const std::string cut_file = (fs::path(cut) / "rank_00000.h5").string();
  fs::resize_file(cut_file, fs::file_size(cut_file) / 2);
  EXPECT_NE(error_of([&] { load(cut); }).find(cut_file + ": "), std::string::npos) << error_of([&] { load(cut); });
  // Cut inside the data only (the HDF5 metadata whole): the same, named.
  const std::string short_data = dir.file("short_data");
  fs::copy(good, short_data);
  const std::string short_file = (fs::path(short_data) / "rank_00000.h5").string();
  {
    // A file that HDF5 still opens, with fewer bytes than /data needs.
    const int64_t offset = H5File::open_local(short_file).data_offset("/data");
    std::vector<char> head(size_t(offset) + 8);
    std::ifstream in(short_file, std::ios::binary);
    in.read(head.data(), std::streamsize(head.size()));
    in.close();
    std::ofstream out(short_file, std::ios::binary | std::ios::trunc);
    out.write(head.data(), std::streamsize(head.size()));
  }
  EXPECT_NE(error_of([&] { load(short_data); }).find(short_file + ": "), std::string::npos)
      << error_of([&] { load(short_data); });

  const std::string gone = dir.file("gone");
  fs::copy(good, gone);
  fs::remove(fs::path(gone) / "rank_00000.h5");
  EXPECT_NE(error_of([&] { load(gone); }).find((fs::path(gone) / "rank_00000.h5").string() + ": no such file"),
            std::string::npos)
      << error_of([&] { load(gone); });

  // The index alone is not a checkpoint: the folder is.
  EXPECT_NE(error_of([&] { CheckpointReader((fs::path(good) / "index.h5").string(), world); })
                .find("give the folder that holds it and its rank files"),
            std::string::npos);
}

// One rank's plan at tp 1 x dp 1: the whole buffer.
ShardedSavePlan whole_buffer_plan(const CheckpointInfo& info) {
  const model::ParamStore store(info.model, 0, 1);
  const std::vector<model::ShardRange> all{{0, store.buffer_elements(), 0}};
  return plan_sharded_save(info.model, ShardPlace{}, 0, offsets_of(store), all, true);
}

TEST(ShardedCheckpoint, ASaveNeverCommittedLeavesNothing) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = info_of(test::tiny_config(false));
  const ShardedSavePlan plan = whole_buffer_plan(info);
  const std::vector<float> data(size_t(plan.elements), 0.5f);
  {
    ShardedCheckpointWriter writer(dir.file("step_1"), world, info, plan, 1);
    writer.write(data.data());
    EXPECT_TRUE(fs::is_directory(dir.file("step_1.partial")));
  }  // a crash before the commit, or an error: no checkpoint, no temporary
  EXPECT_FALSE(fs::exists(dir.file("step_1")));
  EXPECT_FALSE(fs::exists(dir.file("step_1.partial")));

  // A killed save's folder is removed by the next save of that step...
  fs::create_directory(dir.file("step_2.partial"));
  test::write_text(dir.file("step_2.partial/rank_00000.h5"), "half a file");
  save(dir.file("step_2"), world, info);
  EXPECT_TRUE(is_sharded_checkpoint(dir.file("step_2")));
  EXPECT_FALSE(fs::exists(dir.file("step_2.partial")));
  // ...unless it holds something dapo does not write.
  fs::create_directory(dir.file("step_3.partial"));
  test::write_text(dir.file("step_3.partial/notes.txt"), "mine");
  EXPECT_NE(error_of([&] { save(dir.file("step_3"), world, info); }).find("notes.txt, which dapo does not write"),
            std::string::npos);
  EXPECT_EQ(test::read_text(dir.file("step_3.partial/notes.txt")), "mine");
  // A folder under a dapo file name is not dapo's file either: kept whole.
  fs::create_directories(dir.file("step_4.partial/rank_00000.h5"));
  test::write_text(dir.file("step_4.partial/rank_00000.h5/kept.txt"), "mine");
  EXPECT_NE(error_of([&] { save(dir.file("step_4"), world, info); }).find("rank_00000.h5, which dapo does not write"),
            std::string::npos);
  EXPECT_EQ(test::read_text(dir.file("step_4.partial/rank_00000.h5/kept.txt")), "mine");

  // A checkpoint of the same step is replaced whole.
  CheckpointInfo later = info;
  later.state.optimizer_steps = 99;
  save(dir.file("step_2"), world, later);
  EXPECT_EQ(CheckpointReader(dir.file("step_2"), world).info().state.optimizer_steps, 99);
  EXPECT_FALSE(fs::exists(dir.file("step_2.replaced")));
}

TEST(ShardedCheckpoint, RefusedWritesFailOnEveryPathAndLeaveNoFolder) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = info_of(test::tiny_config(false));
  const ShardedSavePlan plan = whole_buffer_plan(info);
  const std::vector<float> data(size_t(plan.elements), 0.5f);
  {
    // The rank file's space is allocated when it is made: a file-size
    // limit (as a full disk) refuses it there.
    test::FileSizeLimit limit(4096);
    if (limit.ok()) {
      const std::string error = error_of([&] { ShardedCheckpointWriter(dir.file("step_1"), world, info, plan, 1); });
      EXPECT_NE(error.find(dir.file("step_1.partial/rank_00000.h5") + ": "), std::string::npos) << error;
      EXPECT_NE(error.find("bytes free"), std::string::npos) << error;
      EXPECT_FALSE(fs::exists(dir.file("step_1.partial")));
    }
  }
  // A write that fails (here: the file replaced by a folder) is raised by
  // the commit, on every rank, and the temporary folder goes.
  ShardedCheckpointWriter writer(dir.file("step_1"), world, info, plan, 1);
  fs::remove(dir.file("step_1.partial/rank_00000.h5"));
  fs::create_directory(dir.file("step_1.partial/rank_00000.h5"));
  writer.write(data.data());
  const std::string error = error_of([&] { writer.commit(); });
  EXPECT_NE(error.find(dir.file("step_1.partial/rank_00000.h5") + ": cannot open to write"), std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(dir.file("step_1.partial")));
  EXPECT_FALSE(fs::exists(dir.file("step_1")));
}

}  // namespace
}  // namespace dapo::io
