// One DAPO training step on GPUs, phase by phase, with random weights of a
// Qwen2.5 shape (0.5b, 1.5b, 7b) and prompts of the demo task (its
// tokenizer's ids are a subset of the real vocabulary). A random model
// almost never samples EOS, so every response runs to
// rollout.max_response_length and dynamic sampling is off (it would drop
// every group: a random model solves nothing). Runs the same DapoTrainer
// as `dapo train` (generation on the GPU engine, verification, balancing,
// old log-probs, the update with AdamW) under mpirun for tp x dp.
// Prints one JSON line (world rank 0) with the mean seconds of each phase
// over the measured steps (after one warm-up step), tokens/s per GPU
// (generated + trained), and GPU memory: weights + gradients + optimizer
// state, the KV pool, the update's activation and scratch arenas at their
// peak, and the device's use while generating; and how far the sampler's
// log-probs of the trained tokens lie from the trainer's old log-probs
// (rollout_corr_*: the metrics' mean KL and mean difference, their largest
// difference; --train.fp32_logits=false: with bf16 logits in the trainer).
// Compare with bench/peers/peer_dapo_step.py (HF generate + a PyTorch update of
// the same load) run in the same device command.
// --mean-len M: the paper's shape instead of fixed lengths. Every M-th id of
// the vocabulary is an EOS of the model (its config.json's eos_token_id),
// so that the near-uniform random model answers in geometric lengths of
// mean ~M, capped at --len, as bench_generate_gpu --dapo draws them; the
// micro-batches then hold the longest prompt and answer. The JSON adds the
// answers' mean and longest length.
//   mpirun --bind-to none -np 4 bench_dapo_step_gpu 7b --tp 4 [--prompts 32 --n 8 --len 512 --steps 2] [--key=value ...]
//   bench_dapo_step_gpu 1.5b --prompts 32 --n 16 --len 20480 --mean-len 3000
// (--train.activation_recompute=true|false: the demo recipe's default is off;
// a load the memory plan says will not fit exits 2 with the plan.)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/core/config.h"
#include "dapo/core/log.h"
#include "dapo/data/dataset.h"
#include "dapo/optim/shard_layout.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/dapo_trainer.h"
#include "dapo/trainer/memory_plan.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/rank_device.h"
#include "qwen25_shapes.h"

using namespace dapo;

