// Exact restart on the CPU backend: 4 DAPO steps in one run and 2 steps +
// checkpoint + a new trainer that resumes + 2 steps end in bitwise
// identical weights, Adam moments, optimizer step count and prompt order,
// and identical metrics (times aside). The demo task and tokenizer with a
// fresh random model (dynamic sampling off: a random model solves nothing).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "dapo/data/dataset.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/trainer/checkpoint_saver.h"
#include "dapo/trainer/checkpointing.h"
#include "dapo/trainer/run_files.h"
#include "dapo/trainer/dapo_trainer.h"
#include "dapo/trainer/model_init.h"
#include "io/io_test_util.h"
#include "model/model_test_util.h"

namespace dapo::trainer {
namespace {

std::string src(const std::string& rel) { return std::string(DAPO_SOURCE_DIR) + "/" + rel; }

Config tiny_run(const std::string& dir) {
  return load_config(src("inputs/demo.ini"),
                     {"model.path=" + src("inputs/demo/model"), "model.tokenizer=" + src("inputs/demo/tokenizer.json"),
                      "data.train_files=" + src("inputs/demo/train.jsonl"), "data.val_files=",
                      "algorithm.dynamic_sampling=false", "rollout.n=3", "rollout.gen_batch_size=4",
                      "rollout.max_response_length=12", "algorithm.overlong_buffer_len=4",
                      "train.train_batch_size=4", "train.ppo_mini_batch_size=2", "train.ppo_epochs=2",
                      "optim.lr=1e-3", "optim.warmup_steps=1", "optim.weight_decay=0.01",
                      "checkpoint.dir=" + dir, "log.dir=" + dir});
}

struct TrainingRun {
  InitialModel initial;
  data::Tokenizer tokenizer;
  data::PromptDataset data;
  PromptSet prompts;
  DapoTrainer trainer;

