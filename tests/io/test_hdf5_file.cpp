// H5File on one rank: attributes, datasets (chunked, Fletcher-32), hyperslab
// writes and reads, listings, and the errors for bad files and bad
// requests. The multi-rank behaviour is in tests/mpi/test_hdf5.cpp.
#include "dapo/io/hdf5_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

TEST(H5File, AttributesRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("a.h5");
  const parallel::Comm world = parallel::Comm::world();
  const std::string long_text(100000, 'x');
  {
    H5File f = H5File::create(path, world);
    f.set_attr("/", "format", std::string("dapo-checkpoint"));
    f.set_attr("/", "empty", std::string());
    f.set_attr("/", "utf8", std::string("π ≈ 3.14159 — 漢字"));
    f.set_attr("/", "long", long_text);
    f.set_attr("/", "step", int64_t(-5));
    f.set_attr("/", "step", int64_t(1) << 40);  // replaced
    f.create_dataset("/g/d", DType::f32, {2});
    f.set_attr("/g/d", "note", std::string("on a dataset"));
    f.set_attr("/g", "count", int64_t(3));
  }
  const H5File f = H5File::open(path, world);
  EXPECT_EQ(f.attr_string("/", "format"), "dapo-checkpoint");
  EXPECT_EQ(f.attr_string("/", "empty"), "");
  EXPECT_EQ(f.attr_string("/", "utf8"), "π ≈ 3.14159 — 漢字");
  EXPECT_EQ(f.attr_string("/", "long"), long_text);
  EXPECT_EQ(f.attr_int("/", "step"), int64_t(1) << 40);
  EXPECT_EQ(f.attr_string("/g/d", "note"), "on a dataset");
  EXPECT_EQ(f.attr_int("/g", "count"), 3);
  EXPECT_TRUE(f.has_attr("/", "step"));
  EXPECT_FALSE(f.has_attr("/", "nope"));
  EXPECT_FALSE(f.has_attr("/missing/object", "step"));
  EXPECT_EQ(error_of([&] { f.attr_int("/", "nope"); }), path + ": /: no attribute 'nope'");
  EXPECT_EQ(error_of([&] { f.attr_string("/x/y", "a"); }), path + ": /x/y: no attribute 'a'");
  EXPECT_EQ(error_of([&] { f.attr_int("/", "format"); }), path + ": /: attribute 'format' is not an integer");
  EXPECT_EQ(error_of([&] { f.attr_string("/", "step"); }), path + ": /: attribute 'step' is not a string");
}

TEST(H5File, DatasetsWriteAndReadBlocks) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const parallel::Comm world = parallel::Comm::world();
  std::vector<float> w(6 * 5);
  std::iota(w.begin(), w.end(), -3.5f);
  std::vector<int64_t> ids = {int64_t(1) << 50, -1, 7};
  std::vector<int32_t> small = {-2, 9};
  {
    H5File f = H5File::create(path, world);
    DatasetOptions tiny_chunks;
    tiny_chunks.chunk_bytes = 24;  // many chunks, split inside rows
    f.create_dataset("/model/w", DType::f32, {6, 5}, tiny_chunks);
    f.create_dataset("/model/sub/deeper", DType::f32, {1});
    f.create_dataset("/model/ids", DType::i64, {3});
    f.create_dataset("/i32", DType::i32, {2});
    f.create_dataset("/empty", DType::f32, {0, 3});
    // Two writes of disjoint blocks fill the dataset.
    f.write("/model/w", Hyperslab{{0, 0}, {6, 2}}, std::vector<float>{w[0], w[1], w[5], w[6], w[10], w[11], w[15],
                                                                        w[16], w[20], w[21], w[25], w[26]}.data());
    std::vector<float> right;
    for (int r = 0; r < 6; ++r)
      for (int c = 2; c < 5; ++c) right.push_back(w[size_t(r * 5 + c)]);
    f.write("/model/w", Hyperslab{{0, 2}, {6, 3}}, right.data());
    f.write("/model/w", Hyperslab::none(), static_cast<const float*>(nullptr));
    f.write("/model/ids", Hyperslab::whole({3}), ids.data());
    f.write("/i32", Hyperslab::whole({2}), small.data());
    f.write("/empty", Hyperslab::whole({0, 3}), static_cast<const float*>(nullptr));
  }
  const H5File f = H5File::open(path, world);
  EXPECT_EQ(f.dataset_shape("/model/w"), (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(f.dataset_shape("/empty"), (std::vector<int64_t>{0, 3}));
  std::vector<float> all(30);
  f.read("/model/w", Hyperslab::whole({6, 5}), all.data());
  EXPECT_EQ(all, w);
  std::vector<float> rows(10);
  f.read("/model/w", Hyperslab{{4, 0}, {2, 5}}, rows.data());
  EXPECT_EQ(rows, std::vector<float>(w.begin() + 20, w.end()));
  std::vector<float> block(4);
  f.read("/model/w", Hyperslab{{1, 3}, {2, 2}}, block.data());
  EXPECT_EQ(block, (std::vector<float>{w[8], w[9], w[13], w[14]}));
  std::vector<int64_t> ids_back(3);
  f.read("/model/ids", Hyperslab::whole({3}), ids_back.data());
  EXPECT_EQ(ids_back, ids);
  std::vector<int32_t> small_back(2);
  f.read("/i32", Hyperslab::whole({2}), small_back.data());
  EXPECT_EQ(small_back, small);
  // Listings hold datasets only, sorted; groups are not datasets.
  EXPECT_EQ(f.list_datasets("/model"), (std::vector<std::string>{"ids", "w"}));
  EXPECT_EQ(f.list_datasets("/"), (std::vector<std::string>{"empty", "i32"}));
  EXPECT_TRUE(f.exists("/model/sub/deeper"));
  EXPECT_TRUE(f.is_dataset("/model/sub/deeper"));
  EXPECT_FALSE(f.is_dataset("/model/sub"));
  EXPECT_FALSE(f.exists("/no/such/thing"));
  EXPECT_FALSE(f.exists("/model/nope"));
  EXPECT_EQ(error_of([&] { f.list_datasets("/nope"); }), path + ": /nope: no such group");
  EXPECT_EQ(error_of([&] { f.list_datasets("/model/w"); }), path + ": /model/w: no such group");
  EXPECT_EQ(error_of([&] { f.dataset_shape("/model/sub"); }), path + ": /model/sub: no such dataset");
  EXPECT_EQ(error_of([&] { f.read("/nope", Hyperslab::whole({1}), all.data()); }), path + ": /nope: no such dataset");
  EXPECT_EQ(error_of([&] { f.read("/model/ids", Hyperslab::whole({3}), all.data()); }),
            path + ": /model/ids: is not floating-point data");
  EXPECT_EQ(error_of([&] { f.read("/model/w", Hyperslab::whole({6, 5}), ids_back.data()); }),
            path + ": /model/w: is not integer data");
}

TEST(H5File, OpenRefusesMissingAndForeignFiles) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  EXPECT_EQ(error_of([&] { H5File::open(dir.file("none.h5"), world); }), dir.file("none.h5") + ": no such file");
  test::write_text(dir.file("text.h5"), "just some text, long enough to look like a file\n");
  EXPECT_EQ(error_of([&] { H5File::open(dir.file("text.h5"), world); }), dir.file("text.h5") + ": not an HDF5 file");
  EXPECT_NE(error_of([&] { H5File::create(dir.file("no/dir/x.h5"), world); })
                .find(dir.file("no/dir/x.h5") + ": cannot create the HDF5 file: "),
            std::string::npos);
}

