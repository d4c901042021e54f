// The run configuration: every key of docs/DESIGN.md section 5, grouped by INI
// section, with defaults equal to the DAPO paper's recipe (arXiv:2503.14476,
// and verl's recipe/dapo scripts where the paper is silent).
//
// Sources, highest precedence first: `--section.key=value` overrides (the
// last one wins when a key is given twice, with a warning naming it and the
// value that wins; an empty value clears the key:
// text becomes empty, anything else its default), the
// INI file (`[section]` then `key = value`; `#` or `;` start comments), the
// defaults below. An unknown key, a bad value, a key set twice in one INI
// file or a missing file is a UserError naming the file, the line and the
// key (a value quoted in it: at most its first 200 bytes).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dapo {

// auto: hf when the tokenizer's folder holds a tokenizer_config.json with a
// chat_template, else chatml.
enum class ChatTemplate { auto_, hf, chatml, none };
enum class RewardVerifier { symbolic, math_dapo };   // reward/verifier.h, reward/math_dapo.h
enum class ShortBatch { train, skip, fail };         // dynamic sampling that cannot fill the batch
enum class Truncation { left, error, skip };          // prompts longer than max_prompt_length
enum class AdvEstimator { grpo };
enum class LossAggMode { token_mean, seq_mean_token_mean, seq_mean_token_sum };
enum class FilterMetric { acc, score, seq_reward };    // what must vary within a kept group
enum class BackendChoice { auto_, cpu, cuda };

struct ModelConfig {
  std::string path;             // HF directory or dapo checkpoint (.h5)
  std::string tokenizer;        // tokenizer.json; empty: the one beside the model
  ChatTemplate chat_template = ChatTemplate::auto_;
};

struct DataConfig {
  std::string train_files;      // comma-separated JSONL files
  std::string val_files;
  int64_t max_prompt_length = 2048;   // tokens
  Truncation truncation = Truncation::left;
  int64_t seed = 1;             // shuffling of the prompt order per epoch
};

struct RolloutConfig {
  int64_t n = 16;                       // responses per prompt (group size)
  double temperature = 1.0;             // 0: greedy
  double top_p = 1.0;                   // 1: off
  int64_t top_k = -1;                   // -1 or 0: off
  int64_t max_response_length = 20480;  // tokens
  int64_t gen_batch_size = 1536;        // prompts per generation round (3 x train_batch_size)
  int64_t max_num_gen_batches = 10;     // rounds per step before giving up; 0: no limit
  // What a step does when max_num_gen_batches rounds kept fewer than
  // train_batch_size groups: train on the groups kept (none: skip the
  // update), skip the update, or fail (exit 2, as before).
  ShortBatch on_short_batch = ShortBatch::train;
  // Validation sampling (verl's rollout.val_kwargs; the DAPO recipe samples
  // validation at T = 1.0 with top_p = 0.7).
  int64_t val_n = 1;                    // samples per validation problem (the k of avg@k, pass@k)
  double val_temperature = 1.0;
  double val_top_p = 0.7;
  int64_t val_top_k = -1;
  // The generation engine (rollout/engine.h).
  int64_t block_size = 16;              // positions per KV-cache block
  int64_t max_num_seqs = 0;             // sequences per engine step; 0: as many as the KV pool holds
  int64_t max_num_batched_tokens = 8192;  // new positions per engine step
  int64_t spec_tokens = -1;             // n-gram draft tokens per sample and step; -1: 4 on GPUs, 0 on CPUs; 0: off
  int64_t spec_max_running = 8;        // speculate while at most this many sequences run
  double kv_cache_gib = 0;              // KV-cache budget per rank in GiB; 0: sized from the requests
  // With kv_cache_gib = 0 on a GPU: the pool takes at most this fraction
  // of the GPU memory free when generation starts (after the engine's
  // activations and scratch), as vLLM's gpu_memory_utilization bounds it.
  double kv_cache_memory_fraction = 0.9;
  // Exact log-probs: batch-invariant arithmetic in the engine and the
  // trainer (model/qwen2_model.h, ModelOptions::batch_invariant), so each
  // sampled token's log-prob is bit for bit the trainer's, and the engine's
  // log-probs are the old log-probs (no scoring pass). tp <= 2; on GPUs
  // with train.fp32_logits.
  bool exact_logprobs = false;
};

struct AlgorithmConfig {
  AdvEstimator adv_estimator = AdvEstimator::grpo;
  bool norm_adv_by_std = true;
  double clip_ratio_low = 0.2;          // eps_low
  double clip_ratio_high = 0.28;        // eps_high (clip-higher)
  double clip_ratio_c = 3.0;            // dual-clip bound for negative advantages
  LossAggMode loss_agg_mode = LossAggMode::token_mean;
  bool dynamic_sampling = true;
  FilterMetric filter_metric = FilterMetric::acc;
  int64_t overlong_buffer_len = 4096;   // L_cache in tokens; 0: no soft overlong punishment
  double overlong_penalty_factor = 1.0;
  bool overlong_filter = false;         // mask truncated responses out of the loss
  double kl_coef = 0.0;                 // KL (k3) to a frozen reference; 0: no reference model
  double entropy_coeff = 0.0;
};

