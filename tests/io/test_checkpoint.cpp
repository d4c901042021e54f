// Model checkpoints on one rank: the root attributes, bit-exact round trips,
// reading a tp slice (resharding is loading with another tp), atomic saves,
// and every bad-input message.
#include "dapo/io/checkpoint.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

CheckpointInfo tiny_info(bool tied) {
  CheckpointInfo info;
  info.step = 17;
  info.config_ini = "[rollout]\nn = 4\n";
  info.model = test::tiny_config(tied);
  return info;
}

// Saves the deterministic full tensors of `info.model` at tp = 1.
void save_full(const std::string& path, const parallel::Comm& comm, const CheckpointInfo& info,
               const DatasetOptions& options = {}) {
  std::map<std::string, std::vector<float>> full;
  save_model_checkpoint(path, comm, ShardPlace{}, info,
                        [&](const model::ParamSpec& spec, const model::SliceSpec& slice) {
                          EXPECT_EQ(slice.local_shape, spec.shape) << spec.name;
                          return (full[spec.name] = test::full_tensor(spec, true)).data();
                        },
                        options);
}

TEST(Checkpoint, RootAttributesAndExactRoundTrip) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  for (const bool tied : {false, true}) {
    const std::string path = dir.file(tied ? "tied.h5" : "untied.h5");
    const CheckpointInfo info = tiny_info(tied);
    save_full(path, world, info);
    EXPECT_FALSE(fs::exists(path + ".partial"));
    {
      const H5File f = H5File::open(path, world);
      EXPECT_EQ(f.attr_string("/", "format"), "dapo-checkpoint");
      EXPECT_EQ(f.attr_int("/", "format_version"), 2);
      EXPECT_EQ(f.attr_int("/", "step"), 17);
      EXPECT_EQ(f.attr_string("/", "config"), "[rollout]\nn = 4\n");
      EXPECT_EQ(f.attr_string("/", "model_config"), model::qwen2_config_to_json(info.model));
      EXPECT_EQ(f.attr_int("/", "world_size"), 1);
      EXPECT_EQ(f.attr_int("/", "tp"), 1);
      EXPECT_EQ(f.attr_int("/", "dp"), 1);
      EXPECT_EQ(f.is_dataset("/model/lm_head.weight"), !tied);
      EXPECT_EQ(f.dataset_shape("/model/model.embed_tokens.weight"), (std::vector<int64_t>{32, 16}));
    }
    std::map<std::string, std::vector<float>> got;
    const CheckpointInfo back = load_model_checkpoint(path, world, 0, 1, [&](const model::ParamSpec& spec, const model::SliceSpec& s) {
      got[spec.name].assign(size_t(s.local_shape.size() == 2 ? s.local_shape[0] * s.local_shape[1] : s.local_shape[0]), 0.f);
      return got[spec.name].data();
    });
    EXPECT_EQ(back.step, 17);
    EXPECT_EQ(back.config_ini, info.config_ini);
    EXPECT_EQ(back.format_version, 2);
    EXPECT_EQ(back.model.tie_word_embeddings, tied);
    EXPECT_EQ(model::qwen2_config_to_json(back.model), model::qwen2_config_to_json(info.model));
    const auto specs = model::qwen2_param_specs(info.model);
    ASSERT_EQ(got.size(), specs.size());
    for (const auto& spec : specs) EXPECT_EQ(got[spec.name], test::full_tensor(spec, true)) << spec.name;  // bitwise: float ==
  }
}

// Loading with tp = 2 or 4 gives each tp rank exactly its part of the full
// tensor, for every partition rule (tp = 4 > 2 KV heads replicates them).
TEST(Checkpoint, ReadingATpSliceEqualsThatPartOfTheFullTensor) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = tiny_info(false);
  const std::string path = dir.file("c.h5");
  DatasetOptions checked;
  checked.fletcher32 = true;
  save_full(path, world, info, checked);
  for (const int64_t tp : {2, 4}) {
    std::set<model::Partition> seen;
    for (int64_t rank = 0; rank < tp; ++rank) {
      std::map<std::string, std::vector<float>> got;
      std::map<std::string, model::SliceSpec> slices;
      load_model_checkpoint(path, world, rank, tp, [&](const model::ParamSpec& spec, const model::SliceSpec& s) {
        int64_t n = 1;
        for (const int64_t d : s.local_shape) n *= d;
        slices[spec.name] = s;
        got[spec.name].assign(size_t(n), 0.f);
        return got[spec.name].data();
      });
      for (const auto& spec : model::qwen2_param_specs(info.model)) {
        const auto& s = slices.at(spec.name);
        EXPECT_EQ(got[spec.name], test::slice_of(spec, s, test::full_tensor(spec, true)))
            << spec.name << " tp " << tp << " rank " << rank;
        seen.insert(spec.partition);
        if (spec.partition == model::Partition::row) EXPECT_EQ(s.dim, 1);
        if (spec.partition == model::Partition::column_kv && tp == 4) EXPECT_EQ(s.begin, (rank / 2) * 4) << spec.name;
      }
    }
    EXPECT_EQ(seen.size(), 5u) << "every partition rule was exercised";
  }
}

