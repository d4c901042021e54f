// Training checkpoints on one rank: weights, both AdamW moments, the
// optimizer step count, the generator key and the data position round-trip
// exactly; a value changed inside the file (digest) or bytes damaged on
// disk (Fletcher-32 / digest) make the load fail naming the file; a
// model-only checkpoint is refused as a resume point; tensor digests do not
// depend on how the tensor is split.
#include "dapo/io/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "dapo/io/tensor_digest.h"
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

CheckpointInfo training_info() {
  CheckpointInfo info;
  info.step = 9;
  info.config_ini = "[train]\ntotal_steps = 20\n";
  info.model = test::tiny_config(false);
  info.training = true;
  info.state.optimizer_steps = 18;
  info.state.rng_seed = 0xFEDCBA9876543210ull;
  info.state.data_seed = 3;
  info.state.data_size = 2000;
  info.state.data_epoch = 1;
  info.state.data_position = 144;
  return info;
}

// Deterministic tensors: weights, exp_avg = weights / 10, exp_avg_sq = |weights|.
struct Tensors {
  std::map<std::string, std::vector<float>> w, m, v;
  explicit Tensors(const model::Qwen2Config& mc) {
    for (const model::ParamSpec& spec : model::qwen2_param_specs(mc)) {
      w[spec.name] = test::full_tensor(spec, true);
      for (const float x : w[spec.name]) {
        m[spec.name].push_back(x / 10);
        v[spec.name].push_back(std::abs(x));
      }
    }
  }
};

void save(const std::string& path, const parallel::Comm& comm, const CheckpointInfo& info, const Tensors& t) {
  auto src = [](const std::map<std::string, std::vector<float>>& map) -> SliceSource {
    return [&map](const model::ParamSpec& spec, const model::SliceSpec&) { return map.at(spec.name).data(); };
  };
  save_training_checkpoint(path, comm, ShardPlace{}, info, info.state.rng_seed, src(t.w), src(t.m), src(t.v));
}

CheckpointInfo load(const std::string& path, const parallel::Comm& comm, Tensors& out) {
  auto sink = [](std::map<std::string, std::vector<float>>& map) -> SliceSink {
    return [&map](const model::ParamSpec& spec, const model::SliceSpec& slice) {
      std::vector<float>& v = map[spec.name];
      v.assign(size_t(elements(slice.local_shape)), -1.0f);
      return v.data();
    };
  };
  return load_training_checkpoint(path, comm, 0, 1, sink(out.w), sink(out.m), sink(out.v));
}

TEST(TrainingCheckpoint, ExactRoundTripOfWeightsMomentsAndState) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = training_info();
  const Tensors want(info.model);
  save(dir.file("c.h5"), world, info, want);
  EXPECT_FALSE(fs::exists(dir.file("c.h5.partial")));
  Tensors got(info.model);
  const CheckpointInfo back = load(dir.file("c.h5"), world, got);
  EXPECT_TRUE(back.training);
  EXPECT_EQ(back.step, 9);
  EXPECT_EQ(back.state, info.state);
  EXPECT_EQ(got.w, want.w);
  EXPECT_EQ(got.m, want.m);
  EXPECT_EQ(got.v, want.v);
  // The model part loads as a model checkpoint too (model.path of a new run).
  std::map<std::string, std::vector<float>> w;
  load_model_checkpoint(dir.file("c.h5"), world, 0, 1, [&](const model::ParamSpec& spec, const model::SliceSpec& s) {
    w[spec.name].resize(size_t(elements(s.local_shape)));
    return w[spec.name].data();
  });
  EXPECT_EQ(w, want.w);
}

