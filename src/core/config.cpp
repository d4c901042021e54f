// INI + command-line configuration through Boost.ProgramOptions. We read the
// INI lines ourselves (Boost's parser forgets line numbers) and hand each
// key to Boost one at a time, so that every error can name file:line:key.
#include "dapo/core/config.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/core/log.h"

namespace po = boost::program_options;

namespace dapo {
namespace {

// A user's text quoted in an error message: control characters escaped
// and at most the first kMaxQuoted bytes, then "... (N bytes)", so that a
// 10 MB value (a file pasted by mistake) does not make a 10 MB error line.
constexpr size_t kMaxQuoted = 200;
std::string capped(std::string_view text) {
  if (text.size() <= kMaxQuoted) return printable(text);
  size_t cut = kMaxQuoted;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return cat(printable(text.substr(0, cut)), "... (", text.size(), " bytes)");
}

template <class E, size_t N>
using Names = std::array<std::pair<E, const char*>, N>;

constexpr Names<ChatTemplate, 4> kChatTemplate{{{ChatTemplate::auto_, "auto"},
                                                {ChatTemplate::hf, "hf"},
                                                {ChatTemplate::chatml, "chatml"},
                                                {ChatTemplate::none, "none"}}};
constexpr Names<RewardVerifier, 2> kRewardVerifier{
    {{RewardVerifier::symbolic, "symbolic"}, {RewardVerifier::math_dapo, "math_dapo"}}};
constexpr Names<ShortBatch, 3> kShortBatch{
    {{ShortBatch::train, "train"}, {ShortBatch::skip, "skip"}, {ShortBatch::fail, "fail"}}};
constexpr Names<Truncation, 3> kTruncation{
    {{Truncation::left, "left"}, {Truncation::error, "error"}, {Truncation::skip, "skip"}}};
constexpr Names<AdvEstimator, 1> kAdvEstimator{{{AdvEstimator::grpo, "grpo"}}};
constexpr Names<LossAggMode, 3> kLossAggMode{{{LossAggMode::token_mean, "token-mean"},
                                              {LossAggMode::seq_mean_token_mean, "seq-mean-token-mean"},
                                              {LossAggMode::seq_mean_token_sum, "seq-mean-token-sum"}}};
constexpr Names<FilterMetric, 3> kFilterMetric{
    {{FilterMetric::acc, "acc"}, {FilterMetric::score, "score"}, {FilterMetric::seq_reward, "seq_reward"}}};
constexpr Names<BackendChoice, 3> kBackend{
    {{BackendChoice::auto_, "auto"}, {BackendChoice::cpu, "cpu"}, {BackendChoice::cuda, "cuda"}}};

template <class E, size_t N>
std::string name_of(const Names<E, N>& names, E v) {
  for (const auto& [e, s] : names)
    if (e == v) return s;
  return "?";
}

template <class E, size_t N>
E parse_enum(const Names<E, N>& names, const std::string& s) {
  for (const auto& [e, n] : names)
    if (s == n) return e;
  std::string choices;
  for (const auto& [e, n] : names) choices += (choices.empty() ? "" : "|") + std::string(n);
  throw po::error("'" + capped(s) + "' is not one of " + choices);
}

const auto& names_for(ChatTemplate*) { return kChatTemplate; }
const auto& names_for(RewardVerifier*) { return kRewardVerifier; }
const auto& names_for(ShortBatch*) { return kShortBatch; }
const auto& names_for(Truncation*) { return kTruncation; }
const auto& names_for(AdvEstimator*) { return kAdvEstimator; }
const auto& names_for(LossAggMode*) { return kLossAggMode; }
const auto& names_for(FilterMetric*) { return kFilterMetric; }
const auto& names_for(BackendChoice*) { return kBackend; }

template <class T>
concept ConfigEnum = std::is_enum_v<T>;

std::string format_value(const std::string& v) { return v; }
std::string format_value(bool v) { return v ? "true" : "false"; }
std::string format_value(int64_t v) { return std::to_string(v); }
std::string format_value(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  return std::string(buf, r.ptr);
}
template <ConfigEnum E>
std::string format_value(E v) { return name_of(names_for(static_cast<E*>(nullptr)), v); }

// One key of the table: how Boost parses it into a Config, how it prints.
struct Key {
  std::string name;  // "section.key"
  std::string help;
  std::function<std::string(const Config&)> print;
  bool is_text = false;  // a string value, which may be empty
};

// Builds Boost's options_description bound to `target` and the key table.
// Registration order is the order of --help and of the saved INI.
class Schema {
 public:
  explicit Schema(Config& target) : target_(target), desc_("configuration") { build(); }
  const po::options_description& desc() const { return desc_; }
  const std::vector<Key>& keys() const { return keys_; }