// A flipped byte inside a checksummed chunk fails the read with a UserError
// (the integrity check issue #6 builds on); without the checksum it would
// go unnoticed.
TEST(H5File, Fletcher32CatchesDamagedData) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const std::vector<float> data(256, 1234.5f);
  for (const bool checksum : {true, false}) {
    const std::string path = dir.file(checksum ? "sum.h5" : "plain.h5");
    {
      H5File f = H5File::create(path, world);
      DatasetOptions o;
      o.fletcher32 = checksum;
      f.create_dataset("/x", DType::f32, {256}, o);
      f.write("/x", Hyperslab::whole({256}), data.data());
    }
    std::string bytes = test::read_text(path);
    uint32_t pattern;
    std::memcpy(&pattern, &data[0], 4);
    const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&pattern), 4));
    ASSERT_NE(at, std::string::npos);
    bytes[at + 4 * 100] ^= 0x10;  // element 100
    test::write_text(path, bytes);
    const H5File f = H5File::open(path, world);
    std::vector<float> back(256);
    const std::string err = error_of([&] { f.read("/x", Hyperslab::whole({256}), back.data()); });
    if (checksum) {
      EXPECT_NE(err.find(path + ": /x: cannot read: "), std::string::npos) << err;
    } else {
      EXPECT_EQ(err, "");
      EXPECT_NE(back[100], data[100]);
    }
  }
}

// A data write the system refuses (the file-size limit here, a full disk in
// a run) is a UserError naming the file and dataset, and the cause.
TEST(H5File, ARefusedWriteIsAUserErrorNamingTheDataset) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  H5File f = H5File::create(dir.file("w.h5"), world);
  const int64_t n = int64_t(1) << 20;  // 4 MiB of floats, no checksum: written at write()
  f.create_dataset("/big", DType::f32, {n});
  const std::vector<float> data(size_t(n), 1.0f);
  std::string e;
  {
    const test::FileSizeLimit limit(size_t(1) << 20);
    ASSERT_TRUE(limit.ok());
    e = error_of([&] { f.write("/big", Hyperslab::whole({n}), data.data()); });
  }
  EXPECT_NE(e.find(dir.file("w.h5") + ": /big: writing failed: "), std::string::npos) << e;
  EXPECT_NE(e.find(" bytes free for this user"), std::string::npos) << e;
}

TEST(H5File, HyperslabBasics) {
  EXPECT_TRUE(Hyperslab::none().selects_nothing());
  EXPECT_EQ(Hyperslab::none().numel(), 0);
  EXPECT_EQ(Hyperslab::whole({3, 4}).numel(), 12);
  EXPECT_TRUE((Hyperslab{{0, 0}, {3, 0}}).selects_nothing());
  EXPECT_EQ((Hyperslab{{1, 2}, {2, 2}}).numel(), 4);
}

}  // namespace
}  // namespace dapo::io