  TrainingRun(const Config& c, const parallel::Grid& grid)
      : initial(load_initial_model(c, grid)),
        tokenizer(data::Tokenizer::load(c.model.tokenizer)),
        data(data::PromptDataset::load_list(c.data.train_files, "data.train_files")),
        prompts(data, tokenizer, prompt_set_options(c, initial.params->config().vocab_size)),
        trainer(*initial.params, nullptr, grid, c, tokenizer, prompts) {}
};

// Metrics without wall times (which differ from run to run).
std::vector<std::pair<std::string, MetricValue>> timeless(const Metrics& m) {
  std::vector<std::pair<std::string, MetricValue>> out;
  for (const auto& [k, v] : m.items())
    if (k.rfind("timing_s/", 0) != 0 && k != "perf/throughput" && k != "perf/gen_throughput") out.emplace_back(k, v);
  return out;
}

std::vector<float> moments(const optim::AdamW& opt, const model::ParamStore& params) {
  std::vector<float> out;
  for (const model::ParamEntry& e : params.entries()) {
    std::vector<float> m(size_t(e.param.numel())), v(m.size());
    opt.read_local(e.spec.name, m.data(), v.data(), e.param.numel());
    out.insert(out.end(), m.begin(), m.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(Resume, TwoPlusTwoStepsEqualFourBitForBit) {
  test::TempDir dir;
  const parallel::Grid grid = parallel::make_grid(1);
  const Config one = tiny_run(dir.file("one"));
  TrainingRun straight(one, grid);
  std::vector<Metrics> want;
  for (int s = 0; s < 4; ++s) want.push_back(straight.trainer.step().metrics);

  const Config two = tiny_run(dir.file("two"));
  {
    TrainingRun first(two, grid);
    for (int s = 0; s < 2; ++s) EXPECT_EQ(timeless(first.trainer.step().metrics), timeless(want[size_t(s)]));
    // The KV pool's cap is pinned after the first step's generation, and saved.
    EXPECT_GT(first.trainer.kv_cache_cap_bytes(), 0);
    save_training_state(two, grid, first.trainer.params(), first.trainer.optimizer(), first.trainer.order(), 2,
                        first.trainer.kv_cache_cap_bytes());
    EXPECT_EQ(io::CheckpointReader(dir.file("two/step_00000002"), grid.world).info().state.kv_cache_cap_bytes,
              first.trainer.kv_cache_cap_bytes());
  }
  TrainingRun second(two, grid);  // a fresh process would start here: model.path's random init
  const std::optional<ResumePoint> p = resume_training(two, grid, second.trainer.params(), second.trainer.optimizer());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, dir.file("two/step_00000002"));
  EXPECT_EQ(p->step, 2);
  second.trainer.restore(p->step, p->order, p->path);
  EXPECT_EQ(second.trainer.kv_cache_cap_bytes(), 0);
  second.trainer.restore_kv_cache_cap(p->kv_cache_cap_bytes);
  EXPECT_EQ(second.trainer.kv_cache_cap_bytes(), straight.trainer.kv_cache_cap_bytes());
  for (int s = 2; s < 4; ++s) {
    const DapoStepResult r = second.trainer.step();
    EXPECT_EQ(r.step, s + 1);
    EXPECT_EQ(timeless(r.metrics), timeless(want[size_t(s)])) << "step " << s + 1;
  }
  EXPECT_EQ(test::host_copy(second.trainer.params().parameters()), test::host_copy(straight.trainer.params().parameters()));
  EXPECT_EQ(moments(second.trainer.optimizer(), second.trainer.params()),
            moments(straight.trainer.optimizer(), straight.trainer.params()));
  EXPECT_EQ(second.trainer.optimizer().steps_taken(), straight.trainer.optimizer().steps_taken());
  EXPECT_EQ(second.trainer.order().state(), straight.trainer.order().state());
}

// keep_last prunes only after the new checkpoint and `latest` are written;
// resume = auto skips a damaged newest checkpoint and a stale .partial.
TEST(Resume, KeepLastAndFallbackToThePreviousCheckpoint) {
  test::TempDir dir;
  const parallel::Grid grid = parallel::make_grid(1);
  Config c = tiny_run(dir.file("ck"));
  c.checkpoint.keep_last = 2;
  TrainingRun run(c, grid);
  for (int s = 1; s <= 3; ++s) {
    run.trainer.step();
    save_training_state(c, grid, run.trainer.params(), run.trainer.optimizer(), run.trainer.order(), s);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/step_00000001")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ck/step_00000002")));
  EXPECT_EQ(test::read_text(dir.file("ck/latest")), "step_00000003\n");
  // An interrupted save of step 4 and a damaged step 3.
  std::filesystem::create_directory(dir.file("ck/step_00000004.partial"));
  test::write_text(dir.file("ck/step_00000004.partial/rank_00000.h5"), "half a file");
  std::filesystem::resize_file(dir.file("ck/step_00000003/rank_00000.h5"), 1000);
  TrainingRun again(c, grid);
  const std::optional<ResumePoint> p = resume_training(c, grid, again.trainer.params(), again.trainer.optimizer());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 2);
  // Every candidate damaged: an error, not a silent fresh start.
  std::filesystem::resize_file(dir.file("ck/step_00000002/rank_00000.h5"), 1000);
  EXPECT_NE(test::error_of([&] { resume_training(c, grid, again.trainer.params(), again.trainer.optimizer()); })
                .find("checkpoint.resume = auto: none of the 2 checkpoints in " + dir.file("ck") + " loads"),
            std::string::npos);
  // resume = never starts fresh - but not over another run's checkpoints,
  // which it would overwrite and prune.
  c.checkpoint.resume = "never";
  EXPECT_EQ(test::error_of([&] { resume_training(c, grid, again.trainer.params(), again.trainer.optimizer()); }),
            "default: checkpoint.resume = never, but checkpoint.dir = " + dir.file("ck") +
                " holds another run's checkpoints (newest: " + dir.file("ck/step_00000003") +
                "): move them away or choose another checkpoint.dir to start afresh, or resume from them with "
                "checkpoint.resume = auto");
  c.checkpoint.dir = dir.file("empty");
  EXPECT_FALSE(resume_training(c, grid, again.trainer.params(), again.trainer.optimizer()).has_value());
}

// A run that resumes from an earlier step than the newest checkpoint of its
// checkpoint.dir (another run's step 50 there) never prunes what it wrote:
// keep_last = 1 keeps its own newest checkpoint, which `latest` names, and
// leaves the later step alone.
TEST(Resume, PruningNeverDeletesThisRunsNewestCheckpoint) {
  test::TempDir dir;
  const parallel::Grid grid = parallel::make_grid(1);
  Config c = tiny_run(dir.file("ck"));
  c.checkpoint.keep_last = 1;
  TrainingRun run(c, grid);
  run.trainer.step();
  save_training_state(c, grid, run.trainer.params(), run.trainer.optimizer(), run.trainer.order(), 50);
  Config start = c;
  start.checkpoint.dir = dir.file("start");
  save_training_state(start, grid, run.trainer.params(), run.trainer.optimizer(), run.trainer.order(), 1);

  c.checkpoint.resume = dir.file("start/step_00000001");
  TrainingRun resumed(c, grid);
  testing::internal::CaptureStderr();
  const std::optional<ResumePoint> p = resume_training(c, grid, resumed.trainer.params(), resumed.trainer.optimizer());
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("checkpoint.dir = " + dir.file("ck") + " holds checkpoints past step 1 (newest: "
                        "step_00000050)"),
            std::string::npos)
      << warned;
  ASSERT_TRUE(p.has_value());
  resumed.trainer.restore(p->step, p->order, p->path);
  for (int64_t s = 2; s <= 3; ++s) {
    resumed.trainer.step();
    save_training_state(c, grid, resumed.trainer.params(), resumed.trainer.optimizer(), resumed.trainer.order(), s);
    EXPECT_TRUE(std::filesystem::exists(dir.file("ck/" + checkpoint_name(s)))) << "step " << s;
    EXPECT_EQ(test::read_text(dir.file("ck/latest")), checkpoint_name(s) + "\n");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/step_00000002")));  // keep_last = 1: the older one of this run
  EXPECT_TRUE(std::filesystem::exists(dir.file("ck/step_00000050")));

  // `latest` naming a checkpoint that is gone: a warning naming it, then the newest one.
  std::filesystem::remove_all(dir.file("ck/step_00000003"));
  c.checkpoint.resume = "auto";
  testing::internal::CaptureStderr();
  const std::optional<ResumePoint> q = resume_training(c, grid, resumed.trainer.params(), resumed.trainer.optimizer());
  const std::string latest_warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(latest_warning.find(dir.file("ck/latest") + " names " + dir.file("ck/step_00000003") +
                                ", which does not exist; trying the newest step_* checkpoint instead"),
            std::string::npos)
      << latest_warning;
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->step, 50);

