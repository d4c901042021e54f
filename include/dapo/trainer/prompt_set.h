// The prompts of a training or validation data set, encoded once at the
// start of a run: each record's chat messages rendered with
// model.chat_template (raw-text prompts as they are), tokenized, and cut to
// data.max_prompt_length by data.truncation. Prompts dropped by
// truncation = skip are not in the set, so the prompt order (and the
// checkpointed cursor) runs over the kept ones only.
//
// Every rank encodes the whole set (the same result everywhere, no
// communication): 17k DAPO-Math prompts take about a second at the
// tokenizer's 20 MB/s, with OpenMP threads over records.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"
#include "dapo/data/truncation.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::trainer {

struct PromptSetOptions {
  data::ChatFormat chat;          // model.chat_template
  int64_t max_prompt_length = 1;  // data.max_prompt_length
  Truncation truncation = Truncation::left;
  int64_t vocab_size = 0;         // the model's; every id must be below it
};
PromptSetOptions prompt_set_options(const Config& config, int64_t vocab_size);

class PromptSet {
 public:
  // Encodes every record of `dataset` (which must outlive the set).
  // UserError "FILE:LINE: ..." for a prompt the chat template refuses, a
  // token id outside the model's vocabulary (tokenizer and model do not
  // match), truncation = error on a long prompt, or no prompt left.
  PromptSet(const data::PromptDataset& dataset, const data::Tokenizer& tokenizer, const PromptSetOptions& options);

  int64_t size() const { return int64_t(record_.size()); }
  const data::PromptRecord& record(int64_t i) const { return (*dataset_)[record_[size_t(i)]]; }
  std::span<const int32_t> ids(int64_t i) const { return ids_[size_t(i)]; }
  // Truncated and skipped prompts, counted once at encoding.
  const data::TruncationStats& truncation() const { return truncation_; }

 private:
  const data::PromptDataset* dataset_;
  std::vector<int64_t> record_;            // (P) dataset index of each kept prompt
  std::vector<std::vector<int32_t>> ids_;  // (P) token ids after the template and truncation
  data::TruncationStats truncation_;
};

// The longest prompt of `set` plus rollout.max_response_length must fit the
// model's max_position_embeddings (rollout::check_positions): a UserError
// naming that prompt's FILE:LINE otherwise.
void check_prompt_positions(const PromptSet& set, const Config& config, const model::Qwen2Config& model);

}  // namespace dapo::trainer
