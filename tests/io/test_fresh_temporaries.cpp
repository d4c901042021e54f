// Nothing a user owns is lost to a write: temporary `.partial` files are
// created fresh (a stale file or a symlink by that name is removed, never
// written through; a directory there is refused), for output files,
// safetensors, HDF5 files and checkpoints; a final symlink is still followed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"
#include "dapo/io/hdf5_file.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/parallel/comm.h"
#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::read_text;
using test::TempDir;
using test::write_text;

// `name`.partial is a symlink to victim.txt, which must come through whole.
void plant_link(const TempDir& dir, const std::string& name) {
  write_text(dir.file("victim.txt"), "precious\n");
  fs::create_symlink(dir.file("victim.txt"), dir.path() / (name + ".partial"));
}

void expect_victim_whole(const TempDir& dir, const std::string& name) {
  EXPECT_EQ(read_text(dir.file("victim.txt")), "precious\n") << name;
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(dir.path() / (name + ".partial")))) << name;
  EXPECT_FALSE(fs::exists(dir.path() / (name + ".partial"))) << name;
}

TEST(FreshTemporaries, OutputFileNeverWritesThroughAPartialSymlink) {
  TempDir dir;
  plant_link(dir, "o.jsonl");
  write_output_file(dir.file("o.jsonl"), "new\n", "output");
  EXPECT_EQ(read_text(dir.file("o.jsonl")), "new\n");
  expect_victim_whole(dir, "o.jsonl");
  // A dangling link, and a stale regular file, are removed as well.
  fs::create_symlink(dir.file("nowhere"), dir.path() / "d.jsonl.partial");
  write_output_file(dir.file("d.jsonl"), "d\n", "output");
  EXPECT_FALSE(fs::exists(dir.file("nowhere")));
  EXPECT_EQ(read_text(dir.file("d.jsonl")), "d\n");
  write_text(dir.file("s.jsonl.partial"), "stale half-written text");
  write_output_file(dir.file("s.jsonl"), "s\n", "output");
  EXPECT_EQ(read_text(dir.file("s.jsonl")), "s\n");
  EXPECT_FALSE(fs::exists(dir.file("s.jsonl.partial")));
}

TEST(FreshTemporaries, ADirectoryInTheWayIsRefused) {
  TempDir dir;
  fs::create_directory(dir.path() / "o.jsonl.partial");
  EXPECT_EQ(error_of([&] { write_output_file(dir.file("o.jsonl"), "x", "output"); }),
            dir.file("o.jsonl.partial") + ": a directory is where the temporary file goes; remove or rename it");
  EXPECT_FALSE(fs::exists(dir.file("o.jsonl")));
  EXPECT_TRUE(fs::is_directory(dir.path() / "o.jsonl.partial"));
}

// The final name, unlike the temporary, keeps its documented behaviour: a
// symlink there is followed and its target replaced, the link kept.
TEST(FreshTemporaries, AFinalSymlinkIsStillFollowed) {
  TempDir dir;
  write_text(dir.file("real.jsonl"), "old\n");
  fs::create_symlink("real.jsonl", dir.path() / "link.jsonl");
  plant_link(dir, "real.jsonl");
  write_output_file(dir.file("link.jsonl"), "new\n", "output");
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link.jsonl"));
  EXPECT_EQ(read_text(dir.file("real.jsonl")), "new\n");
  expect_victim_whole(dir, "real.jsonl");
}

TEST(FreshTemporaries, SafetensorsNeverWriteThroughAPartialSymlink) {
  TempDir dir;
  plant_link(dir, "model.safetensors");
  const float v[2] = {1.0f, 2.0f};
  write_safetensors(dir.file("model.safetensors"), {{"w", "F32", {2}, v}});
  expect_victim_whole(dir, "model.safetensors");
  EXPECT_TRUE(SafetensorsFile(dir.file("model.safetensors")).contains("w"));
}

TEST(FreshTemporaries, HdfFilesAndCheckpointsNeverWriteThroughAPartialSymlink) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  plant_link(dir, "x.h5");
  H5File::create_fresh(dir.file("x.h5.partial"), world).close();
  EXPECT_EQ(read_text(dir.file("victim.txt")), "precious\n");
  EXPECT_FALSE(fs::is_symlink(dir.path() / "x.h5.partial"));
  fs::remove(dir.path() / "x.h5.partial");

  // A checkpoint (import-hf's, and every training save's CheckpointWriter).
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(true), test::tiny_hf_tensors(test::tiny_config(true)));
  fs::remove(dir.path() / "victim.txt");
  plant_link(dir, "step_00000005.h5");
  import_hf((dir.path() / "hf").string(), dir.file("step_00000005.h5"), world);
  expect_victim_whole(dir, "step_00000005.h5");
  EXPECT_EQ(CheckpointReader(dir.file("step_00000005.h5"), world).info().step, 0);
  // A directory at the final name is refused before anything is written.
  fs::create_directory(dir.path() / "d.h5");
  EXPECT_EQ(error_of([&] { import_hf((dir.path() / "hf").string(), dir.file("d.h5"), world); }),
            dir.file("d.h5") + ": is a directory (a checkpoint is a file, written beside it and renamed into place); "
                               "name a file");
  EXPECT_FALSE(fs::exists(dir.file("d.h5.partial")));
}

}  // namespace
}  // namespace dapo::io
