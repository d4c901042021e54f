// Parallel HDF5 under mpirun -np 2 / 4: ranks write disjoint blocks of one
// dataset collectively (some ranks writing nothing) and every rank reads the
// whole back; checkpoints saved from a tp x dp grid (dp replicas and
// replicated tp slices not writing) load bit-identically with every tp;
// import-hf with the ranks sharing the rows; errors agreed over ranks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>

#include "dapo/io/checkpoint.h"
#include "dapo/io/hdf5_file.h"
#include "dapo/io/hf_convert.h"
#include "dapo/parallel/grid.h"
#include "io/io_test_util.h"
#include "mpi/mpi_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using parallel::Comm;

using test::SharedDir;

float element(int64_t i) { return float(i) * 0.25f - 7.0f; }

TEST(Hdf5Mpi, RanksWriteDisjointBlocksAndEveryRankReadsTheWhole) {
  const Comm world = Comm::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const SharedDir dir(world);
  const int p = world.size(), r = world.rank();
  const int64_t rows = 3 * p + 2, cols = 2 * p + 1;
  for (const bool checksum : {false, true}) {
    const std::string path = dir.file(checksum ? "sum.h5" : "plain.h5");
    {
      H5File f = H5File::create(path, world);
      f.set_attr("/", "ranks", int64_t(p));
      f.set_attr("/", "note", std::string("written by all"));
      DatasetOptions o;
      o.fletcher32 = checksum;
      o.chunk_bytes = 64;  // chunks shared by several ranks' blocks
      f.create_dataset("/by_rows", DType::f32, {rows, cols}, o);
      f.create_dataset("/by_cols", DType::f32, {rows, cols}, o);
      f.create_dataset("/ids", DType::i64, {int64_t(p) * 3}, o);
      // Uneven row blocks; the last rank writes nothing.
      const int64_t writers = p - 1, b = rows * r / writers, e = rows * (r + 1) / writers;
      std::vector<float> mine;
      if (r < writers)
        for (int64_t i = b * cols; i < e * cols; ++i) mine.push_back(element(i));
      f.write("/by_rows", r < writers ? Hyperslab{{b, 0}, {e - b, cols}} : Hyperslab::none(), mine.data());
      // Column blocks, every rank: rank r takes columns [2r, 2r+2), the last one 3.
      const int64_t c0 = 2 * r, nc = r == p - 1 ? 3 : 2;
      mine.clear();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = c0; c < c0 + nc; ++c) mine.push_back(element(i * cols + c));
      f.write("/by_cols", Hyperslab{{0, c0}, {rows, nc}}, mine.data());
      const std::vector<int64_t> ids = {int64_t(r) << 40, -r, r * 3 + 2};
      f.write("/ids", Hyperslab{{int64_t(r) * 3}, {3}}, ids.data());
    }
    const H5File f = H5File::open(path, world);
    EXPECT_EQ(f.attr_int("/", "ranks"), p);
    EXPECT_EQ(f.attr_string("/", "note"), "written by all");
    for (const char* name : {"/by_rows", "/by_cols"}) {
      std::vector<float> all(size_t(rows * cols));
      f.read(name, Hyperslab::whole({rows, cols}), all.data());
      for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(all[size_t(i)], element(i)) << name << " element " << i;
    }
    std::vector<int64_t> ids(size_t(p) * 3);
    f.read("/ids", Hyperslab::whole({int64_t(p) * 3}), ids.data());
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(ids[size_t(q) * 3], int64_t(q) << 40);
      EXPECT_EQ(ids[size_t(q) * 3 + 2], q * 3 + 2);
    }
  }
}

