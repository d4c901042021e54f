// write_output_file: what `generate --output`, `eval --output` and the run
// files write. A regular file is replaced atomically; a FIFO or device is
// written in place (never replaced by a renamed file); a symlink is
// followed and its target written, the link kept; a failed write names the
// reason and leaves no .partial file and the old file whole.
#include "dapo/io/file_sync.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::read_text;
using test::TempDir;
using test::write_text;

TEST(OutputFile, RegularFileIsReplacedAtomically) {
  TempDir dir;
  write_text(dir.file("out.jsonl"), "old\n");
  write_output_file(dir.file("out.jsonl"), "new\n", "output");
  EXPECT_EQ(read_text(dir.file("out.jsonl")), "new\n");
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl.partial")));
  write_output_file(dir.file("fresh.jsonl"), "x", "output");
  EXPECT_EQ(read_text(dir.file("fresh.jsonl")), "x");
  EXPECT_EQ(error_of([&] { write_output_file(dir.path().string(), "x", "output"); }),
            dir.path().string() + ": is a directory (expected a file for the output)");
}

TEST(OutputFile, SymlinksAreFollowedAndKept) {
  TempDir dir;
  fs::create_directories(dir.path() / "real");
  write_text(dir.file("real/target.jsonl"), "old\n");
  fs::create_symlink("real/target.jsonl", dir.path() / "link1");  // relative to the link's folder
  fs::create_symlink(dir.path() / "link1", dir.path() / "link2");  // a chain
  EXPECT_EQ(output_target(dir.file("link2")), (dir.path() / "real/target.jsonl").string());
  write_output_file(dir.file("link2"), "new\n", "output");
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link1"));
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link2"));
  EXPECT_EQ(read_text(dir.file("real/target.jsonl")), "new\n");
  EXPECT_FALSE(fs::exists(dir.file("real/target.jsonl.partial")));
  // A dangling link: its target is created.
  fs::create_symlink("real/later.jsonl", dir.path() / "dangling");
  write_output_file(dir.file("dangling"), "made\n", "output");
  EXPECT_TRUE(fs::is_symlink(dir.path() / "dangling"));
  EXPECT_EQ(read_text(dir.file("real/later.jsonl")), "made\n");
  // A loop is an error, not a hang.
  fs::create_symlink(dir.path() / "loop_b", dir.path() / "loop_a");
  fs::create_symlink(dir.path() / "loop_a", dir.path() / "loop_b");
  EXPECT_EQ(error_of([&] { write_output_file(dir.file("loop_a"), "x", "output"); }),
            dir.file("loop_a") + ": too many levels of symbolic links");
}

TEST(OutputFile, FifoIsWrittenInPlace) {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_text(fifo); });  // opening blocks until the writer opens
  write_output_file(fifo, "through the pipe\n", "output");
  reader.join();
  EXPECT_EQ(got, "through the pipe\n");
  struct stat st {};
  ASSERT_EQ(stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_FALSE(fs::exists(fifo + ".partial"));
}

TEST(OutputFile, DevicesAreWrittenInPlace) {
  write_output_file("/dev/null", "discarded\n", "output");
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {  // writes fail with ENOSPC
    EXPECT_EQ(error_of([] { write_output_file("/dev/full", "x", "output"); }),
              "/dev/full: cannot write the output: No space left on device");
    ASSERT_EQ(stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
}

// A write that fails half-way (here the file size limit; a full disk the
// same way, with "No space left on device"): the reason in the message, no
// .partial left behind, the old file whole.
TEST(OutputFile, FailedWriteRemovesThePartialFile) {
  TempDir dir;
  write_text(dir.file("out.jsonl"), "old\n");
  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string err = error_of([&] { write_output_file(dir.file("out.jsonl"), std::string(100000, 'x'), "output"); });
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(err, dir.file("out.jsonl") + ": cannot write the output: File too large");
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl.partial")));
  EXPECT_EQ(read_text(dir.file("out.jsonl")), "old\n");
}

TEST(OutputFile, FreeSpaceIsCheckedBeforeABigWrite) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { check_free_space(dir.file("c.h5"), 1000, "checkpoint"); }), "");
  const std::string err = error_of([&] { check_free_space(dir.file("c.h5"), uint64_t(1) << 62, "checkpoint"); });
  EXPECT_EQ(err.rfind(dir.file("c.h5") + ": no space left on device for the checkpoint (about 4398046511104 MiB "
                                         "needed, ",
                      0),
            0u)
      << err;
}

}  // namespace
}  // namespace dapo::io
