// run_guard.h: output folders that clash are refused (also through a
// symlink and before they exist), a folder that cannot be made is named
// with its key, too little free space names key, folder, free and needed
// bytes, a checkpoint's size estimate matches what is written, and the run
// lock refuses a second holder (naming the first) and is free again once
// the first lets go.
#include <gtest/gtest.h>

#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "dapo/core/config.h"
#include "dapo/core/error.h"
#include "dapo/model/qwen2_config.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/run_guard.h"
#include "io/io_test_util.h"

namespace {

namespace fs = std::filesystem;
using dapo::Config;
using dapo::UserError;
using dapo::test::TempDir;
using namespace dapo::trainer;

Config folders(const TempDir& dir, const std::string& ckpt, const std::string& log, const std::string& dump) {
  Config c = dapo::load_config("", {"--checkpoint.dir=" + dir.file(ckpt), "--log.dir=" + dir.file(log),
                                    "--dump.dir=" + dir.file(dump)});
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(RunGuard, DumpFolderThatIsTheCheckpointFolderIsRefused) {
  TempDir dir;
  const Config same = folders(dir, "run/ck", "run", "run/ck/");
  const std::string e = error_of([&] { check_folder_clash(same, true); });
  EXPECT_NE(e.find("command line: dump.dir: "), std::string::npos) << e;
  EXPECT_NE(e.find("the same folder as checkpoint.dir = " + dir.file("run/ck") + " (command line)"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(check_folder_clash(same, false));  // dumps off: no clash
  // Through a symlink, once the folders exist.
  fs::create_directories(dir.file("real"));
  fs::create_directory_symlink(dir.file("real"), dir.file("link"));
  EXPECT_NE(error_of([&] { check_folder_clash(folders(dir, "real", "logs", "link"), true); }), "");
  // log.dir may be either; distinct folders are fine.
  EXPECT_NO_THROW(check_folder_clash(folders(dir, "run", "run", "run/dumps"), true));
  EXPECT_NO_THROW(check_folder_clash(folders(dir, "a", "a", "a/../b"), true));
  EXPECT_NE(error_of([&] { check_folder_clash(folders(dir, "a", "logs", "b/../a"), true); }), "");
}

TEST(RunGuard, FolderThatCannotBeMadeNamesItsKey) {
  TempDir dir;
  dapo::test::write_text(dir.file("file"), "x");
  const std::string e = error_of([&] { check_folders_writable(folders(dir, "file/ck", "logs", "d"), false); });
  EXPECT_NE(e.find("command line: checkpoint.dir: cannot create the folder " + dir.file("file/ck")),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(check_folders_writable(folders(dir, "ck", "logs", "d"), true));
  EXPECT_TRUE(fs::is_directory(dir.file("d")));
  for (const auto& f : fs::directory_iterator(dir.file("ck"))) ADD_FAILURE() << "left behind: " << f.path();
}

TEST(RunGuard, TooLittleSpaceNamesFreeAndNeededBytes) {
  TempDir dir;
  const Config c = folders(dir, "ck", "logs", "d");
  fs::create_directories(dir.file("ck"));
  const std::string e = error_of([&] {
    check_free_space(c, "checkpoint.dir", c.checkpoint.dir, uint64_t(1) << 62, "a training checkpoint");
  });
  EXPECT_NE(e.find("command line: checkpoint.dir: " + dir.file("ck") + " has "), std::string::npos) << e;
  EXPECT_NE(e.find("free, but a training checkpoint of this model needs 4611686018427387904 bytes"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(check_free_space(c, "checkpoint.dir", c.checkpoint.dir, 1, "a training checkpoint"));
}

// A save that a full disk interrupted leaves its .partial; the next start
// (holding the lock) removes it, naming it, before it counts the free
// space, so that a requeued job does not refuse itself. Only the temporary
// files of dapo's own names go.
TEST(RunGuard, StalePartialsOfASaveAreRemovedBeforeTheSpaceCheck) {
  TempDir dir;
  const Config c = folders(dir, "ck", "logs", "d");
  fs::create_directories(dir.file("ck/step_00000009.h5.partial"));  // a folder: not dapo's file
  dapo::test::write_text(dir.file("ck/step_00000004.h5.partial"), std::string(1000, 'x'));
  dapo::test::write_text(dir.file("ck/notes.partial"), "the user's");
  dapo::test::write_text(dir.file("ck/step_00000003.h5"), "a checkpoint");
  dapo::test::write_text(dir.file("elsewhere"), "kept");
  fs::create_symlink(dir.file("elsewhere"), dir.file("ck/latest.partial"));
  // A sharded save's folder of dapo's files goes; one holding anything else stays.
  fs::create_directories(dir.file("ck/step_00000006.partial"));
  dapo::test::write_text(dir.file("ck/step_00000006.partial/rank_00001.h5"), std::string(500, 'y'));
  fs::create_directories(dir.file("ck/step_00000007.replaced"));
  dapo::test::write_text(dir.file("ck/step_00000007.replaced/index.h5"), std::string(20, 'z'));
  fs::create_directories(dir.file("ck/step_00000008.partial"));
  dapo::test::write_text(dir.file("ck/step_00000008.partial/rank_00000.h5"), "x");
  dapo::test::write_text(dir.file("ck/step_00000008.partial/mine.txt"), "the user's");
  const dapo::model::Qwen2Config mc =
      dapo::model::load_qwen2_config(std::string(DAPO_SOURCE_DIR) + "/inputs/demo/model/config.json");
  const dapo::parallel::Grid grid = dapo::parallel::make_grid(1);
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  check_checkpoint_space(c, grid, mc, true);
  const std::string said = testing::internal::GetCapturedStdout() + testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("checkpoint: removed the temporary files of a save that did not finish: " +
                      dir.file("ck/latest.partial") + " (0 bytes), " + dir.file("ck/step_00000004.h5.partial") +
                      " (1000 bytes), " + dir.file("ck/step_00000006.partial") + " (500 bytes), " +
                      dir.file("ck/step_00000007.replaced") + " (20 bytes)"),
            std::string::npos)
      << said;
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.file("ck/latest.partial"))));
  EXPECT_FALSE(fs::exists(dir.file("ck/step_00000004.h5.partial")));
  EXPECT_TRUE(fs::exists(dir.file("elsewhere")));  // the link went, not its target
  EXPECT_TRUE(fs::is_directory(dir.file("ck/step_00000009.h5.partial")));
  EXPECT_TRUE(fs::exists(dir.file("ck/notes.partial")));
  EXPECT_FALSE(fs::exists(dir.file("ck/step_00000006.partial")));
  EXPECT_FALSE(fs::exists(dir.file("ck/step_00000007.replaced")));
  EXPECT_EQ(dapo::test::read_text(dir.file("ck/step_00000008.partial/mine.txt")), "the user's");
  EXPECT_TRUE(fs::exists(dir.file("ck/step_00000008.partial/rank_00000.h5")));
  EXPECT_TRUE(fs::exists(dir.file("ck/step_00000003.h5")));
  // Nothing left: no line.
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  check_checkpoint_space(c, grid, mc, true);
  const std::string again = testing::internal::GetCapturedStdout() + testing::internal::GetCapturedStderr();
  EXPECT_EQ(again.find("removed"), std::string::npos) << again;
}

TEST(RunGuard, CheckpointSizeCountsWeightsAndMoments) {
  const dapo::model::Qwen2Config mc =
      dapo::model::load_qwen2_config(std::string(DAPO_SOURCE_DIR) + "/inputs/demo/model/config.json");
  const uint64_t weights = checkpoint_bytes(mc, false), training = checkpoint_bytes(mc, true);
  // The demo model: 392 x 128 embedding (tied), 4 layers.
  const uint64_t layer = 128 * 128 * 2 + 64 * 128 * 2 + 128 + 64 * 2 + 3 * 128 * 256 + 2 * 128;
  const uint64_t params = 392 * 128 + 4 * layer + 128;
  EXPECT_GE(weights, params * 4);
  EXPECT_LT(weights, params * 4 + (uint64_t(2) << 20));
  EXPECT_GE(training, params * 12);
  EXPECT_LT(training, params * 12 + (uint64_t(2) << 20));
}

TEST(RunGuard, LockRefusesASecondHolderAndIsFreeAfter) {
  TempDir dir;
  const dapo::parallel::Grid grid = dapo::parallel::make_grid(1);
  const Config c = folders(dir, "run", "run", "run/dumps");
  {
    std::optional<RunLock> first;
    first.emplace(c, grid);
    const std::string line = dapo::test::read_text(dir.file("run/.dapo.lock"));
    EXPECT_NE(line.find("pid " + std::to_string(getpid()) + ", started "), std::string::npos) << line;
    // Another open file description (as another process has) cannot take it.
    const int fd = ::open(dir.file("run/.dapo.lock").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
    ::close(fd);
    // Nor a second run: refused, naming the holder (checkpoint.dir and
    // log.dir are one folder: one lock).
    const std::string e = error_of([&] { RunLock second(c, grid); });
    EXPECT_NE(e.find("command line: checkpoint.dir: " + dir.file("run") + " is in use by another dapo run (" +
                     line.substr(0, line.size() - 1) + "; lock file " + dir.file("run/.dapo.lock") + ")"),
              std::string::npos)
        << e;
    first.reset();
  }
  // The file stays; the lock does not.
  ASSERT_TRUE(fs::exists(dir.file("run/.dapo.lock")));
  EXPECT_NO_THROW(RunLock(c, grid));
  EXPECT_FALSE(fs::exists(dir.file("run/dumps/.dapo.lock")));  // dump.dir is not locked
}

// log.dir of a finished run: its metrics.jsonl is refused to a new run
// (another configuration, or none beside it), and kept for the same run
// started again or continued from its checkpoint.dir.
TEST(RunGuard, AnotherRunsLogIsRefusedAndTheSameRunsIsNot) {
  TempDir dir;
  const dapo::parallel::Grid grid = dapo::parallel::make_grid(1);
  const Config first = folders(dir, "a/ck", "log", "a/dumps");
  fs::create_directories(dir.file("log"));
  // No metrics yet, or an empty file: nothing to lose.
  EXPECT_NO_THROW(check_log_dir_owner(first, grid, false));
  dapo::test::write_text(dir.file("log/metrics.jsonl"), "");
  EXPECT_NO_THROW(check_log_dir_owner(first, grid, false));
  dapo::test::write_text(dir.file("log/metrics.jsonl"), "{\"step\": 1, \"x\": 2.0}\n");
  // A metrics.jsonl with no config.ini beside it: not this run's.
  std::string e = error_of([&] { check_log_dir_owner(first, grid, false); });
  EXPECT_NE(e.find("command line: log.dir: " + dir.file("log") + " holds another run's metrics.jsonl (22 bytes; "
                   "no config.ini beside it names its run)"),
            std::string::npos)
      << e;
  dapo::test::write_text(dir.file("log/config.ini"), dapo::config_to_ini(first));
  EXPECT_NO_THROW(check_log_dir_owner(first, grid, false));  // the same run again
  Config restarted = first;  // how it starts is no part of which run it is
  restarted.checkpoint.resume = "never";
  EXPECT_NO_THROW(check_log_dir_owner(restarted, grid, false));
  // Another configuration with another checkpoint.dir: refused, resuming or not.
  const Config other = folders(dir, "b/ck", "log", "b/dumps");
  for (const bool resuming : {false, true}) {
    e = error_of([&] { check_log_dir_owner(other, grid, resuming); });
    EXPECT_NE(e.find("its config.ini is another configuration, with checkpoint.dir = " + dir.file("a/ck")),
              std::string::npos)
        << e;
  }
  // The first run's checkpoint.dir, other settings: continued when it
  // resumes from a checkpoint there (through a symlink too), a new run at
  // step 0 otherwise.
  Config changed = first;
  changed.optim.lr *= 2;
  EXPECT_NO_THROW(check_log_dir_owner(changed, grid, true));
  fs::create_directories(dir.file("a/ck"));
  fs::create_directory_symlink(dir.file("a"), dir.file("a_link"));
  Config linked = folders(dir, "a_link/ck", "log", "a/dumps");
  EXPECT_NO_THROW(check_log_dir_owner(linked, grid, true));
  e = error_of([&] { check_log_dir_owner(changed, grid, false); });
  EXPECT_NE(e.find("(22 bytes; its config.ini is another configuration), which this run would overwrite"),
            std::string::npos)
      << e;
  EXPECT_EQ(dapo::test::read_text(dir.file("log/metrics.jsonl")), "{\"step\": 1, \"x\": 2.0}\n");
}

}  // namespace