TEST(Checkpoint, WhoWritesWhichSlice) {
  const auto config = test::tiny_config(false);
  const auto specs = model::qwen2_param_specs(config);
  auto spec = [&](const std::string& name) {
    for (const auto& s : specs)
      if (s.name == name) return s;
    throw std::runtime_error(name);
  };
  const auto norm = spec("model.norm.weight"), k = spec("model.layers.0.self_attn.k_proj.weight"),
             q = spec("model.layers.0.self_attn.q_proj.weight");
  EXPECT_TRUE(writes_slice(norm, config, {0, 2, 0}));
  EXPECT_FALSE(writes_slice(norm, config, {1, 2, 0}));
  EXPECT_FALSE(writes_slice(q, config, {0, 2, 1})) << "dp replicas never write";
  EXPECT_TRUE(writes_slice(q, config, {1, 2, 0}));
  EXPECT_TRUE(writes_slice(k, config, {1, 2, 0})) << "tp = Hkv: every rank has its own head";
  EXPECT_TRUE(writes_slice(k, config, {2, 4, 0}));
  EXPECT_FALSE(writes_slice(k, config, {3, 4, 0})) << "tp = 4 > Hkv = 2: ranks 2 and 3 share a head";
  const auto s = model::local_slice(spec("model.layers.1.mlp.down_proj.weight"), config, 1, 2);
  const Hyperslab slab = slab_of(spec("model.layers.1.mlp.down_proj.weight"), s);
  EXPECT_EQ(slab.start, (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(slab.count, (std::vector<int64_t>{16, 12}));
}

TEST(Checkpoint, AnAbandonedSaveLeavesThePreviousOneAlone) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const std::string path = dir.file("c.h5");
  CheckpointInfo info = tiny_info(true);
  save_full(path, world, info);
  const std::string before = test::read_text(path);
  {
    info.step = 18;
    CheckpointWriter w(path, world, info);
    EXPECT_TRUE(fs::exists(path + ".partial"));
    // ... the job dies here, before commit()
  }
  EXPECT_FALSE(fs::exists(path + ".partial"));
  EXPECT_EQ(test::read_text(path), before);
  EXPECT_EQ(CheckpointReader(path, world).info().step, 17);
}

// A write that the system refuses mid-save (a full disk; here the
// file-size limit, which fails write() alike with EFBIG) is a UserError
// naming the file and dataset, not a crash: the temporary file is removed
// and the previous checkpoint stays whole.
TEST(Checkpoint, AWriteFailingMidSaveIsAnErrorAndLeavesThePreviousOne) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const std::string path = dir.file("c.h5");
  CheckpointInfo info = tiny_info(false);
  save_full(path, world, info);
  const std::string before = test::read_text(path);
  info.step = 18;
  std::string e;
  {
    const test::FileSizeLimit limit(before.size() / 2);
    ASSERT_TRUE(limit.ok());
    e = error_of([&] { save_full(path, world, info); });
  }
  EXPECT_NE(e.find(path + ".partial: "), std::string::npos) << e;
  EXPECT_NE(e.find(" failed: "), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(path + ".partial"));
  EXPECT_EQ(test::read_text(path), before);
  EXPECT_EQ(CheckpointReader(path, world).info().step, 17);
}

