// The update step on one GPU: forward, backward and AdamW of a random
// Qwen2.5-shaped model (bf16 weights and activations, fp32 master weights,
// gradients and moments) over `mb` packed sequences of `seq` tokens, through
// the same UpdateRunner `dapo sft` and `dapo train` use (token-mean
// cross-entropy, one micro-batch). Prints one JSON line per configuration:
// seconds per step, tokens/s, model FLOP/s and MFU counted as
// bench/peers/peer_train_step.py counts them (6 * params * tokens plus
// causal attention, against 989 TFLOP/s dense bf16), and memory; with
// --profile, a second line with each op's share of the step's GPU time;
// --bf16-head: the LM head's logits in bf16 (ModelOptions::fp32_head off),
// to measure what the fp32 head costs; --logits-chunk-mib N: the head's
// chunk budget (ModelOptions::logits_chunk_bytes); --exact: the
// batch-invariant forward of rollout.exact_logprobs (ModelOptions::batch_invariant).
// Run the peer in the same command for the comparison:
//   bench_update_gpu 1.5b --recompute 1 ; python3 bench/peers/peer_train_step.py 1.5b
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/core/log.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/op_profiler.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/update_step.h"
#include "qwen25_shapes.h"

using namespace dapo;

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  std::string size = "1.5b";
  int64_t seq = 4096, mb = 4, steps = 3;
  bool recompute = false, profile = false, bf16_head = false, exact = false;
  int64_t chunk_mib = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--seq") seq = std::stoll(next());
    else if (a == "--mb") mb = std::stoll(next());
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--recompute") recompute = next() == "1";
    else if (a == "--profile") profile = true;
    else if (a == "--bf16-head") bf16_head = true;
    else if (a == "--exact") exact = true;
    else if (a == "--logits-chunk-mib") chunk_mib = std::stoll(next());
    else size = a;
  }
  if (ops::cuda_device_count() == 0) {
    std::printf("{\"bench\": \"update_step\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  configure_logging({runtime.world_rank(), false, LogLevel::warn});
  const model::Qwen2Config c = bench::qwen25(size, "bench_update_gpu");
  const parallel::Grid grid = parallel::make_grid(1);
  ops::CudaDevice gpu(grid.local_rank);
  const size_t before = gpu.memory_used();

  model::ParamStore params(c, 0, 1, Device::cuda, gpu.ctx(nullptr).stream);
  model::RandomInit init;
  init.weight_scale = 0.02f * 1.7320508f;  // std 0.02, as HF's init
  init.bias_scale = 0.0f;
  init.norm_scale = 0.0f;
  params.init_random(init);
  model::ModelOptions options;
  options.activation_recompute = recompute;
  options.fp32_head = !bf16_head;
  options.batch_invariant = exact;
  if (chunk_mib > 0) options.logits_chunk_bytes = size_t(chunk_mib) << 20;
  model::Qwen2Model model(params, grid.tp, options);
  optim::AdamW optimizer(params, optim::AdamWOptions{});
  trainer::UpdateRunner runner(model, &optimizer, grid, &gpu);

  // One micro-batch of mb sequences of seq tokens (random ids, next-token targets).
  trainer::MicroBatch batch;
  std::mt19937 gen(1);
  std::uniform_int_distribution<int32_t> id(0, 150000);
  batch.cu_seqlens.push_back(0);
  for (int64_t s = 0; s < mb; ++s) {
    const size_t start = batch.tokens.size();
    for (int64_t p = 0; p < seq; ++p) {
      batch.tokens.push_back(id(gen));
      batch.positions.push_back(int32_t(p));
    }
    for (int64_t p = 0; p < seq; ++p)
      batch.targets.push_back(p + 1 < seq ? batch.tokens[start + size_t(p) + 1] : batch.tokens[start]);
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
  }
  const int64_t tokens = batch.num_tokens();
  batch.mask.assign(size_t(tokens), 1);
  const std::vector<trainer::MicroBatch> micro{batch};
  double loss = 0;
  const trainer::TokenGradient ce = [&](const trainer::MicroBatch& m, const trainer::ForwardOutputs& out,
                                        std::span<float> dlogprob, std::span<float>) {
    for (size_t t = 0; t < m.tokens.size(); ++t) {
      loss -= out.logprob[t] / double(tokens);
      dlogprob[t] = -1.0f / float(tokens);
    }
  };

  for (int w = 0; w < 2; ++w) runner.step(micro, ce, 1e-6);  // warm-up: plans, arenas
  gpu.synchronize();
  const auto t0 = Clock::now();
  optim::StepReport r;
  for (int64_t s = 0; s < steps; ++s) r = runner.step(micro, ce, 1e-6);
  gpu.synchronize();
  const double dt = seconds_since(t0) / double(steps);
  const size_t used = gpu.memory_used();

  const int64_t n = bench::parameters(c);
  // Attention's width is heads x head_dim (Qwen3's is not the hidden size).
  const double attention = 6.0 * 2.0 * double(c.num_hidden_layers) * double(c.num_attention_heads * c.head_dim) *
                           double(seq) *
                           double(seq) / 2.0 * double(mb);
  const double flops = 6.0 * double(n) * double(tokens) + attention;
  const trainer::UpdateRunner::ArenaUse a = runner.arena_use();
  const double gib = double(size_t(1) << 30);
  std::printf(
      "{\"bench\": \"update_step\", \"model\": \"%s\", \"gpu\": \"%s\", \"params\": %lld, \"tokens\": %lld, "
      "\"recompute\": %s, \"exact\": %s, \"head\": \"%s\", \"logits_chunk_mib\": %zu, \"s\": %.4f, \"tok_s\": %.0f, \"tflops\": %.1f, \"mfu\": %.3f, "
      "\"device_used_gib\": %.2f, \"weights_grads_moments_gib\": %.2f, \"activations_gib\": %.2f, "
      "\"activations_peak_gib\": %.2f, \"scratch_peak_gib\": %.3f, \"grad_norm\": %.4f, \"loss\": %.4f}\n",
      size.c_str(), gpu.name().c_str(), (long long)n, (long long)tokens, recompute ? "true" : "false",
      exact ? "true" : "false", bf16_head ? "bf16" : "f32", options.logits_chunk_bytes >> 20, dt,
      double(tokens) / dt, flops / dt / 1e12, flops / dt / 989e12, double(used - before) / gib,
      double(params.buffer_elements()) * (4 + 4 + 2 + 4 + 4) / gib, double(a.activations) / gib,
      double(a.activations_peak) / gib, double(a.scratch_peak) / gib, r.grad_norm,
      loss / double(steps + 2));
  std::fflush(stdout);

  if (profile) {
    ops::OpProfiler profiler;
    runner.set_profiler(&profiler);
    const auto p0 = Clock::now();
    runner.step(micro, ce, 1e-6);
    gpu.synchronize();
    const double step_ms = seconds_since(p0) * 1e3;
    runner.set_profiler(nullptr);
    const auto entries = profiler.summary();
    double total = 0;
    for (const auto& e : entries) total += e.ms;
    std::printf("{\"bench\": \"update_step_ops\", \"model\": \"%s\", \"recompute\": %s, \"step_ms\": %.2f, "
                "\"ops_ms\": %.2f, \"ops\": [",
                size.c_str(), recompute ? "true" : "false", step_ms, total);
    for (size_t i = 0; i < entries.size(); ++i)
      std::printf("%s{\"op\": \"%s\", \"calls\": %lld, \"ms\": %.2f, \"share\": %.3f}", i ? ", " : "",
                  entries[i].op.c_str(), (long long)entries[i].calls, entries[i].ms, entries[i].ms / step_ms);
    std::printf("]}\n");
  }
  return 0;
}