 private:
  template <class S, class T>
  void add(const char* section, const char* key, S Config::*sec, T S::*field, const char* help) {
    const std::string name = std::string(section) + "." + key;
    T* where = &((target_.*sec).*field);
    desc_.add_options()(name.c_str(), po::value<T>(where), help);
    keys_.push_back({name, help, [sec, field](const Config& c) { return format_value((c.*sec).*field); },
                     std::is_same_v<T, std::string>});
  }

  void build() {
    using C = Config;
    add("model", "path", &C::model, &ModelConfig::path, "HF model directory or dapo checkpoint (.h5)");
    add("model", "tokenizer", &C::model, &ModelConfig::tokenizer, "tokenizer.json (empty: the model's)");
    add("model", "chat_template", &C::model, &ModelConfig::chat_template,
        "auto | hf | chatml | none (auto: hf when tokenizer_config.json beside the tokenizer has a chat_template, "
        "else chatml; hf: that template, rendered as transformers' apply_chat_template)");
    add("data", "train_files", &C::data, &DataConfig::train_files, "training prompts, JSONL (comma-separated)");
    add("data", "val_files", &C::data, &DataConfig::val_files, "validation prompts, JSONL (comma-separated)");
    add("data", "max_prompt_length", &C::data, &DataConfig::max_prompt_length, "tokens");
    add("data", "truncation", &C::data, &DataConfig::truncation, "too-long prompts: left | error | skip");
    add("data", "seed", &C::data, &DataConfig::seed, "seed of the prompt order");
    add("rollout", "n", &C::rollout, &RolloutConfig::n, "responses per prompt");
    add("rollout", "temperature", &C::rollout, &RolloutConfig::temperature, "sampling temperature; 0: greedy");
    add("rollout", "top_p", &C::rollout, &RolloutConfig::top_p, "nucleus sampling; 1: off");
    add("rollout", "top_k", &C::rollout, &RolloutConfig::top_k, "top-k sampling; -1 or 0: off");
    add("rollout", "max_response_length", &C::rollout, &RolloutConfig::max_response_length, "tokens");
    add("rollout", "gen_batch_size", &C::rollout, &RolloutConfig::gen_batch_size, "prompts per generation round");
    add("rollout", "max_num_gen_batches", &C::rollout, &RolloutConfig::max_num_gen_batches,
        "generation rounds per step before giving up; 0: no limit");
    add("rollout", "on_short_batch", &C::rollout, &RolloutConfig::on_short_batch,
        "after max_num_gen_batches rounds without a full batch: train (on the groups kept) | skip (the update) | "
        "fail (exit 2)");
    add("rollout", "val_n", &C::rollout, &RolloutConfig::val_n, "samples per validation problem (k of avg@k, pass@k)");
    add("rollout", "val_temperature", &C::rollout, &RolloutConfig::val_temperature, "validation temperature; 0: greedy");
    add("rollout", "val_top_p", &C::rollout, &RolloutConfig::val_top_p, "validation nucleus sampling; 1: off");
    add("rollout", "val_top_k", &C::rollout, &RolloutConfig::val_top_k, "validation top-k; -1 or 0: off");
    add("rollout", "block_size", &C::rollout, &RolloutConfig::block_size, "positions per KV-cache block");
    add("rollout", "max_num_seqs", &C::rollout, &RolloutConfig::max_num_seqs,
        "sequences per engine step; 0: every sequence of a round, as far as the KV pool holds them");
    add("rollout", "max_num_batched_tokens", &C::rollout, &RolloutConfig::max_num_batched_tokens,
        "new positions per engine step");
    add("rollout", "spec_tokens", &C::rollout, &RolloutConfig::spec_tokens,
        "exact speculative decoding: n-gram draft tokens per answer and step in a round's tail; "
        "-1: 4 on GPUs, 0 on CPUs; 0: off");
    add("rollout", "spec_max_running", &C::rollout, &RolloutConfig::spec_max_running,
        "speculate while at most this many answers are being generated");
    add("rollout", "kv_cache_gib", &C::rollout, &RolloutConfig::kv_cache_gib,
        "KV-cache budget per rank (GiB); 0: sized from the requests");
    add("rollout", "kv_cache_memory_fraction", &C::rollout, &RolloutConfig::kv_cache_memory_fraction,
        "with kv_cache_gib = 0 on a GPU: at most this fraction of the free GPU memory");
    add("rollout", "exact_logprobs", &C::rollout, &RolloutConfig::exact_logprobs,
        "batch-invariant arithmetic: the engine's log-probs equal the trainer's bit for bit and serve as the old "
        "log-probs (no scoring pass); tp <= 2, on GPUs with train.fp32_logits");
    add("algorithm", "adv_estimator", &C::algorithm, &AlgorithmConfig::adv_estimator, "grpo");
    add("algorithm", "norm_adv_by_std", &C::algorithm, &AlgorithmConfig::norm_adv_by_std,
        "divide group-centred rewards by the group's std");
    add("algorithm", "clip_ratio_low", &C::algorithm, &AlgorithmConfig::clip_ratio_low, "eps_low");
    add("algorithm", "clip_ratio_high", &C::algorithm, &AlgorithmConfig::clip_ratio_high, "eps_high (clip-higher)");
    add("algorithm", "clip_ratio_c", &C::algorithm, &AlgorithmConfig::clip_ratio_c,
        "dual-clip bound for negative advantages (> 1)");
    add("algorithm", "loss_agg_mode", &C::algorithm, &AlgorithmConfig::loss_agg_mode,
        "token-mean | seq-mean-token-mean | seq-mean-token-sum");
    add("algorithm", "dynamic_sampling", &C::algorithm, &AlgorithmConfig::dynamic_sampling,
        "drop groups whose filter metric is the same for all responses");
    add("algorithm", "filter_metric", &C::algorithm, &AlgorithmConfig::filter_metric, "acc | score | seq_reward");
    add("algorithm", "overlong_buffer_len", &C::algorithm, &AlgorithmConfig::overlong_buffer_len,
        "soft overlong punishment window (tokens); 0: off");
    add("algorithm", "overlong_penalty_factor", &C::algorithm, &AlgorithmConfig::overlong_penalty_factor,
        "largest overlong penalty");
    add("algorithm", "overlong_filter", &C::algorithm, &AlgorithmConfig::overlong_filter,
        "mask truncated responses out of the loss");
    add("algorithm", "kl_coef", &C::algorithm, &AlgorithmConfig::kl_coef, "KL (k3) to a frozen reference; 0: off");
    add("algorithm", "entropy_coeff", &C::algorithm, &AlgorithmConfig::entropy_coeff, "entropy bonus");
    add("reward", "verifier", &C::reward, &RewardConfig::verifier,
        "symbolic (dapo's: symbolic equivalence) | math_dapo (the paper's: verl's math_dapo.compute_score)");
    add("optim", "lr", &C::optim, &OptimConfig::lr, "learning rate");
    add("optim", "warmup_steps", &C::optim, &OptimConfig::warmup_steps, "linear warmup steps, then constant");
    add("optim", "weight_decay", &C::optim, &OptimConfig::weight_decay, "AdamW decoupled weight decay");
    add("optim", "beta1", &C::optim, &OptimConfig::beta1, "AdamW beta1");
    add("optim", "beta2", &C::optim, &OptimConfig::beta2, "AdamW beta2");
    add("optim", "eps", &C::optim, &OptimConfig::eps, "AdamW epsilon");
    add("optim", "grad_clip", &C::optim, &OptimConfig::grad_clip, "global grad-norm clip; 0: off");
    add("optim", "shard_optimizer", &C::optim, &OptimConfig::shard_optimizer,
        "ZeRO-1: shard the Adam moments (and on GPUs the fp32 master weights) over the dp ranks; no effect when "
        "dp = 1");
    add("train", "train_batch_size", &C::train, &TrainConfig::train_batch_size, "prompts (groups) per step");
    add("train", "ppo_mini_batch_size", &C::train, &TrainConfig::ppo_mini_batch_size, "prompts per optimizer step");
    add("train", "ppo_epochs", &C::train, &TrainConfig::ppo_epochs, "passes over each step's batch");
    add("train", "max_token_len_per_gpu", &C::train, &TrainConfig::max_token_len_per_gpu,
        "micro-batch token budget per rank");
    add("train", "total_steps", &C::train, &TrainConfig::total_steps, "steps to run; 0: train.total_epochs passes over the data");
    add("train", "total_epochs", &C::train, &TrainConfig::total_epochs,
        "with total_steps = 0: passes over train_files (reshuffled between passes)");
    add("train", "seed", &C::train, &TrainConfig::seed, "seed of sampling and initialisation");
    add("train", "activation_recompute", &C::train, &TrainConfig::activation_recompute,
        "recompute activations in the backward pass");
    add("train", "fp32_logits", &C::train, &TrainConfig::fp32_logits,
        "the LM head's logits in fp32 when training (GPU), as the sampler draws them; false: bf16, faster");
    add("train", "val_every", &C::train, &TrainConfig::val_every, "steps between validations; 0: at the end only");
    add("train", "val_before_train", &C::train, &TrainConfig::val_before_train, "validate the starting model");
    add("train", "phase_timeout_s", &C::train, &TrainConfig::phase_timeout_s,
        "watchdog: end the job when a phase runs longer (seconds); 0: off");
    add("parallel", "backend", &C::parallel, &ParallelConfig::backend, "auto | cpu | cuda (auto: cuda where every rank has a GPU and the subcommand runs on GPUs, else cpu)");
    add("parallel", "tp", &C::parallel, &ParallelConfig::tp, "tensor-parallel size (dp = world / tp)");
    add("checkpoint", "dir", &C::checkpoint, &CheckpointConfig::dir, "checkpoint directory (one run at a time: .dapo.lock)");
    add("checkpoint", "save_every", &C::checkpoint, &CheckpointConfig::save_every, "steps; 0: at the end only");
    add("checkpoint", "keep_last", &C::checkpoint, &CheckpointConfig::keep_last, "checkpoints kept; 0: all");
    add("checkpoint", "resume", &C::checkpoint, &CheckpointConfig::resume, "auto | never | PATH (dapo sft: auto | never; a finished sft_final.h5 is kept)");
    add("checkpoint", "async", &C::checkpoint, &CheckpointConfig::async, "dapo train: save in the background (the step waits only for a copy to host memory)");
    add("checkpoint", "stop_warning_s", &C::checkpoint, &CheckpointConfig::stop_warning_s, "seconds from the stop signal to the kill (Slurm's --signal=B:USR1@N); dapo train warns when two saves at the measured write speed do not fit; 0: not checked");
    add("dump", "dir", &C::dump, &DumpConfig::dir, "rollout dump directory (not checkpoint.dir: the same file names)");
    add("dump", "every", &C::dump, &DumpConfig::every, "steps between rollout dumps; 0: off");
    add("log", "dir", &C::log, &LogConfig::dir, "metrics.jsonl and config.ini go here");
    add("log", "every", &C::log, &LogConfig::every, "steps between console lines");
    add("log", "all_ranks", &C::log, &LogConfig::all_ranks, "every rank logs, not only rank 0");
    add("log", "level", &C::log, &LogConfig::level, "debug | info | warn | error");
  }

