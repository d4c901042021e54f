// The device memory of one rank of a `dapo train` run on GPUs, phase by
// phase, from the same sizing code the run carves its memory with
// (optim::train_state_bytes, UpdateRunner::arena_bytes,
// rollout::generation_memory, model::kv_cache_bytes): `dapo info --memory`
// prints it, and `dapo train` checks it before it loads anything, so that a
// configuration that cannot fit stops at once with what to change.
//
// Phases take turns with the same memory: the training state (fp32 master
// or its shard, bf16 compute copy, fp32 gradients, Adam moments) stays for
// the whole run; generation adds its step buffers and the KV pool, which it
// gives back; the update then adds its activation and scratch arenas at
// train.max_token_len_per_gpu, which it gives back. Not counted: the CUDA
// context and NCCL's own buffers (outside cudaMalloc), for which the fit
// check keeps kRuntimeHeadroom free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dapo/core/config.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::trainer {

// Kept free for the CUDA context and NCCL's buffers, which the plan does
// not see: a margin chosen, not measured per machine.
inline constexpr size_t kRuntimeHeadroom = size_t(2) << 30;

struct MemoryPlan {
  int64_t tp = 1, dp = 1;
  size_t device_total = 0;  // bytes of one GPU
  // Whole run.
  size_t master = 0, compute = 0, gradients = 0, moments = 0, workspace = 0;
  // Update phase (the largest micro-batch of max_token_len_per_gpu tokens;
  // forward + backward, or scoring, whichever is larger).
  size_t update_activations = 0, update_scratch = 0;
  // Generation phase: the step buffers, the KV pool of one full sequence
  // (the least that runs) and of every seat at full length (what the
  // requests can use), and the pool the run would get.
  size_t gen_activations = 0, gen_scratch = 0, gen_rows = 0, gen_staging = 0;
  size_t kv_min = 0, kv_requests = 0, kv_pool = 0;
  int64_t kv_pool_sequences = 0;  // full-length sequences the pool holds
  bool reference_model = false;   // algorithm.kl_coef > 0: a second model, not counted

  size_t state() const { return master + compute + gradients + moments + workspace; }
  size_t generation_fixed() const { return gen_activations + gen_scratch + gen_rows + gen_staging; }
  size_t update_peak() const { return state() + update_activations + update_scratch; }
  size_t generation_peak() const { return state() + generation_fixed() + kv_pool; }
  // Whether the update and the least generation fit with the headroom.
  bool fits() const;
};

// The plan of tensor-parallel rank 0 (every tp rank carves the same; the
// largest dp rank's optimizer shard) for `model` under `config` on GPUs of
// `device_total` bytes.
MemoryPlan memory_plan(const Config& config, const model::Qwen2Config& model, int64_t tp, int64_t dp,
                       size_t device_total);

// A table: per phase, each part in GiB, the peak, and the verdict; when it
// does not fit, what to change (naming the config keys).
std::string format_memory_plan(const MemoryPlan& plan, const Config& config);

}  // namespace dapo::trainer