namespace {

// A repository file: from the working directory when run from a repository
// root (a copy shipped to a GPU machine), else from this build's sources.
std::string src(const std::string& rel) {
  if (std::filesystem::exists(rel)) return rel;
  return (std::filesystem::path(DAPO_SOURCE_DIR) / rel).string();
}

}  // namespace

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  std::string size = "1.5b";
  int64_t tp = 1, prompts = 32, n = 8, len = 512, steps = 2, mean_len = 0;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::stoll(argv[++i]) : 0LL; };
    if (a == "--tp") tp = next();
    else if (a == "--prompts") prompts = next();
    else if (a == "--n") n = next();
    else if (a == "--len") len = next();
    else if (a == "--steps") steps = next();
    else if (a == "--mean-len") mean_len = next();
    else if (a.rfind("--", 0) == 0) extra.push_back(a.substr(2));
    else size = a;
  }
  if (ops::cuda_device_count() == 0) {
    if (runtime.world_rank() == 0) std::printf("{\"bench\": \"dapo_step_gpu\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  configure_logging({runtime.world_rank(), false, LogLevel::warn});
  // Progress on stderr, so that a run cut short by a time limit shows how far it got.
  const auto t_start = Clock::now();
  auto progress = [&](const char* what) {
    if (runtime.world_rank() == 0)
      std::fprintf(stderr, "bench_dapo_step_gpu: %s at %.1f s\n", what, seconds_since(t_start));
  };
  progress("loading the model");
  model::Qwen2Config shape = bench::qwen25(size, "bench_dapo_step_gpu");
  if (mean_len > 0)
    for (int64_t id = 3; id < shape.vocab_size; id += mean_len) shape.eos_token_ids.push_back(id);
  // A config.json-only model directory: load_initial_model draws random weights.
  const std::string model_dir = "/tmp/dapo_bench_model_" + size;
  if (runtime.world_rank() == 0) {
    std::filesystem::create_directories(model_dir);
    std::ofstream(model_dir + "/config.json") << model::qwen2_config_to_json(shape);
  }
  parallel::Comm::world().barrier();
  std::vector<std::string> overrides{
      "model.path=" + model_dir, "model.tokenizer=" + src("inputs/demo/tokenizer.json"),
      "data.train_files=" + src("inputs/demo/train.jsonl"), "data.val_files=", "log.dir=/tmp/dapo_bench_log",
      "parallel.backend=cuda", "parallel.tp=" + std::to_string(tp), "algorithm.dynamic_sampling=false",
      "rollout.n=" + std::to_string(n), "rollout.gen_batch_size=" + std::to_string(prompts),
      "rollout.max_response_length=" + std::to_string(len), "algorithm.overlong_buffer_len=" + std::to_string(len / 4),
      "train.train_batch_size=" + std::to_string(prompts),
      "train.ppo_mini_batch_size=" + std::to_string(std::max<int64_t>(1, prompts / 2)),
      // Room for the longest prompt and answer in one micro-batch.
      "train.max_token_len_per_gpu=" + std::to_string(std::max<int64_t>(8192, len + 512)), "optim.lr=1e-6"};
  for (const std::string& e : extra) overrides.push_back(e);
  const Config config = load_config(src("inputs/demo.ini"), overrides);
  check_training_config(config);
  const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
  const std::unique_ptr<ops::CudaDevice> gpu = trainer::open_rank_device(config, grid, grid.local_rank);
  // As `dapo train` does: a load that cannot fit stops before the model is
  // drawn, with the plan and what to change.
  const trainer::MemoryPlan plan = trainer::memory_plan(config, shape, grid.tp_size, grid.dp_size, gpu->memory_total());
  if (!plan.fits()) {
    if (runtime.world_rank() == 0)
      std::fprintf(stderr, "bench_dapo_step_gpu: does not fit\n%s\n", trainer::format_memory_plan(plan, config).c_str());
    return 2;
  }
  const size_t before = gpu->memory_used();
  trainer::InitialModel initial = trainer::load_initial_model(config, grid, gpu.get());
  const data::Tokenizer tokenizer = data::Tokenizer::load(config.model.tokenizer);
  const data::PromptDataset data = data::PromptDataset::load_list(config.data.train_files, "data.train_files");
  const trainer::PromptSet set(data, tokenizer, trainer::prompt_set_options(config, shape.vocab_size));
  trainer::DapoTrainer t(*initial.params, nullptr, grid, config, tokenizer, set, gpu.get());
  // The device's use while generating, sampled every 64 engine steps.
  size_t gen_used = 0;
  int64_t calls = 0;
  t.set_progress([&](const rollout::GenerationProgress&) {
    if (calls++ % 64 == 0) gen_used = std::max(gen_used, gpu->memory_used());
  });
  const size_t state_bytes = optim::train_state_bytes(shape, grid.tp_size, grid.dp_size, Device::cuda,
                                                      config.optim.shard_optimizer)
                                 .total();

  const char* keys[] = {"timing_s/gen", "timing_s/reward", "timing_s/balance", "timing_s/old_log_prob",
                        "timing_s/update_actor", "timing_s/step"};
  std::vector<double> sum(std::size(keys), 0.0);
  double trained = 0, generated = 0, length_mean = 0, length_max = 0;
  // The sampler's log-probs of the trained tokens against the trainer's old
  // ones (rollout_corr/*): the mean of the KL and mean differences, the
  // largest difference over the measured steps.
  double corr_kl = 0, corr_mean = 0, corr_max = 0;
  progress("model ready; warm-up step");
  t.step();  // warm-up: plans, graphs, arenas
  for (int64_t s = 0; s < steps; ++s) {
    progress("step");
    const trainer::DapoStepResult r = t.step();
    for (size_t k = 0; k < std::size(keys); ++k) sum[k] += r.metrics.get(keys[k]);
    trained += r.metrics.get("perf/total_num_tokens");
    generated += r.metrics.get("perf/gen_throughput") * r.metrics.get("timing_s/gen");
    length_mean += r.metrics.get("response_length/mean") / double(steps);
    length_max = std::max(length_max, r.metrics.get("response_length/max"));
    corr_kl += r.metrics.get("rollout_corr/kl") / double(steps);
    corr_mean += r.metrics.get("rollout_corr/mean_abs_logprob_diff") / double(steps);
    corr_max = std::max(corr_max, r.metrics.get("rollout_corr/max_abs_logprob_diff"));
  }
  const trainer::UpdateRunner::ArenaUse arenas = t.last_update_memory();
  const double gib = double(size_t(1) << 30), step_s = sum[5] / double(steps);
  const int world = grid.world_size();
  if (runtime.world_rank() == 0) {
    std::printf("{\"bench\": \"dapo_step_gpu\", \"model\": \"%s\", \"gpu\": \"%s\", \"gpus\": %d, \"tp\": %d, "
                "\"dp\": %d, \"prompts\": %lld, \"n\": %lld, \"response_len\": %lld, \"mean_len\": %lld, "
                "\"length_mean\": %.0f, \"length_max\": %.0f, \"steps\": %lld",
                size.c_str(), gpu->name().c_str(), world, grid.tp_size, grid.dp_size, (long long)prompts,
                (long long)n, (long long)len, (long long)mean_len, length_mean, length_max, (long long)steps);
    for (size_t k = 0; k < std::size(keys); ++k)
      std::printf(", \"%s\": %.3f", std::string(keys[k]).substr(9).append("_s").c_str(), sum[k] / double(steps));
    std::printf(", \"rollout_corr_kl\": %.3g, \"rollout_corr_mean_abs_logprob_diff\": %.3g, "
                "\"rollout_corr_max_abs_logprob_diff\": %.3g",
                corr_kl, corr_mean, corr_max);
    std::printf(", \"generated_tokens_per_step\": %.0f, \"trained_tokens_per_step\": %.0f, "
                "\"tok_s_per_gpu\": %.0f, \"gen_tok_s_per_gpu\": %.0f, \"nemo_rl_published_tok_s_per_gpu\": 1562, "
                "\"mem_weights_grads_adam_gib\": %.2f, \"mem_kv_pool_gib\": %.2f, \"mem_update_activations_peak_gib\": "
                "%.2f, \"mem_update_scratch_peak_gib\": %.2f, \"mem_device_used_generating_gib\": %.2f, "
                "\"mem_before_gib\": %.2f}\n",
                generated / double(steps), trained / double(steps), (generated + trained) / double(steps) / step_s / world,
                generated / sum[0] / world, double(state_bytes) / gib,
                double(t.engine().stats().kv_cache_bytes) / gib, double(arenas.activations_peak) / gib,
                double(arenas.scratch_peak) / gib, double(gen_used) / gib, double(before) / gib);
  }
  return 0;
}
