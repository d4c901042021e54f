// PromptSet: records -> chat template -> token ids -> truncation.
#include "dapo/trainer/prompt_set.h"



#include "dapo/core/error.h"
#include "dapo/rollout/model_source.h"

namespace dapo::trainer {

PromptSetOptions prompt_set_options(const Config& config, int64_t vocab_size) {
  PromptSetOptions o;
  o.chat.kind = config.model.chat_template;
  o.max_prompt_length = config.data.max_prompt_length;
  o.truncation = config.data.truncation;
  o.vocab_size = vocab_size;
  return o;
}

PromptSet::PromptSet(const data::PromptDataset& dataset, const data::Tokenizer& tokenizer,
                     const PromptSetOptions& options)
    : dataset_(&dataset) {
  const int64_t n = dataset.size();
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(n));
  std::vector<data::TruncationOutcome> outcome(size_t(n), data::TruncationOutcome::kept);
  std::vector<int64_t> length(size_t(n), 0);
  // The first error in record order, so the message does not depend on threads.
  std::vector<std::string> error(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < n; ++i) {
    const data::PromptRecord& rec = dataset[i];
    try {
      std::vector<int32_t> v = rec.is_chat() ? data::encode_chat(tokenizer, rec.messages, options.chat, true, rec.where())
                                             : tokenizer.encode(rec.text);
      if (v.empty()) throw UserError(cat(rec.where(), ": the prompt encodes to no token"));
      for (const int32_t id : v)
        if (id < 0 || id >= options.vocab_size)
          throw UserError(cat(rec.where(), ": the prompt has token id ", id, ", outside the model's vocabulary of ",
                              options.vocab_size, " (do the tokenizer and the model match?)"));
      length[size_t(i)] = int64_t(v.size());
      outcome[size_t(i)] = data::apply_truncation(v, options.max_prompt_length, options.truncation, rec);
      ids[size_t(i)] = std::move(v);
    } catch (const UserError& e) {
      error[size_t(i)] = e.what();
    }
  }
  for (const std::string& e : error)
    if (!e.empty()) throw UserError(e);
  for (int64_t i = 0; i < n; ++i) {
    truncation_.add(outcome[size_t(i)], length[size_t(i)]);
    if (outcome[size_t(i)] == data::TruncationOutcome::skipped) continue;
    record_.push_back(i);
    ids_.push_back(std::move(ids[size_t(i)]));
  }
  if (record_.empty())
    throw UserError(cat("every prompt of ", dataset[0].file, " is longer than data.max_prompt_length = ",
                        options.max_prompt_length, " and data.truncation = skip dropped them all"));
}

void check_prompt_positions(const PromptSet& set, const Config& config, const model::Qwen2Config& model) {
  int64_t longest = -1;
  for (int64_t i = 0; i < set.size(); ++i)
    if (longest < 0 || set.ids(i).size() > set.ids(longest).size()) longest = i;
  if (longest >= 0)
    rollout::check_positions(int64_t(set.ids(longest).size()), config.rollout.max_response_length, model,
                             set.record(longest).where());
}

}  // namespace dapo::trainer