  // `latest` naming a path, inside or outside checkpoint.dir: refused, its
  // bytes escaped (an ESC must not reach the terminal), nothing loaded.
  for (const std::string& name : std::vector<std::string>{"../../other/ck/step_00000050.h5\x1b[2J", dir.file("ck/step_00000050.h5"), ".."}) {
    test::write_text(dir.file("ck/latest"), name + "\n");
    try {
      resume_training(c, grid, resumed.trainer.params(), resumed.trainer.optimizer());
      ADD_FAILURE() << "latest = " << name << " was accepted";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("checkpoint.dir: " + dir.file("ck/latest") + " names '"), std::string::npos) << what;
      EXPECT_NE(what.find("', not a file in " + dir.file("ck")), std::string::npos) << what;
      EXPECT_EQ(what.find('\x1b'), std::string::npos) << what;
    }
  }
}


// The rank file's values (format 3: /data).
std::vector<float> rank_data(const std::string& checkpoint) {
  const io::H5File f = io::H5File::open_local((std::filesystem::path(checkpoint) / "rank_00000.h5").string());
  const std::vector<int64_t> shape = f.dataset_shape("/data");
  std::vector<float> out(static_cast<size_t>(shape[0]));
  f.read("/data", io::Hyperslab::whole(shape), out.data());
  return out;
}