  Config& target_;
  po::options_description desc_;
  std::vector<Key> keys_;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Closest known key, for "did you mean" hints on typos.
std::string closest_key(const std::string& key, const std::vector<Key>& keys) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  if (key.size() > 100) return best;  // no key is that long: no hint, and no time spent on one
  size_t best_d = 4;  // farther than this is no hint
  for (const auto& k : keys) {
    const size_t d = distance(key, k.name);
    if (d < best_d) best_d = d, best = k.name;
  }
  return best;
}

struct Assignment {
  std::string key, value, origin;  // origin: "FILE:LINE" or "command line"
};

constexpr size_t kMaxIniLineBytes = size_t(64) << 10;

std::vector<Assignment> read_ini(const std::string& path) {
  // An ifstream opens a folder and then reads nothing: an empty config.
  if (std::filesystem::is_directory(path))
    throw UserError(cat(path, ": is a directory, not a configuration file"));
  std::ifstream in(path);
  if (!in) throw UserError(cat(path, ": cannot open the configuration file"));
  std::vector<Assignment> out;
  std::set<std::string> seen;
  std::string line, section;
  // A configuration line is short: the cap keeps a runaway value (a file
  // given by mistake) from filling the memory and the error message.
  for (int64_t lineno = 0; read_bounded_line(in, line, path, lineno, kMaxIniLineBytes);) {
    const std::string where = cat(path, ":", lineno);
    std::string s = trim(line);
    if (s.empty() || s[0] == '#' || s[0] == ';') continue;
    if (s[0] == '[') {
      if (s.back() != ']' || s.size() < 3) throw UserError(cat(where, ": malformed section header '", capped(s), "'"));
      section = trim(s.substr(1, s.size() - 2));
      continue;
    }
    const auto eq = s.find('=');
    if (eq == std::string::npos) throw UserError(cat(where, ": expected 'key = value', got '", capped(s), "'"));
    const std::string key = trim(s.substr(0, eq));
    std::string value = trim(s.substr(eq + 1));
    // An inline comment needs whitespace before it, so values like "a#b" survive.
    for (const char* mark : {" #", "\t#", " ;", "\t;"})
      if (auto c = value.find(mark); c != std::string::npos) value = trim(value.substr(0, c));
    if (section.empty()) throw UserError(cat(where, ": key '", capped(key), "' outside of any [section]"));
    if (key.empty()) throw UserError(cat(where, ": empty key"));
    const std::string full = section + "." + key;
    if (!seen.insert(full).second) throw UserError(cat(where, ": key '", capped(key), "' set twice in [", capped(section), "]"));
    out.push_back({full, value, where});
  }
  return out;
}

Assignment parse_override(const std::string& arg) {
  std::string s = arg;
  if (s.rfind("--", 0) == 0) s = s.substr(2);
  const auto eq = s.find('=');
  if (eq == std::string::npos || s.find('.') == std::string::npos || s.find('.') > eq)
    throw UserError(cat("command line: '", capped(arg), "' is not of the form --section.key=value"));
  return {s.substr(0, eq), s.substr(eq + 1), "command line"};
}

void store(const Schema& schema, po::variables_map& vm, Assignment a) {
  const auto key = std::find_if(schema.keys().begin(), schema.keys().end(),
                                [&](const Key& k) { return k.name == a.key; });
  if (key == schema.keys().end()) {
    const std::string hint = closest_key(a.key, schema.keys());
    const auto dot = a.key.find('.');
    throw UserError(cat(a.origin, ": unknown key '", capped(a.key.substr(dot + 1)), "' in [",
                        capped(a.key.substr(0, dot)), "]",
                        hint.empty() ? std::string() : cat(" (did you mean ", hint, "?)")));
  }
  // An empty value clears the setting: a text key becomes empty (e.g.
  // --data.val_files= switches validation off), any other key takes its
  // default back, whatever a configuration file said.
  if (a.value.empty() && !key->is_text) a.value = key->print(Config{});
  po::parsed_options parsed(&schema.desc());
  parsed.options.emplace_back(a.key, std::vector<std::string>{a.value});
  try {
    po::store(parsed, vm);  // the first store of a key wins: overrides go first
  } catch (const po::error& e) {
    // Boost's reason may quote the whole value again: quote it capped there too.
    std::string why = e.what();
    const size_t at = a.value.empty() ? std::string::npos : why.find(a.value);
    why = at == std::string::npos ? capped(why)
                                  : cat(printable(why.substr(0, at)), capped(a.value),
                                        capped(why.substr(at + a.value.size())));
    throw UserError(cat(a.origin, ": bad value '", capped(a.value), "' for ", a.key, ": ", why));
  }
}

// A key given twice on the command line takes its last value (a job script
// passes its own --checkpoint.dir, the user's arguments come after it), but
// not silently: one warning line per such key names the value that wins.
// Printed once per launch: by the launcher's rank 0, or where no launcher
// says which rank this is.
void warn_repeated_overrides(const std::vector<std::string>& overrides) {
  std::map<std::string, std::pair<int, std::string>> given;  // key -> (times, last value)
  std::vector<std::string> order;
  for (const std::string& o : overrides) {
    const Assignment a = parse_override(o);
    auto& [times, value] = given[a.key];
    if (++times == 2) order.push_back(a.key);
    value = a.value;
  }
  if (order.empty()) return;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* rank = std::getenv(var); rank != nullptr && std::string(rank) != "0") return;
  for (const std::string& key : order) {
    const auto& [times, value] = given[key];
    DAPO_WARN("command line: ", key, " is given ", times, " times; the last one wins: ", key, " = '", capped(value),
              "'");
  }
}

void validate(const Config& c) {
  auto fail = [&](const std::string& key, const std::string& why) {
    throw UserError(cat(c.origin_of(key), ": ", key, ": ", why));
  };
  // Infinity and NaN pass range checks written as comparisons (nan > 0 is
  // false, inf > 0 true) and would fail later, far from the key.
  const auto& r = c.rollout;
  const auto& a = c.algorithm;
  const auto& o = c.optim;
  for (const auto& [key, v] : std::initializer_list<std::pair<const char*, double>>{
           {"rollout.temperature", r.temperature},
           {"rollout.top_p", r.top_p},
           {"rollout.val_temperature", r.val_temperature},
           {"rollout.val_top_p", r.val_top_p},
           {"rollout.kv_cache_gib", r.kv_cache_gib},
           {"rollout.kv_cache_memory_fraction", r.kv_cache_memory_fraction},
           {"algorithm.clip_ratio_low", a.clip_ratio_low},
           {"algorithm.clip_ratio_high", a.clip_ratio_high},
           {"algorithm.clip_ratio_c", a.clip_ratio_c},
           {"algorithm.overlong_penalty_factor", a.overlong_penalty_factor},
           {"algorithm.kl_coef", a.kl_coef},
           {"algorithm.entropy_coeff", a.entropy_coeff},
           {"optim.lr", o.lr},
           {"optim.weight_decay", o.weight_decay},
           {"optim.beta1", o.beta1},
           {"optim.beta2", o.beta2},
           {"optim.eps", o.eps},
           {"optim.grad_clip", o.grad_clip},
           {"train.phase_timeout_s", c.train.phase_timeout_s}})
    if (!std::isfinite(v)) fail(key, cat("must be a finite number, not ", v));
  if (r.n < 1) fail("rollout.n", "must be at least 1");
  if (r.temperature < 0) fail("rollout.temperature", "must be >= 0 (0 means greedy)");
  if (!(r.top_p > 0 && r.top_p <= 1)) fail("rollout.top_p", "must be in (0, 1]");
  if (r.top_k < -1) fail("rollout.top_k", "must be -1, 0 (off) or positive");
  if (r.max_response_length < 1) fail("rollout.max_response_length", "must be at least 1");
  if (r.gen_batch_size < 1) fail("rollout.gen_batch_size", "must be at least 1");
  if (r.max_num_gen_batches < 0) fail("rollout.max_num_gen_batches", "must be >= 0 (0 means no limit)");
  if (r.val_n < 1) fail("rollout.val_n", "must be at least 1");
  if (r.val_temperature < 0) fail("rollout.val_temperature", "must be >= 0 (0 means greedy)");
  if (!(r.val_top_p > 0 && r.val_top_p <= 1)) fail("rollout.val_top_p", "must be in (0, 1]");
  if (r.val_top_k < -1) fail("rollout.val_top_k", "must be -1, 0 (off) or positive");
  if (r.block_size < 1) fail("rollout.block_size", "must be at least 1");
  if (r.max_num_seqs < 0) fail("rollout.max_num_seqs", "must be >= 0 (0 means as many as the KV pool holds)");
  if (r.max_num_batched_tokens < 1) fail("rollout.max_num_batched_tokens", "must be at least 1");
  if (r.spec_tokens < -1) fail("rollout.spec_tokens", "must be -1 (4 on GPUs, 0 on CPUs), 0 (off) or positive");
  if (r.spec_max_running < 1) fail("rollout.spec_max_running", "must be at least 1");
  if (!(r.kv_cache_gib >= 0)) fail("rollout.kv_cache_gib", "must be >= 0 (0 means sized from the requests)");
  if (!(r.kv_cache_memory_fraction > 0 && r.kv_cache_memory_fraction <= 1))
    fail("rollout.kv_cache_memory_fraction", "must be in (0, 1]");
  if (c.data.max_prompt_length < 1) fail("data.max_prompt_length", "must be at least 1");
  if (!(a.clip_ratio_low >= 0 && a.clip_ratio_low < 1)) fail("algorithm.clip_ratio_low", "must be in [0, 1)");
  if (a.clip_ratio_high < 0) fail("algorithm.clip_ratio_high", "must be >= 0");
  if (a.clip_ratio_c <= 1) fail("algorithm.clip_ratio_c", "must be > 1");
  if (a.overlong_buffer_len < 0) fail("algorithm.overlong_buffer_len", "must be >= 0 (0 means off)");
  if (a.overlong_penalty_factor < 0) fail("algorithm.overlong_penalty_factor", "must be >= 0");
  if (a.kl_coef < 0) fail("algorithm.kl_coef", "must be >= 0");
  if (!(o.lr > 0)) fail("optim.lr", "must be > 0");
  if (o.warmup_steps < 0) fail("optim.warmup_steps", "must be >= 0");
  if (o.weight_decay < 0) fail("optim.weight_decay", "must be >= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) fail("optim.beta1", "must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) fail("optim.beta2", "must be in [0, 1)");
  if (!(o.eps > 0)) fail("optim.eps", "must be > 0");
  if (o.grad_clip < 0) fail("optim.grad_clip", "must be >= 0 (0 means off)");
  const auto& t = c.train;
  if (t.train_batch_size < 1) fail("train.train_batch_size", "must be at least 1");
  if (t.ppo_mini_batch_size < 1) fail("train.ppo_mini_batch_size", "must be at least 1");
  if (t.ppo_epochs < 1) fail("train.ppo_epochs", "must be at least 1");
  if (t.max_token_len_per_gpu < 1) fail("train.max_token_len_per_gpu", "must be at least 1");
  if (t.total_steps < 0) fail("train.total_steps", "must be >= 0 (0 means train.total_epochs passes over the data)");
  if (t.total_epochs < 1) fail("train.total_epochs", "must be at least 1");
  if (t.val_every < 0) fail("train.val_every", "must be >= 0 (0 means at the end only)");
  if (!(t.phase_timeout_s >= 0)) fail("train.phase_timeout_s", "must be >= 0 (0 means no watchdog)");
  if (c.parallel.tp < 1) fail("parallel.tp", "must be at least 1");
  if (c.checkpoint.save_every < 0) fail("checkpoint.save_every", "must be >= 0");
  if (c.checkpoint.keep_last < 0) fail("checkpoint.keep_last", "must be >= 0");
  if (!(c.checkpoint.stop_warning_s >= 0) || c.checkpoint.stop_warning_s > 1e9)
    fail("checkpoint.stop_warning_s", "must be between 0 and 1e9 seconds");
  if (c.checkpoint.resume.empty()) fail("checkpoint.resume", "must be auto, never or a path");
  if (c.dump.every < 0) fail("dump.every", "must be >= 0");
  if (c.log.every < 1) fail("log.every", "must be at least 1");
  // Upper bounds, generous for real runs: a count far beyond them (a typo, a
  // value meant for another key) would size an allocation that fails far
  // from the key ("host allocation of N bytes failed"), or wrap around in a
  // 32-bit index.
  constexpr int64_t kMaxTokens = int64_t(1) << 20;  // 1,048,576 tokens
  struct Bound {
    const char* key;
    int64_t value, max;
    const char* what;  // what the key counts, and what real runs use
  };
  for (const Bound& b : std::initializer_list<Bound>{
           {"rollout.n", r.n, 65536, "responses per prompt (the paper samples 16)"},
           {"rollout.val_n", r.val_n, 65536, "samples per validation problem (the paper's avg@32 takes 32)"},
           {"rollout.gen_batch_size", r.gen_batch_size, kMaxTokens, "prompts per generation round (the paper: 1536)"},
           {"rollout.max_response_length", r.max_response_length, kMaxTokens, "tokens (the paper: 20480)"},
           {"rollout.block_size", r.block_size, 65536, "positions per KV-cache block (vLLM uses 16 to 128)"},
           {"rollout.max_num_seqs", r.max_num_seqs, 65536, "sequences per engine step (vLLM's default: 256; 0 runs as many as the KV pool holds)"},
           {"rollout.spec_tokens", r.spec_tokens, 64, "draft tokens per answer and step (vLLM's n-gram: 3 to 5)"},
           {"rollout.spec_max_running", r.spec_max_running, 65536, "answers running at once"},
           {"rollout.max_num_batched_tokens", r.max_num_batched_tokens, kMaxTokens,
            "new positions per engine step (vLLM's default: 8192)"},
           {"data.max_prompt_length", c.data.max_prompt_length, kMaxTokens, "tokens (the paper: 2048)"},
           {"algorithm.overlong_buffer_len", a.overlong_buffer_len, kMaxTokens, "tokens (the paper: 4096)"},
           {"train.train_batch_size", t.train_batch_size, kMaxTokens, "prompts per step (the paper: 512)"},
           {"train.ppo_mini_batch_size", t.ppo_mini_batch_size, kMaxTokens, "prompts per optimizer step (the paper: 32)"},
           {"train.max_token_len_per_gpu", t.max_token_len_per_gpu, 2 * kMaxTokens,
            "tokens per micro-batch (room for the longest prompt and response)"},
           {"parallel.tp", c.parallel.tp, 65536, "ranks per tensor-parallel group"}})
    if (b.value > b.max) fail(b.key, cat(b.value, " is more than ", b.max, ", the most dapo takes: ", b.what, "; lower it"));
  // Loss and reward coefficients: real runs use 0 to a few (the paper: no
  // KL, no entropy bonus, overlong_penalty_factor 1). Far beyond that the
  // loss overflows float32 and the run would stop as "diverged", blaming
  // optim.lr.
  constexpr double kMaxCoefficient = 1e3;
  for (const auto& [key, v] : std::initializer_list<std::pair<const char*, double>>{
           {"algorithm.kl_coef", a.kl_coef},
           {"algorithm.entropy_coeff", a.entropy_coeff},
           {"algorithm.overlong_penalty_factor", a.overlong_penalty_factor}})
    if (std::fabs(v) > kMaxCoefficient)
      fail(key, cat(v, " is beyond +-", kMaxCoefficient, ", the most dapo takes (real runs use 0 to a few: a larger "
                    "coefficient overflows the loss); lower it"));
  // Decoupled weight decay multiplies every weight by 1 - lr x weight_decay
  // a step: at 1 or more it zeroes or flips the weights.
  if (o.lr * o.weight_decay >= 1)
    fail("optim.weight_decay", cat(o.weight_decay, " times optim.lr = ", o.lr, " (", c.origin_of("optim.lr"),
                                   ") is ", o.lr * o.weight_decay, ", at least 1: each step multiplies the weights "
                                   "by 1 - lr x weight_decay, which would zero or flip them; lower one of them"));
  try {
    parse_log_level(c.log.level);
  } catch (const UserError&) {
    fail("log.level", cat("unknown log level '", capped(c.log.level), "' (debug|info|warn|error)"));
  }
}

}  // namespace

