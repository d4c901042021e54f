// Benchmark of the Qwen2 model on the CPU backend, one rank (tp = 1): the
// training step (forward_train + backward, with and without activation
// recomputation) on a packed micro-batch, scoring without gradients, and
// batched decode steps over the paged KV cache, for a small Qwen2-shaped
// model. The baseline is this machine's single-rank OpenBLAS sgemm rate on
// a GEMM of the model's shape: the reference backend should spend its time
// in GEMMs, so the training step's useful GFLOP/s over it is the number to
// watch (target >= 0.5). Run with OMP_NUM_THREADS=1 for per-core numbers.
// Needs dapo_model linked into the benchmark executables (it is: DAPO_APP_LIBS).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/matmul.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"

namespace {

using namespace dapo;

// The best of `reps` runs of f, in seconds.
template <class F>
double best_of(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

std::vector<int32_t> ints(int64_t n) { return std::vector<int32_t>(size_t(n), 0); }
std::vector<float> floats(int64_t n) { return std::vector<float>(size_t(n), 0.0f); }

}  // namespace

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  model::Qwen2Config c;
  c.vocab_size = 8192;
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 4096;
  c.rope_theta = 1e6;
  const int64_t seqs = 4, seq_len = 256, T = seqs * seq_len;

  const parallel::Comm tp = parallel::Comm::world().split(runtime.world_rank(), 0);
  model::ParamStore store(c, 0, 1);
  model::RandomInit init;
  init.weight_scale = 0.1f;
  store.init_random(init);
  model::Qwen2Model plain(store, tp), recompute(store, tp, model::ModelOptions{true});

  std::vector<int32_t> tokens = ints(T), positions = ints(T), targets = ints(T), cu = ints(seqs + 1);
  for (int64_t i = 0; i < T; ++i) {
    tokens[size_t(i)] = int32_t((i * 7919) % c.vocab_size);
    positions[size_t(i)] = int32_t(i % seq_len);
    targets[size_t(i)] = int32_t((i * 104729 + 3) % c.vocab_size);
  }
  for (int64_t b = 0; b <= seqs; ++b) cu[size_t(b)] = int32_t(b * seq_len);
  const model::PackedBatch batch{tensor_i32(tokens.data(), {T}), tensor_i32(positions.data(), {T}),
                                 tensor_i32(cu.data(), {seqs + 1}), tensor_i32(targets.data(), {T})};
  std::vector<float> logprob = floats(T), entropy = floats(T), dlogprob(logprob.size(), 1.0f / float(T));

  const int threads = omp_get_max_threads();
  const int64_t B = 16, prompt = 128, steps = 16, block = 16, blocks = B * (prompt + steps) / block + B;
  Arena act(std::max(plain.train_activation_bytes(T), plain.cached_activation_bytes(B * prompt, B)) +
                (size_t(1) << 20),
            Device::cpu, "activations");
  Arena scratch(plain.scratch_bytes(T, seq_len, 16, threads) + (size_t(1) << 20), Device::cpu, "scratch");
  ops::Ctx ctx;
  ctx.scratch = &scratch;
  auto train = [&](model::Qwen2Model& m) {
    model::Activations saved;
    m.forward_train(ctx, act, batch, 1.0f, tensor_f32(logprob.data(), {T}), tensor_f32(entropy.data(), {T}), saved);
    m.backward(ctx, act, saved, tensor_f32(dlogprob.data(), {T}), Tensor{});
  };
  train(plain);  // warm-up
  const double t_train = best_of(3, [&] { train(plain); });
  const double t_train_rc = best_of(3, [&] { train(recompute); });
  const double t_score = best_of(3, [&] {
    plain.forward_logprob(ctx, act, batch, 1.0f, tensor_f32(logprob.data(), {T}), tensor_f32(entropy.data(), {T}));
  });