// A save in the background holds the state of the step it was started at,
// whatever the steps after it change; a second save first finishes the
// first; poll() commits once the write is done; finish() (the end of a
// run, a stop signal) waits for it. The bytes equal a save made at once.
TEST(CheckpointSaver, BackgroundSavesHoldTheirStepsStateAndCommitInOrder) {
  test::TempDir dir;
  const parallel::Grid grid = parallel::make_grid(1);
  const Config c = tiny_run(dir.file("async"));
  const Config at_once = tiny_run(dir.file("sync"));
  TrainingRun run(c, grid), twin(at_once, grid);
  CheckpointSaver saver(c, grid, run.trainer.params(), run.trainer.optimizer(), true);
  EXPECT_GT(saver.host_bytes(), size_t(0));
  for (int64_t s = 1; s <= 2; ++s) {
    run.trainer.step();
    twin.trainer.step();
    // s = 2: finishes (and commits) step 1's save first, and says so.
    EXPECT_EQ(saver.start(s, run.trainer.order()), s == 1 ? std::string() : dir.file("async/step_00000001"));
    EXPECT_TRUE(saver.in_flight());
    EXPECT_EQ(saver.step_in_flight(), s);
    save_training_state(at_once, grid, twin.trainer.params(), twin.trainer.optimizer(), twin.trainer.order(), s);
  }
  run.trainer.step();  // changes every weight and moment while step 2's save may still run
  EXPECT_EQ(saver.finish(), dir.file("async/step_00000002"));
  EXPECT_FALSE(saver.in_flight());
  EXPECT_EQ(saver.finish(), "");
  for (const char* name : {"step_00000001", "step_00000002"})
    EXPECT_EQ(rank_data(dir.file(std::string("async/") + name)), rank_data(dir.file(std::string("sync/") + name)))
        << name;
  EXPECT_EQ(test::read_text(dir.file("async/latest")), "step_00000002\n");

  // poll() commits once every rank's write is done, and not before.
  saver.start(3, run.trainer.order());
  std::string committed;
  for (int i = 0; i < 2000 && committed.empty(); ++i) {
    committed = saver.poll();
    if (committed.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(committed, dir.file("async/step_00000003"));
  EXPECT_FALSE(saver.in_flight());
  EXPECT_EQ(test::read_text(dir.file("async/latest")), "step_00000003\n");
  // Resuming from the background save gives step 3's state exactly.
  TrainingRun again(c, grid);
  const std::optional<ResumePoint> p = resume_training(c, grid, again.trainer.params(), again.trainer.optimizer());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 3);
  EXPECT_EQ(test::host_copy(again.trainer.params().parameters()), test::host_copy(run.trainer.params().parameters()));
  EXPECT_EQ(moments(again.trainer.optimizer(), again.trainer.params()),
            moments(run.trainer.optimizer(), run.trainer.params()));

  // A save never committed (a crash before the write ended) leaves its
  // temporary folder only: latest and resume still see step 3.
  {
    CheckpointSaver crashed(c, grid, run.trainer.params(), run.trainer.optimizer(), true);
    crashed.start(4, run.trainer.order());
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("async/step_00000004")));
  EXPECT_EQ(test::read_text(dir.file("async/latest")), "step_00000003\n");
}

// Checkpoints of older dapo versions (one file, format 2) still resume.
TEST(Resume, FormatTwoFilesOfOlderRunsStillResume) {
  test::TempDir dir;
  const parallel::Grid grid = parallel::make_grid(1);
  const Config c = tiny_run(dir.file("ck"));
  TrainingRun run(c, grid);
  run.trainer.step();
  run.trainer.step();
  io::CheckpointInfo info = checkpoint_info(c, grid, run.trainer.params().config(), 2);
  info.training = true;
  info.state.optimizer_steps = run.trainer.optimizer().steps_taken();
  info.state.rng_seed = uint64_t(c.train.seed);
  const data::PromptOrderState os = run.trainer.order().state();
  info.state.data_seed = os.seed;
  info.state.data_size = os.size;
  info.state.data_epoch = os.cursor.epoch;
  info.state.data_position = os.cursor.position;
  std::vector<float> m, v;
  auto moment = [&](bool first) -> io::SliceSource {
    return [&, first](const model::ParamSpec& spec, const model::SliceSpec&) -> const float* {
      const int64_t n = run.trainer.params().param(spec.name).numel();
      m.resize(size_t(n));
      v.resize(size_t(n));
      run.trainer.optimizer().read_local(spec.name, m.data(), v.data(), n);
      return first ? m.data() : v.data();
    };
  };
  std::filesystem::create_directories(dir.file("ck"));
  io::save_training_checkpoint(dir.file("ck/step_00000002.h5"), grid.world, io::ShardPlace::of(grid), info,
                               info.state.rng_seed,
                               [&](const model::ParamSpec& spec, const model::SliceSpec&) -> const float* {
                                 return run.trainer.params().param(spec.name).ptr<float>();
                               },
                               moment(true), moment(false));
  test::write_text(dir.file("ck/latest"), "step_00000002.h5\n");
  TrainingRun again(c, grid);
  const std::optional<ResumePoint> p = resume_training(c, grid, again.trainer.params(), again.trainer.optimizer());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, dir.file("ck/step_00000002.h5"));
  EXPECT_EQ(test::host_copy(again.trainer.params().parameters()), test::host_copy(run.trainer.params().parameters()));
  EXPECT_EQ(moments(again.trainer.optimizer(), again.trainer.params()),
            moments(run.trainer.optimizer(), run.trainer.params()));
  // The next save is a folder beside it, and pruning counts both kinds.
  save_training_state(c, grid, again.trainer.params(), again.trainer.optimizer(), again.trainer.order(), 3);
  EXPECT_TRUE(io::is_sharded_checkpoint(dir.file("ck/step_00000003")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ck/step_00000002.h5")));
}

}  // namespace
}  // namespace dapo::trainer
