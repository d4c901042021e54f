#include "dapo/trainer/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "dapo/model/qwen2_model.h"
#include "dapo/optim/shard_layout.h"
#include "dapo/rollout/engine.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/update_step.h"

namespace dapo::trainer {
namespace {

// ops::CudaDevice's default cuBLASLt workspace and the device flags.
constexpr size_t kWorkspace = (size_t(32) << 20) + 4096;

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(bytes) / double(size_t(1) << 30));
  return buf;
}

}  // namespace

bool MemoryPlan::fits() const {
  const size_t need = std::max(update_peak(), state() + generation_fixed() + kv_min) + kRuntimeHeadroom;
  return need <= device_total;
}

MemoryPlan memory_plan(const Config& config, const model::Qwen2Config& model, int64_t tp, int64_t dp,
                       size_t device_total) {
  MemoryPlan p;
  p.tp = tp;
  p.dp = dp;
  p.device_total = device_total;
  const optim::TrainStateBytes s =
      optim::train_state_bytes(model, tp, dp, Device::cuda, config.optim.shard_optimizer);
  p.master = s.master;
  p.compute = s.compute;
  p.gradients = s.gradients;
  p.moments = s.moments;
  p.workspace = kWorkspace;
  p.reference_model = config.algorithm.kl_coef > 0;

  const model::ModelOptions options = model_options(config);
  const model::Qwen2Model::Plan plan = model::Qwen2Model::plan(model, tp, 0, DType::bf16, options);
  const int64_t T = config.train.max_token_len_per_gpu;
  const int64_t max_len = std::min<int64_t>(T, config.data.max_prompt_length + config.rollout.max_response_length);
  const UpdateRunner::ArenaBytes train = UpdateRunner::arena_bytes(plan, T, T, max_len, true, true, 1);
  const UpdateRunner::ArenaBytes score = UpdateRunner::arena_bytes(plan, T, T, max_len, false, true, 1);
  p.update_activations = std::max(train.activations, score.activations);
  p.update_scratch = std::max(train.scratch, score.scratch);

  // The engine's limits as generate() raises them (engine.cpp).
  const rollout::EngineOptions eo = rollout::engine_options(config);
  const int64_t n = std::max(config.rollout.n, config.rollout.val_n);
  const int64_t prompts_per_rank = (config.rollout.gen_batch_size + dp - 1) / dp;
  const int64_t seats_per_step = rollout::engine_seats(eo, prompts_per_rank * config.rollout.n, n);
  const int64_t max_seqs = rollout::engine_step_rows(eo, seats_per_step, true);
  const int64_t max_tokens = std::max(eo.max_batch_tokens, max_seqs);
  const int64_t seq_len = config.data.max_prompt_length + config.rollout.max_response_length;
  const rollout::GenerationMemory g =
      rollout::generation_memory(plan, max_seqs, max_tokens, seq_len, eo.block_size, Device::cuda, 1);
  p.gen_activations = g.activations;
  p.gen_scratch = g.scratch;
  p.gen_rows = g.rows;
  p.gen_staging = g.staging;
  const int64_t blocks_per_seq = (seq_len + eo.block_size - 1) / eo.block_size;
  const int64_t seats = std::min<int64_t>(seats_per_step, std::max<int64_t>(1, prompts_per_rank * config.rollout.n));
  const rollout::KvPoolSizes kv =
      rollout::kv_pool_sizes(model, tp, seats, seq_len, eo.block_size, eo.cuda_graphs, Device::cuda);
  p.kv_min = kv.min;
  p.kv_requests = kv.requests;
  if (eo.kv_cache_bytes > 0) {
    p.kv_pool = eo.kv_cache_bytes;
  } else {
    const size_t used = p.state() + p.generation_fixed() + kRuntimeHeadroom;
    const size_t free = device_total > used ? device_total - used : 0;
    p.kv_pool = std::max(p.kv_min, std::min(p.kv_requests, size_t(double(free) * eo.kv_cache_memory_fraction)));
  }
  const size_t per_seq = model::kv_cache_bytes(model, tp, blocks_per_seq, eo.block_size, Device::cuda);
  p.kv_pool_sequences = per_seq > 0 ? int64_t(p.kv_pool / per_seq) : 0;
  return p;
}

std::string format_memory_plan(const MemoryPlan& p, const Config& config) {
  std::ostringstream o;
  o << "memory plan per GPU (tp " << p.tp << " x dp " << p.dp << ", GiB of " << gib(p.device_total) << "):\n"
    << "  whole run      master " << gib(p.master) << ", bf16 copy " << gib(p.compute) << ", gradients "
    << gib(p.gradients) << ", Adam moments " << gib(p.moments) << ", workspace " << gib(p.workspace) << " = "
    << gib(p.state()) << (config.optim.shard_optimizer && p.dp > 1 ? " (optimizer sharded over dp)" : "") << "\n"
    << "  update         activations " << gib(p.update_activations) << " (max_token_len_per_gpu "
    << config.train.max_token_len_per_gpu
    << (config.train.activation_recompute ? ", recompute" : ", no recompute") << "), scratch "
    << gib(p.update_scratch) << "; peak " << gib(p.update_peak()) << "\n"
    << "  generation     activations " << gib(p.gen_activations) << ", scratch " << gib(p.gen_scratch)
    << ", logits rows " << gib(p.gen_rows) << ", metadata " << gib(p.gen_staging) << "; KV pool " << gib(p.kv_pool)
    << " (" << p.kv_pool_sequences << " full-length sequences; one needs " << gib(p.kv_min) << ", every seat "
    << gib(p.kv_requests) << "); peak " << gib(p.generation_peak()) << "\n"
    << "  not counted    CUDA context and NCCL buffers: " << gib(kRuntimeHeadroom) << " kept free for them"
    << (p.reference_model ? "; the reference model (algorithm.kl_coef > 0)" : "") << "\n";
  if (p.fits()) {
    o << "  fits: yes\n";
  } else {
    o << "  fits: NO - the update needs " << gib(p.update_peak() + kRuntimeHeadroom) << " and the least generation "
      << gib(p.state() + p.generation_fixed() + p.kv_min + kRuntimeHeadroom) << " of " << gib(p.device_total)
      << ". To fit: raise parallel.tp (now " << p.tp << ": weights, gradients and activations split)";
    if (!config.optim.shard_optimizer) o << ", set optim.shard_optimizer = true";
    if (!config.train.activation_recompute) o << ", set train.activation_recompute = true";
    o << ", lower train.max_token_len_per_gpu (now " << config.train.max_token_len_per_gpu
      << "), rollout.max_num_seqs or rollout.max_num_batched_tokens\n";
  }
  return o.str();
}

}  // namespace dapo::trainer