  // Decode: B sequences with a 128-token prompt each, then single-token steps.
  Arena kv(model::kv_cache_bytes(c, 1, blocks, block), Device::cpu, "kv");
  const model::KvCache cache = model::allocate_kv_cache(kv, c, 1, blocks, block);
  std::vector<int32_t> table = ints(B * (blocks / B));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  const int64_t per_seq = blocks / B;
  auto step = [&](int64_t start, int64_t n) {  // n new tokens per sequence at positions start..
    std::vector<int32_t> tok = ints(B * n), pos = ints(B * n), slot = ints(B * n), cuq = ints(B + 1), last = ints(B),
                         ctxlen = ints(B);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = start + i, r = b * n + i;
        tok[size_t(r)] = int32_t((p * 31 + b) % c.vocab_size);
        pos[size_t(r)] = int32_t(p);
        slot[size_t(r)] = int32_t(table[size_t(b * per_seq + p / block)] * block + p % block);
      }
      cuq[size_t(b + 1)] = int32_t((b + 1) * n);
      last[size_t(b)] = int32_t((b + 1) * n - 1);
      ctxlen[size_t(b)] = int32_t(start + n);
    }
    std::vector<float> logits = floats(B * c.vocab_size);
    const model::CachedBatch cb{tensor_i32(tok.data(), {B * n}),  tensor_i32(pos.data(), {B * n}),
                                tensor_i32(cuq.data(), {B + 1}),  tensor_i32(last.data(), {B}),
                                tensor_i32(slot.data(), {B * n}), tensor_i32(table.data(), {B, per_seq}),
                                tensor_i32(ctxlen.data(), {B})};
    plain.forward_cached(ctx, act, cache, cb, tensor_f32(logits.data(), {B, c.vocab_size}));
  };
  const auto t0 = Clock::now();
  step(0, prompt);
  const double t_prefill = seconds_since(t0);
  const auto t1 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) step(prompt + s, 1);
  const double t_decode = seconds_since(t1) / double(steps);

  // Baseline: sgemm of the MLP's shape, (T, C) x (C, I).
  std::vector<float> a = floats(T * c.hidden_size), w = floats(c.intermediate_size * c.hidden_size),
                     y = floats(T * c.intermediate_size);
  std::fill(a.begin(), a.end(), 0.5f);
  std::fill(w.begin(), w.end(), 0.25f);
  const double t_gemm = best_of(5, [&] {
    ops::linear_forward(ctx, tensor_f32(y.data(), {T, c.intermediate_size}), tensor_f32(a.data(), {T, c.hidden_size}),
                        tensor_f32(w.data(), {c.intermediate_size, c.hidden_size}), Tensor{});
  });
  const double gemm_gflops = 2.0 * double(T) * double(c.hidden_size) * double(c.intermediate_size) / t_gemm * 1e-9;

  // Useful work of a training step: 6 flops per matrix parameter per token
  // (forward 2, backward 4) plus causal attention (scores and values, 3x for
  // the backward).
  int64_t matrix_params = 0;
  for (const model::ParamEntry& e : store.entries())
    if (e.param.ndim == 2) matrix_params += e.param.numel();
  if (c.tie_word_embeddings) matrix_params += c.vocab_size * c.hidden_size;
  matrix_params -= c.vocab_size * c.hidden_size;  // the embedding lookup is no GEMM
  const double attn = 2.0 * 2.0 * double(c.num_hidden_layers) * double(c.num_attention_heads) * double(c.head_dim) *
                      double(seqs) * double(seq_len) * double(seq_len + 1) / 2.0;
  const double train_flops = 6.0 * double(matrix_params) * double(T) + 3.0 * attn;
  const double train_gflops = train_flops / t_train * 1e-9;

  if (runtime.world_rank() == 0)
    std::printf(
        "{\"bench\":\"model\",\"threads\":%d,\"config\":{\"hidden\":%lld,\"layers\":%lld,\"heads\":%lld,"
        "\"kv_heads\":%lld,\"intermediate\":%lld,\"vocab\":%lld},\"tokens\":%lld,"
        "\"train_step_s\":%.4f,\"train_tokens_per_s\":%.0f,\"train_gflops\":%.2f,"
        "\"train_recompute_step_s\":%.4f,\"recompute_overhead\":%.3f,"
        "\"score_tokens_per_s\":%.0f,\"prefill_tokens_per_s\":%.0f,\"decode_step_ms_b16\":%.2f,"
        "\"decode_tokens_per_s\":%.0f,\"baseline_sgemm_gflops\":%.2f,\"train_fraction_of_sgemm\":%.3f,"
        "\"target_fraction_of_sgemm\":0.5}\n",
        threads, (long long)c.hidden_size, (long long)c.num_hidden_layers, (long long)c.num_attention_heads,
        (long long)c.num_key_value_heads, (long long)c.intermediate_size, (long long)c.vocab_size, (long long)T,
        t_train, double(T) / t_train, train_gflops, t_train_rc, t_train_rc / t_train, double(T) / t_score,
        double(B * prompt) / t_prefill, t_decode * 1e3, double(B) / t_decode, gemm_gflops, train_gflops / gemm_gflops);
  return 0;
}
