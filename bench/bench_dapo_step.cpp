// Benchmark of one DAPO training step on the CPU backend, phase by phase:
// generation, verification, balancing, old log-probs, the update, and the
// whole step, on the demo recipe (inputs/demo.ini: tiny Qwen2, n = 8,
// 16 groups per step) from the demo's warm-start model when it exists
// (runs/demo/sft/sft_final.h5, made by jobs/demo.sh), else from a fresh
// random model with dynamic sampling off (a random model solves nothing,
// so every group would be dropped).
//
// Baseline, measured in the same process: the update phase's (old
// log-probs + update) useful GFLOP/s per rank against this machine's sgemm
// on the model's MLP shape - the fraction is what to watch, as in
// bench_model. (The generation engine's baseline, a loop of full forwards
// without a KV cache, is in bench_generate.) Prints one JSON line (rank 0)
// with the mean seconds of each phase over the measured steps (after one
// warm-up step). Run it under mpirun for dp (e.g. mpirun -np 2
// build/bench_dapo_step); OMP_NUM_THREADS sets the threads per rank.
//   bench_dapo_step [STEPS] [--key=value overrides of the config]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/core/config.h"
#include "dapo/data/dataset.h"
#include "dapo/ops/matmul.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/dapo_trainer.h"
#include "dapo/trainer/model_init.h"

namespace {

using namespace dapo;

std::string src(const std::string& rel) { return (std::filesystem::path(DAPO_SOURCE_DIR) / rel).string(); }

// The sgemm rate of (T, C) x (C, I) on this rank, GFLOP/s.
double sgemm_gflops(int64_t T, int64_t C, int64_t I) {
  std::vector<float> a(size_t(T * C), 0.5f), w(size_t(I * C), 0.25f), y(size_t(T * I));
  ops::Ctx ctx;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    ops::linear_forward(ctx, tensor_f32(y.data(), {T, I}), tensor_f32(a.data(), {T, C}), tensor_f32(w.data(), {I, C}),
                        Tensor{});
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * double(T * C * I) / best * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  int64_t steps = 3;
  std::vector<std::string> overrides{"model.tokenizer=" + src("inputs/demo/tokenizer.json"),
                                     "data.train_files=" + src("inputs/demo/train.jsonl"), "data.val_files=",
                                     "log.dir=/tmp"};
  const std::string warm = src("runs/demo/sft/sft_final.h5");
  const bool warm_start = std::filesystem::exists(warm);
  if (warm_start) {
    overrides.push_back("model.path=" + warm);
  } else {
    overrides.push_back("model.path=" + src("inputs/demo/model"));
    overrides.push_back("algorithm.dynamic_sampling=false");
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) overrides.push_back(a);
    else steps = std::stoll(a);
  }
  const Config config = load_config(src("inputs/demo.ini"), overrides);
  check_training_config(config);
  const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
  trainer::InitialModel initial = trainer::load_initial_model(config, grid);
  const data::Tokenizer tokenizer = data::Tokenizer::load(config.model.tokenizer);
  const data::PromptDataset prompts = data::PromptDataset::load_list(config.data.train_files, "data.train_files");
  const trainer::PromptSet set(prompts, tokenizer, trainer::prompt_set_options(config, initial.params->config().vocab_size));
  trainer::DapoTrainer t(*initial.params, nullptr, grid, config, tokenizer, set);

  // Per-phase sums over the measured steps (after one warm-up step).
  const char* keys[] = {"timing_s/gen", "timing_s/reward", "timing_s/balance", "timing_s/old_log_prob",
                        "timing_s/update_actor", "timing_s/step"};
  std::vector<double> sum(std::size(keys), 0.0);
  double tokens = 0, gen_tokens = 0, gen_s = 0, update_s = 0, acc = 0;
  t.step();
  for (int64_t s = 0; s < steps; ++s) {
    const trainer::DapoStepResult r = t.step();
    for (size_t k = 0; k < std::size(keys); ++k) sum[k] += r.metrics.get(keys[k]);
    tokens += r.metrics.get("perf/total_num_tokens");
    gen_tokens += r.metrics.get("perf/gen_throughput") * r.metrics.get("timing_s/gen");
    gen_s += r.metrics.get("timing_s/gen");
    update_s += r.metrics.get("timing_s/update_actor") + r.metrics.get("timing_s/old_log_prob");
    acc += r.metrics.get("gen/acc/mean");
  }

  // Useful flops of the update: 6 per matrix parameter per trained token
  // (forward 2, backward 4) per epoch, plus 2 for the old log-probs
  // forward; attention is small at these lengths and left out.
  const model::Qwen2Config& c = initial.params->config();
  int64_t matrix_params = 0;
  for (const model::ParamEntry& e : initial.params->entries())
    if (e.param.ndim == 2) matrix_params += e.param.numel();
  matrix_params *= grid.tp_size;  // every tp rank holds a slice
  if (c.tie_word_embeddings) matrix_params += c.vocab_size * c.hidden_size;
  matrix_params -= c.vocab_size * c.hidden_size;  // the embedding lookup is no GEMM
  const double flops = (6.0 * double(config.train.ppo_epochs) + 2.0) * double(matrix_params) * tokens;
  const double update_gflops = flops / update_s * 1e-9 / double(grid.world_size());
  const double gemm = sgemm_gflops(4096, c.hidden_size, c.intermediate_size);

  if (runtime.world_rank() == 0) {
    std::printf("{\"bench\":\"dapo_step\",\"ranks\":%d,\"tp\":%d,\"threads_per_rank\":%d,\"model\":\"%s\",\"steps\":%lld,"
                "\"groups_per_step\":%lld,\"n\":%lld",
                grid.world_size(), grid.tp_size, omp_get_max_threads(), warm_start ? "demo warm start" : "random init",
                (long long)steps, (long long)config.train.train_batch_size, (long long)config.rollout.n);
    for (size_t k = 0; k < std::size(keys); ++k)
      std::printf(",\"%s\":%.4f", std::string(keys[k]).substr(9).append("_s").c_str(), sum[k] / double(steps));
    std::printf(",\"gen_acc\":%.3f,\"gen_tokens_per_s\":%.0f,\"train_tokens_per_step\":%.0f,"
                "\"update_gflops_per_rank\":%.3f,\"baseline_sgemm_gflops\":%.2f,\"update_fraction_of_sgemm\":%.3f}\n",
                acc / double(steps), gen_tokens / gen_s, tokens / double(steps), update_gflops, gemm,
                update_gflops / gemm);
  }
  return 0;
}