// Boost.ProgramOptions finds these by argument-dependent lookup for our enums.
template <ConfigEnum E>
void validate(boost::any& v, const std::vector<std::string>& values, E*, int) {
  po::validators::check_first_occurrence(v);
  v = boost::any(parse_enum(names_for(static_cast<E*>(nullptr)), po::validators::get_single_string(values)));
}

void check_training_config(const Config& c) {
  auto fail = [&](const std::string& key, const std::string& why) {
    throw UserError(cat(c.origin_of(key), ": ", key, ": ", why));
  };
  if (c.algorithm.dynamic_sampling && c.rollout.n < 2)
    fail("rollout.n", "dynamic sampling needs at least 2 responses per prompt (or algorithm.dynamic_sampling = false)");
  if (c.train.train_batch_size % c.train.ppo_mini_batch_size != 0)
    fail("train.ppo_mini_batch_size", cat("must divide train.train_batch_size = ", c.train.train_batch_size));
  if (!(c.rollout.temperature > 0))
    fail("rollout.temperature", "must be > 0 for training (the update divides the logits by it)");
  // Each round holds n responses of each of gen_batch_size prompts at once.
  constexpr int64_t kMaxRoundResponses = int64_t(1) << 24;
  if (c.rollout.n * c.rollout.gen_batch_size > kMaxRoundResponses)
    fail("rollout.gen_batch_size",
         cat(c.rollout.gen_batch_size, " prompts x rollout.n = ", c.rollout.n, " (",
             c.origin_of("rollout.n"), ") is ", c.rollout.n * c.rollout.gen_batch_size,
             " responses per generation round, more than ", kMaxRoundResponses, "; lower one of them"));
  if (c.algorithm.overlong_buffer_len >= c.rollout.max_response_length)
    fail("algorithm.overlong_buffer_len", cat("must be below rollout.max_response_length = ",
                                              c.rollout.max_response_length, " (0 turns the punishment off)"));
}