// Save from every tp x dp grid the world allows, load with every tp: each
// rank gets exactly its slice of the full tensors. Only dp rank 0's copy,
// and one tp rank of each replicated slice, is asked for data.
TEST(Hdf5Mpi, CheckpointsSaveWithOneTpAndLoadWithAnother) {
  const Comm world = Comm::world();
  const SharedDir dir(world);
  const auto config = test::tiny_config(false);
  const auto specs = model::qwen2_param_specs(config);
  std::map<std::string, std::vector<float>> full;
  for (const auto& spec : specs) full[spec.name] = test::full_tensor(spec, true);
  for (const int tp : test::tp_choices(world.size())) {
    const parallel::Grid grid = parallel::make_grid(world, tp);
    const std::string path = dir.file("tp" + std::to_string(tp) + ".h5");
    CheckpointInfo info;
    info.step = 5;
    info.model = config;
    info.world_size = grid.world_size();
    info.tp = grid.tp_size;
    info.dp = grid.dp_size;
    std::map<std::string, std::vector<float>> mine;
    int64_t asked = 0, expected_asks = 0;
    for (const auto& spec : specs) expected_asks += writes_slice(spec, config, ShardPlace::of(grid));
    save_model_checkpoint(path, grid.world, ShardPlace::of(grid), info,
                          [&](const model::ParamSpec& spec, const model::SliceSpec& slice) {
                            ++asked;
                            EXPECT_TRUE(!model::is_replicated(spec.partition) || grid.tp_rank == 0)
                                << spec.name << ": only one tp rank writes a replicated tensor";
                            return (mine[spec.name] = test::slice_of(spec, slice, full.at(spec.name))).data();
                          });
    EXPECT_EQ(asked, expected_asks);
    if (grid.dp_rank > 0) EXPECT_EQ(asked, 0) << "dp replicas write nothing";
    for (const int load_tp : test::tp_choices(world.size())) {
      const int load_rank = world.rank() % load_tp;
      std::map<std::string, std::vector<float>> got;
      std::map<std::string, model::SliceSpec> slices;
      const CheckpointInfo back =
          load_model_checkpoint(path, world, load_rank, load_tp, [&](const model::ParamSpec& spec, const model::SliceSpec& s) {
            slices[spec.name] = s;
            got[spec.name].assign(test::slice_of(spec, s, full.at(spec.name)).size(), 0.f);
            return got[spec.name].data();
          });
      EXPECT_EQ(back.tp, tp);
      EXPECT_EQ(back.dp, world.size() / tp);
      EXPECT_EQ(back.world_size, world.size());
      for (const auto& spec : specs)
        ASSERT_EQ(got[spec.name], test::slice_of(spec, slices[spec.name], full.at(spec.name)))
            << spec.name << " saved with tp " << tp << ", loaded with tp " << load_tp;
    }
  }
}

TEST(Hdf5Mpi, ImportHfSplitsTheRowsBetweenRanks) {
  const Comm world = Comm::world();
  const SharedDir dir(world);
  const auto config = test::tiny_config(true);
  if (world.rank() == 0) {
    test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(true), test::tiny_hf_tensors(config), 2);
    test::write_hf_dir(dir.path() / "bad", test::tiny_config_json(true),
                       test::tiny_hf_tensors(config, "model.layers.1.mlp.up_proj.weight"));
  }
  world.barrier();
  const ImportSummary s = import_hf((dir.path() / "hf").string(), dir.file("c.h5"), world);
  EXPECT_EQ(s.tensors, int64_t(model::qwen2_param_specs(config).size()));
  std::map<std::string, std::vector<float>> got;
  load_model_checkpoint(dir.file("c.h5"), world, 0, 1, [&](const model::ParamSpec& spec, const model::SliceSpec&) {
    got[spec.name].assign(test::full_tensor(spec).size(), 0.f);
    return got[spec.name].data();
  });
  for (const auto& spec : model::qwen2_param_specs(config)) EXPECT_EQ(got[spec.name], test::full_tensor(spec)) << spec.name;
  const CheckpointReader reader(dir.file("c.h5"), world);
  EXPECT_EQ(reader.info().world_size, world.size());
  EXPECT_EQ(reader.info().dp, world.size());
  // A bad input fails every rank with the same message, and writes nothing.
  const std::string err = test::error_of([&] { import_hf((dir.path() / "bad").string(), dir.file("bad.h5"), world); });
  EXPECT_NE(err.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir.file("bad.h5")));
  // export on all ranks: rank 0 writes, everyone returns.
  export_hf(dir.file("c.h5"), dir.file("out"), ExportDtype::bf16, world);
  world.barrier();
  EXPECT_TRUE(fs::exists(dir.file("out/model.safetensors")));
}

TEST(Hdf5Mpi, AnErrorOnOneRankIsRaisedOnAll) {
  const Comm world = Comm::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const std::string err = test::error_of([&] { agree_on_error(world, world.rank() == 1 ? "rank one failed" : ""); });
  EXPECT_EQ(err, world.rank() == 1 ? "rank one failed" : "rank one failed (on rank 1)");
  EXPECT_EQ(test::error_of([&] { agree_on_error(world, ""); }), "");
}

}  // namespace
}  // namespace dapo::io