TEST(Checkpoint, BadFilesAreRefusedWithTheFileAndTensor) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  auto load_error = [&](const std::string& path) {
    return error_of([&] {
      std::vector<float> sink(10000);
      load_model_checkpoint(path, world, 0, 1, [&](const model::ParamSpec&, const model::SliceSpec&) { return sink.data(); });
    });
  };
  EXPECT_EQ(load_error(dir.file("none.h5")), dir.file("none.h5") + ": no such file");
  test::write_text(dir.file("text.h5"), "not hdf5 at all, just text in a file\n");
  EXPECT_EQ(load_error(dir.file("text.h5")), dir.file("text.h5") + ": not an HDF5 file");

  // HDF5 files that are not (good) checkpoints, made by hand.
  const std::string good = dir.file("good.h5");
  save_full(good, world, tiny_info(false));
  auto variant = [&](const std::string& name, auto&& edit) {
    const std::string path = dir.file(name);
    fs::copy_file(good, path);
    {
      H5File f = H5File::open(path, world, H5Access::read_write);
      edit(f);
    }
    return load_error(path);
  };
  EXPECT_EQ(load_error(good), "");
  {
    const std::string path = dir.file("plain.h5");
    H5File::create(path, world).close();
    EXPECT_EQ(load_error(path), path + ": not a dapo checkpoint (no 'format' attribute)");
  }
  EXPECT_EQ(variant("fmt.h5", [](H5File& f) { f.set_attr("/", "format", std::string("rollout-dump")); }),
            dir.file("fmt.h5") + ": not a dapo checkpoint (format 'rollout-dump', expected 'dapo-checkpoint')");
  EXPECT_EQ(variant("fmt_int.h5", [](H5File& f) { f.set_attr("/", "format", int64_t(1)); }),
            dir.file("fmt_int.h5") + ": /: attribute 'format' is not a string");
  EXPECT_EQ(variant("new.h5", [](H5File& f) { f.set_attr("/", "format_version", int64_t(4)); }),
            dir.file("new.h5") + ": format_version 4 is newer than this dapo reads (up to 3): use a newer dapo");
  // Format 3 is a folder: its index alone is refused, saying so.
  EXPECT_EQ(variant("index.h5", [](H5File& f) { f.set_attr("/", "format_version", int64_t(3)); }),
            dir.file("index.h5") + ": the index of a sharded checkpoint (format 3): give the folder that holds it "
                                   "and its rank files");
  EXPECT_EQ(variant("zero.h5", [](H5File& f) { f.set_attr("/", "format_version", int64_t(0)); }),
            dir.file("zero.h5") + ": invalid format_version 0");
  // A model_config with another vocabulary: the stored tensors no longer fit.
  model::Qwen2Config bigger = test::tiny_config(false);
  bigger.vocab_size = 64;
  EXPECT_EQ(variant("shape.h5", [&](H5File& f) { f.set_attr("/", "model_config", model::qwen2_config_to_json(bigger)); }),
            dir.file("shape.h5") + ": tensor /model/model.embed_tokens.weight has shape (32, 16) but model_config needs (64, 16)");
  // Three layers: layer 2's tensors are missing.
  model::Qwen2Config deeper = test::tiny_config(false);
  deeper.num_hidden_layers = 3;
  EXPECT_EQ(variant("missing.h5", [&](H5File& f) { f.set_attr("/", "model_config", model::qwen2_config_to_json(deeper)); }),
            dir.file("missing.h5") + ": model_config: num_hidden_layers = 3 but there are no tensors of layer 2 "
                                     "(model.layers.N.*; 27 tensors in all): a damaged or mismatched model configuration");
  // Two billion layers: refused before a parameter list (or memory) is sized by it.
  deeper.num_hidden_layers = 2000000000;
  EXPECT_EQ(variant("huge.h5", [&](H5File& f) { f.set_attr("/", "model_config", model::qwen2_config_to_json(deeper)); }),
            dir.file("huge.h5") + ": model_config: num_hidden_layers = 2000000000 but there are no tensors of layer 2 "
                                  "(model.layers.N.*; 27 tensors in all): a damaged or mismatched model configuration");
  EXPECT_NE(variant("badcfg.h5", [](H5File& f) { f.set_attr("/", "model_config", std::string("{\"model_type\": \"llama\"}")); })
                .find(dir.file("badcfg.h5") + ": model_config: model_type 'llama' is not supported"),
            std::string::npos);
  // tp = 3 does not divide 4 heads.
  EXPECT_EQ(error_of([&] {
              load_model_checkpoint(good, world, 0, 3, [](const model::ParamSpec&, const model::SliceSpec&) -> float* {
                return nullptr;
              });
            }),
            "parallel.tp = 3: num_attention_heads 4 is not divisible by tp");
}

// A sink that refuses a tensor (the caller's model differs) is a load error
// like any other, raised after the agreement.
TEST(Checkpoint, SinkErrorsPropagate) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  save_full(dir.file("c.h5"), world, tiny_info(true));
  std::vector<float> buf(1024);
  EXPECT_EQ(error_of([&] {
              load_model_checkpoint(dir.file("c.h5"), world, 0, 1, [&](const model::ParamSpec& spec, const model::SliceSpec&) {
                if (spec.name == "model.norm.weight") throw UserError("model.norm.weight: not wanted");
                return buf.data();
              });
            }),
            "model.norm.weight: not wanted");
  EXPECT_EQ(error_of([&] { agree_on_error(world, "boom"); }), "boom");
  EXPECT_EQ(error_of([&] { agree_on_error(world, ""); }), "");
}

}  // namespace
}  // namespace dapo::io
