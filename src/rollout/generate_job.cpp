// run_generate_job: model + tokenizer + prompts -> engine per dp group ->
// rollout batches gathered to world rank 0 -> output JSONL in input order.
#include "dapo/rollout/generate_job.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <optional>

#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/data/chat_template.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/rollout/generate_jsonl.h"
#include "dapo/rollout/model_source.h"

namespace dapo::rollout {
namespace {

// Rank 0 gets, from tp rank 0 of every dp group, its batch; the others get {}.
std::vector<RolloutBatch> gather_batches(const parallel::Grid& grid, const RolloutBatch& mine) {
  std::vector<std::vector<std::byte>> to_each(size_t(grid.world_size()));
  if (grid.tp_rank == 0) to_each[0] = mine.to_bytes();
  std::vector<int64_t> sizes;
  const std::vector<std::byte> got = grid.world.all_to_all_v(to_each, &sizes);
  std::vector<RolloutBatch> by_dp;
  if (grid.world_rank() != 0) return by_dp;
  size_t offset = 0;
  for (int w = 0; w < grid.world_size(); ++w) {
    const size_t n = size_t(sizes[size_t(w)]);
    if (w % grid.tp_size == 0)  // world rank w is tp rank 0 of dp group w / tp (grid.h)
      by_dp.push_back(RolloutBatch::from_bytes(std::span<const std::byte>(got).subspan(offset, n)));
    offset += n;
  }
  return by_dp;
}

void write_output(const std::string& path, const GenerateInput& input, const RolloutBatch& batch, int64_t n,
                  const data::Tokenizer* tokenizer) {
  std::ostringstream out;
  write_generate_output(out, input, batch, n, tokenizer);
  io::write_output_file(path, out.str(), "output");  // devices and FIFOs written in place, files atomically
}

}  // namespace

GenerateSummary run_generate_job(const Config& config, const GenerateJob& job, const parallel::Grid& grid,
                                 const ops::CudaDevice* gpu) {
  const bool root = grid.world_rank() == 0;
  const ModelSource source = resolve_model_source(job.checkpoint, config.model);
  Arena no_scratch(0, gpu ? Device::cuda : Device::cpu, "unused");  // the engine brings its own
  const ops::Ctx ctx = gpu ? gpu->ctx(&no_scratch) : ops::Ctx{};
  std::unique_ptr<model::ParamStore> store =
      load_model_params(source, grid, gpu ? Device::cuda : Device::cpu, ctx.stream);
  const model::Qwen2Config& mc = store->config();
  std::optional<data::Tokenizer> tokenizer;
  if (!source.tokenizer.empty()) tokenizer.emplace(data::Tokenizer::load(source.tokenizer));
  const data::Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  DAPO_INFO("tokenizer: ", tok ? source.tokenizer : std::string("none (prompt_ids only, no response text)"));

  PromptEncoding enc;
  enc.tokenizer = tok;
  enc.chat = data::resolve_chat_format(config.model.chat_template, source.tokenizer);
  enc.vocab_size = mc.vocab_size;
  enc.max_prompt_length = config.data.max_prompt_length;
  enc.truncation = config.data.truncation;
  GenerateInput input = read_generate_input(job.input, enc);
  if (root) {
    input.truncation.report(config.data.max_prompt_length, job.input);
    if (input.duplicate_uids > 0)
      DAPO_WARN(job.input, ": ", input.duplicate_uids, " prompts have the (data_source, extra_info.index) of an "
                "earlier line: they are sampled with the same random numbers");
  }

  // The longest prompt decides whether a response can run past the model's positions.
  const GenerateRecord* longest = nullptr;
  for (const GenerateRecord& r : input.records)
    if (!r.skipped && (!longest || r.prompt_ids.size() > longest->prompt_ids.size())) longest = &r;
  if (longest)
    check_positions(int64_t(longest->prompt_ids.size()), config.rollout.max_response_length, mc,
                    cat(job.input, ":", longest->line));

  // Round robin over dp: kept prompt i goes to dp rank i % dp.
  std::vector<PromptInput> mine;
  int64_t kept = 0;
  for (const GenerateRecord& r : input.records) {
    if (r.skipped) continue;
    if (kept++ % grid.dp_size == grid.dp_rank) mine.push_back({r.uid, r.prompt_ids});
  }
  const SamplingOptions sampling = sampling_options(config, response_eos_ids(tok, mc), 0);
  if (root && sampling.temperature == 0 && sampling.n > 1)
    DAPO_WARN("generate: rollout.n = ", sampling.n, " (", config.origin_of("rollout.n"),
              ") at rollout.temperature = 0 (greedy): every prompt gets ", sampling.n,
              " identical responses; set --rollout.n=1, or a temperature > 0 to sample");
  if (sampling.eos_ids.empty())
    DAPO_INFO("generate: no EOS id (no tokenizer and none in the model's config): responses stop at ",
              sampling.max_response_length, " tokens");

  model::Qwen2Model model(*store, grid.tp);
  GenerationEngine engine(model, grid.tp, ctx, job.engine);
  auto last = Clock::now();
  const ProgressCallback progress = [&](const GenerationProgress& p) {
    if (seconds_since(last) < 2.0 && p.finished < p.total) return;
    last = Clock::now();
    DAPO_INFO("generate: step ", p.step, ", ", p.running, " running, ", p.waiting, " waiting, ", p.finished, "/",
              p.total, " responses, ", int64_t(p.tokens_per_s), " tokens/s");
  };
  const auto start = Clock::now();
  RolloutBatch batch;
  std::string error;
  try {
    batch = engine.generate(mine, sampling, progress);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (gpu) gpu->check_flags("generation");
  const GenerationStats& st = engine.stats();
  DAPO_INFO("generate: KV cache ", double(st.kv_cache_bytes) / 1048576.0, " MiB (", st.num_blocks, " blocks of ",
            st.block_size, " positions, peak ", st.scheduler.peak_blocks, " used), ", st.scheduler.steps, " steps, ",
            st.scheduler.preemptions, " preemptions, ", st.scheduler.block_copies, " block copies");
  if (st.scheduler.drafted_tokens > 0)
    DAPO_INFO("generate: speculative decoding: ", st.scheduler.spec_steps, " steps with ",
              st.scheduler.drafted_tokens, " draft tokens, ", st.scheduler.accepted_tokens, " taken (",
              int64_t(100.0 * double(st.scheduler.accepted_tokens) / double(st.scheduler.drafted_tokens)), "%)");

  std::vector<RolloutBatch> by_dp = gather_batches(grid, batch);
  GenerateSummary summary;
  summary.seconds = seconds_since(start);
  if (!root) return summary;
  // Back to input order: kept prompt i is prompt i / dp of dp rank i % dp.
  RolloutBatch all;
  const int64_t n = sampling.n;
  for (int64_t i = 0; i < kept; ++i) {
    const RolloutBatch& b = by_dp[size_t(i % grid.dp_size)];
    const int64_t p = i / grid.dp_size;
    const int64_t at = all.add_prompt(b.prompt_uid[size_t(p)], b.prompt(p));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = p * n + k;
      all.add_response(at, b.sample_index[size_t(r)], b.response(r), b.logprobs(r), b.finish_reason[size_t(r)]);
    }
  }
  write_output(job.output, input, all, n, tok);
  summary.prompts = kept;
  summary.skipped = int64_t(input.records.size()) - kept;
  summary.responses = all.num_responses();
  summary.tokens = all.total_response_tokens();
  for (const FinishReason f : all.finish_reason) summary.eos += f == FinishReason::eos ? 1 : 0;
  return summary;
}

}  // namespace dapo::rollout