struct RewardConfig {
  // symbolic: dapo's verifier (symbolic equivalence, \boxed{} fallback);
  // math_dapo: the paper's (verl's math_dapo.compute_score: the last
  // "Answer:" in the last 300 characters, normalised, string equality).
  RewardVerifier verifier = RewardVerifier::symbolic;
};

struct OptimConfig {
  double lr = 1e-6;
  int64_t warmup_steps = 20;    // linear warmup, then constant
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double grad_clip = 1.0;       // global grad-norm clip; 0: off
  // ZeRO-1: Adam moments (and on GPUs the fp32 master) sharded over the dp
  // ranks, gradients reduce-scattered, weights all-gathered (optim/shard_layout.h).
  bool shard_optimizer = true;
};

struct TrainConfig {
  int64_t train_batch_size = 512;       // prompts (groups) per step
  int64_t ppo_mini_batch_size = 32;     // prompts per optimizer step
  int64_t ppo_epochs = 1;
  int64_t max_token_len_per_gpu = 22528;  // micro-batch token budget (prompt + response)
  // The run's length: total_steps when > 0; else total_epochs passes over
  // train_files (the prompt order reshuffled between passes), which ends
  // when the last pass has handed out its last prompt.
  int64_t total_steps = 0;
  int64_t total_epochs = 1;
  int64_t seed = 1;                     // sampling and initialisation
  bool activation_recompute = true;
  // The LM head's logits in fp32 when training and scoring (GPU; the CPU's
  // are fp32 anyway), as the sampler draws from fp32 logits: the trainer's
  // log-probs then differ from the sampler's by the hidden states alone.
  // false: bf16 logits, about 7% faster updates (1.5B on an H200).
  bool fp32_logits = true;
  int64_t val_every = 5;                // steps between validations on data.val_files; 0: only at the end
  bool val_before_train = true;         // validate the starting model (step 0)
  // Watchdog: a phase (generation, update, validation, checkpoint) that
  // runs longer than this ends the job with a line naming rank, host, phase
  // and step - a dead or stuck rank must not hang it. 0: off.
  double phase_timeout_s = 7200;
};

struct ParallelConfig {
  BackendChoice backend = BackendChoice::auto_;
  int64_t tp = 1;               // tensor-parallel size; dp = world / tp
};

struct CheckpointConfig {
  std::string dir = "checkpoints";
  int64_t save_every = 5;       // steps; 0: only at the end and on preemption
  int64_t keep_last = 3;        // 0: keep all
  std::string resume = "auto";  // auto | never | PATH
  bool async = true;            // write in the background while the next steps run
  double stop_warning_s = 0;    // seconds from the stop signal to the kill (Slurm --signal=B:USR1@N); 0: not checked
};

struct DumpConfig {
  std::string dir = "rollouts";
  int64_t every = 10;           // steps; 0: off
};

struct LogConfig {
  std::string dir = "logs";     // metrics.jsonl and the resolved config go here
  int64_t every = 1;
  bool all_ranks = false;       // every rank logs, not only rank 0
  std::string level = "info";   // debug | info | warn | error
};

struct Config {
  ModelConfig model;
  DataConfig data;
  RolloutConfig rollout;
  AlgorithmConfig algorithm;
  RewardConfig reward;
  OptimConfig optim;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  DumpConfig dump;
  LogConfig log;

  // Where each key that is not a default came from: "FILE:LINE" or
  // "command line". Used in error messages of later checks.
  std::map<std::string, std::string> origins;
  std::string origin_of(const std::string& key) const;
};

// Reads `ini_path` (empty: none; a comma-separated list: each file in turn,
// a later file's keys winning over an earlier one's, e.g.
// "inputs/dapo_base.ini,inputs/dapo_32b.ini") and applies `overrides`
// ("--section.key=value" or "section.key=value"), then checks ranges (the
// counts that size memory have generous upper bounds too, e.g. rollout.n <=
// 65536, token lengths <= 1,048,576) and cross-key constraints. Throws
// UserError.
Config load_config(const std::string& ini_path, const std::vector<std::string>& overrides);

// The checks that concern training only (`dapo train`), so that `generate`
// or `eval` with, say, rollout.n = 1 are not refused for an algorithm they do
// not run: dynamic sampling needs n >= 2; ppo_mini_batch_size must divide
// train_batch_size; the overlong buffer must be shorter than
// max_response_length; n x gen_batch_size responses per round at most 2^24.
// Throws UserError naming the key's origin.
void check_training_config(const Config& config);

// The resolved configuration as INI text that load_config reads back to the
// same values.
std::string config_to_ini(const Config& config);

// One line per key: "  section.key = default   help", grouped by section.
std::string config_help();

// Enum names as written in INI files.
std::string to_string(ChatTemplate v);
std::string to_string(RewardVerifier v);
std::string to_string(ShortBatch v);
std::string to_string(Truncation v);
std::string to_string(AdvEstimator v);
std::string to_string(LossAggMode v);
std::string to_string(FilterMetric v);
std::string to_string(BackendChoice v);

}  // namespace dapo
