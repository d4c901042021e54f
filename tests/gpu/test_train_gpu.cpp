// DAPO training steps on one GPU (generation on the GPU engine, the update
// through UpdateRunner, AdamW on the device): 4 steps in one run and 2
// steps + checkpoint (saved in the background while a third step runs) + a
// new trainer that resumes + 2 steps end in bitwise
// identical weights, Adam moments, step count, prompt order and metrics
// (times aside), as on the CPU (tests/trainer/test_resume.cpp). The demo
// task and tokenizer with a fresh random model, dynamic sampling off.
#include <filesystem>

#include "dapo/data/dataset.h"
#include "dapo/trainer/checkpoint_saver.h"
#include "dapo/trainer/checkpointing.h"
#include "dapo/trainer/dapo_trainer.h"
#include "dapo/trainer/model_init.h"
#include "gpu/gpu_test_util.h"
#include "io/io_test_util.h"

namespace dapo::test {
namespace {

std::string src(const std::string& rel) { return std::string(DAPO_SOURCE_DIR) + "/" + rel; }

Config tiny_gpu_run(const std::string& dir) {
  return load_config(src("inputs/demo.ini"),
                     {"model.path=" + src("inputs/demo/model"), "model.tokenizer=" + src("inputs/demo/tokenizer.json"),
                      "data.train_files=" + src("inputs/demo/train.jsonl"), "data.val_files=",
                      "parallel.backend=cuda", "algorithm.dynamic_sampling=false", "rollout.n=3",
                      "rollout.gen_batch_size=4", "rollout.max_response_length=12",
                      "algorithm.overlong_buffer_len=4", "train.train_batch_size=4", "train.ppo_mini_batch_size=2",
                      "train.ppo_epochs=2", "optim.lr=1e-3", "optim.warmup_steps=1", "optim.weight_decay=0.01",
                      "checkpoint.dir=" + dir, "log.dir=" + dir});
}

struct GpuTrainingRun {
  trainer::InitialModel initial;
  data::Tokenizer tokenizer;
  data::PromptDataset data;
  trainer::PromptSet prompts;
  trainer::DapoTrainer trainer;

  GpuTrainingRun(const Config& c, const parallel::Grid& grid, const ops::CudaDevice* gpu)
      : initial(trainer::load_initial_model(c, grid, gpu)),
        tokenizer(data::Tokenizer::load(c.model.tokenizer)),
        data(data::PromptDataset::load_list(c.data.train_files, "data.train_files")),
        prompts(data, tokenizer, trainer::prompt_set_options(c, initial.params->config().vocab_size)),
        trainer(*initial.params, nullptr, grid, c, tokenizer, prompts, gpu) {}
};

std::vector<std::pair<std::string, trainer::MetricValue>> timeless(const trainer::Metrics& m) {
  std::vector<std::pair<std::string, trainer::MetricValue>> out;
  for (const auto& [k, v] : m.items())
    if (k.rfind("timing_s/", 0) != 0 && k != "perf/throughput" && k != "perf/gen_throughput") out.emplace_back(k, v);
  return out;
}

// Every weight and both moments, through the checkpoints' host staging.
std::vector<float> state_of(trainer::DapoTrainer& t) {
  std::vector<float> out;
  model::ParamHostAccess host(t.params());
  for (const model::ParamEntry& e : t.params().entries()) {
    const int64_t n = e.param.numel();
    const float* w = host.read_source(e.spec.name);
    out.insert(out.end(), w, w + n);
    std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    t.optimizer().read_local(e.spec.name, m.data(), v.data(), n);
    out.insert(out.end(), m.begin(), m.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

class TrainGpu : public GpuTest {};

TEST_F(TrainGpu, TwoPlusTwoStepsEqualFourBitForBit) {
  TempDir dir;
  const parallel::Grid grid = parallel::make_grid(1);
  const Config one = tiny_gpu_run(dir.file("one"));
  GpuTrainingRun straight(one, grid, device_.get());
  ASSERT_EQ(straight.trainer.params().device(), Device::cuda);
  std::vector<trainer::Metrics> want;
  for (int s = 0; s < 4; ++s) want.push_back(straight.trainer.step().metrics);
  EXPECT_GT(want[0].get("response_length/mean"), 0);

  const Config two = tiny_gpu_run(dir.file("two"));
  {
    GpuTrainingRun first(two, grid, device_.get());
    for (int s = 0; s < 2; ++s) EXPECT_EQ(timeless(first.trainer.step().metrics), timeless(want[size_t(s)]));
    // Saved in the background (pinned snapshot): the step run before the
    // save commits changes the device state, not the checkpoint.
    trainer::CheckpointSaver saver(two, grid, first.trainer.params(), first.trainer.optimizer(), true);
    saver.start(2, first.trainer.order());
    first.trainer.step();
    EXPECT_EQ(saver.finish(), dir.file("two/step_00000002"));
  }
  GpuTrainingRun second(two, grid, device_.get());
  const std::optional<trainer::ResumePoint> p =
      trainer::resume_training(two, grid, second.trainer.params(), second.trainer.optimizer());
  ASSERT_TRUE(p.has_value());
  second.trainer.restore(p->step, p->order, p->path);
  for (int s = 2; s < 4; ++s) {
    const trainer::DapoStepResult r = second.trainer.step();
    EXPECT_EQ(timeless(r.metrics), timeless(want[size_t(s)])) << "step " << s + 1;
  }
  EXPECT_EQ(state_of(second.trainer), state_of(straight.trainer));
  EXPECT_EQ(second.trainer.optimizer().steps_taken(), straight.trainer.optimizer().steps_taken());
  EXPECT_EQ(second.trainer.order().state(), straight.trainer.order().state());
  const ops::DeviceFlags f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count + f.non_finite_count, 0);
}

}  // namespace
}  // namespace dapo::test