TEST(TrainingCheckpoint, ChangedOrDamagedDataIsDetected) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = training_info();
  const Tensors t(info.model);
  save(dir.file("good.h5"), world, info, t);

  // One moment changed through HDF5 (its chunk checksum is recomputed, the
  // digest is not): the digest catches it.
  fs::copy_file(dir.file("good.h5"), dir.file("edited.h5"));
  {
    H5File f = H5File::open(dir.file("edited.h5"), world, H5Access::read_write);
    const float x = 12345.0f;
    f.write(exp_avg_sq_dataset("model.norm.weight"), Hyperslab{{3}, {1}}, &x);
  }
  Tensors out(info.model);
  EXPECT_EQ(error_of([&] { load(dir.file("edited.h5"), world, out); }),
            dir.file("edited.h5") + ": tensor /optimizer/exp_avg_sq/model.norm.weight does not match its stored digest "
                                    "(the file is damaged)");

  // Bytes flipped on disk in the middle of the file: whatever HDF5 trips
  // on first (a chunk's Fletcher-32, metadata, or our digest), the load
  // fails with the file's name - never silently.
  fs::copy_file(dir.file("good.h5"), dir.file("flipped.h5"));
  const auto size = fs::file_size(dir.file("flipped.h5"));
  {
    std::fstream f(dir.file("flipped.h5"), std::ios::in | std::ios::out | std::ios::binary);
    for (std::streamoff at = std::streamoff(size / 2); at < std::streamoff(size / 2 + 64); ++at) {
      f.seekg(at);
      char c = 0;
      f.get(c);
      f.seekp(at);
      f.put(char(~c));
    }
  }
  const std::string err = error_of([&] { load(dir.file("flipped.h5"), world, out); });
  EXPECT_NE(err.find(dir.file("flipped.h5")), std::string::npos) << err;

  // Cut short (a copy that stopped half-way).
  fs::copy_file(dir.file("good.h5"), dir.file("short.h5"));
  fs::resize_file(dir.file("short.h5"), size / 2);
  const std::string cut = error_of([&] { load(dir.file("short.h5"), world, out); });
  EXPECT_NE(cut.find(dir.file("short.h5")), std::string::npos) << cut;
}

// A negative step is bad input (a UserError, which resume = auto falls back
// past), not a failed check that ends the job.
TEST(TrainingCheckpoint, NegativeStepIsBadInput) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const CheckpointInfo info = training_info();
  const Tensors t(info.model);
  save(dir.file("c.h5"), world, info, t);
  {
    H5File f = H5File::open(dir.file("c.h5"), world, H5Access::read_write);
    f.set_attr("/", "step", int64_t{-3});
  }
  Tensors out(info.model);
  EXPECT_EQ(error_of([&] { load(dir.file("c.h5"), world, out); }),
            dir.file("c.h5") + ": step = -3 is negative (a damaged checkpoint)");
}

TEST(TrainingCheckpoint, ModelOnlyCheckpointIsNoResumePoint) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  CheckpointInfo info = training_info();
  info.training = false;
  const Tensors t(info.model);
  save_model_checkpoint(dir.file("m.h5"), world, ShardPlace{}, info,
                        [&](const model::ParamSpec& spec, const model::SliceSpec&) { return t.w.at(spec.name).data(); });
  Tensors out(info.model);
  EXPECT_EQ(error_of([&] { load(dir.file("m.h5"), world, out); }),
            dir.file("m.h5") + ": a model-only checkpoint (no /optimizer): give it as model.path to start a new run "
                               "from its weights, not as a checkpoint to resume");
}

TEST(TensorDigest, SumOfSlicesEqualsTheWholeTensor) {
  const std::vector<int64_t> shape{6, 10};
  std::vector<float> full(60);
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(i) * 0.37f - 3.0f;
  const uint64_t whole = slab_digest(shape, Hyperslab::whole(shape), full.data());
  // Split by rows (2 + 4) and by columns (3 + 7).
  const uint64_t rows = slab_digest(shape, Hyperslab{{0, 0}, {2, 10}}, full.data()) +
                        slab_digest(shape, Hyperslab{{2, 0}, {4, 10}}, full.data() + 20);
  std::vector<float> left, right;
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 10; ++c) (c < 3 ? left : right).push_back(full[size_t(r * 10 + c)]);
  const uint64_t cols = slab_digest(shape, Hyperslab{{0, 0}, {6, 3}}, left.data()) +
                        slab_digest(shape, Hyperslab{{0, 3}, {6, 7}}, right.data());
  EXPECT_EQ(rows, whole);
  EXPECT_EQ(cols, whole);
  // Two values swapped, one sign flipped: different digests.
  std::vector<float> swapped = full;
  std::swap(swapped[4], swapped[5]);
  EXPECT_NE(slab_digest(shape, Hyperslab::whole(shape), swapped.data()), whole);
  std::vector<float> negated = full;
  negated[0] = -negated[0];
  EXPECT_NE(slab_digest(shape, Hyperslab::whole(shape), negated.data()), whole);
}

}  // namespace
}  // namespace dapo::io