std::string Config::origin_of(const std::string& key) const {
  const auto it = origins.find(key);
  return it == origins.end() ? "default" : it->second;
}

Config load_config(const std::string& ini_path, const std::vector<std::string>& overrides) {
  Config config;
  Schema schema(config);
  po::variables_map vm;
  std::vector<Assignment> assignments;
  // The last of several overrides of one key wins, as on any command line:
  // Boost keeps the first value stored, so they are stored last to first.
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) assignments.push_back(parse_override(*it));
  // Several files (comma-separated, e.g. a base recipe and a job's
  // overrides): a later file wins over an earlier one, so they are stored
  // last to first too.
  std::vector<std::string> files;
  for (size_t begin = 0; begin <= ini_path.size() && !ini_path.empty();) {
    const size_t comma = std::min(ini_path.find(',', begin), ini_path.size());
    const std::string f = trim(ini_path.substr(begin, comma - begin));
    if (f.empty()) throw UserError(cat("command line: --config '", capped(ini_path), "' has an empty file name"));
    files.push_back(f);
    begin = comma + 1;
  }
  for (auto it = files.rbegin(); it != files.rend(); ++it)
    for (auto& a : read_ini(*it)) assignments.push_back(std::move(a));
  for (const auto& a : assignments) {
    store(schema, vm, a);
    config.origins.emplace(a.key, a.origin);  // first (highest-precedence) origin wins
  }
  po::notify(vm);
  warn_repeated_overrides(overrides);
  validate(config);
  return config;
}

std::string config_to_ini(const Config& config) {
  Config scratch;
  Schema schema(scratch);
  std::ostringstream os;
  std::string section;
  for (const auto& k : schema.keys()) {
    const auto dot = k.name.find('.');
    const std::string sec = k.name.substr(0, dot);
    if (sec != section) {
      os << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    os << k.name.substr(dot + 1) << " = " << k.print(config) << "\n";
  }
  return os.str();
}

std::string config_help() {
  Config defaults;
  Schema schema(defaults);
  std::ostringstream os;
  for (const auto& k : schema.keys()) {
    std::string left = "  --" + k.name + "=" + k.print(defaults);
    if (left.size() < 44) left.resize(44, ' ');
    os << left << " " << k.help << "\n";
  }
  return os.str();
}

std::string to_string(ChatTemplate v) { return format_value(v); }
std::string to_string(RewardVerifier v) { return format_value(v); }
std::string to_string(ShortBatch v) { return format_value(v); }
std::string to_string(Truncation v) { return format_value(v); }
std::string to_string(AdvEstimator v) { return format_value(v); }
std::string to_string(LossAggMode v) { return format_value(v); }
std::string to_string(FilterMetric v) { return format_value(v); }
std::string to_string(BackendChoice v) { return format_value(v); }

}  // namespace dapo
