// Where `dapo generate` (and later `dapo eval`) gets its model and
// tokenizer: a dapo checkpoint (.h5) or an HF model directory, named by
// --checkpoint or by model.path, with the tokenizer of model.tokenizer or
// the tokenizer.json found beside the model. Each rank loads only its
// tensor-parallel slice of every parameter.
#pragma once

#include <memory>
#include <string>

#include "dapo/core/config.h"
#include "dapo/data/tokenizer.h"
#include "dapo/model/param_store.h"
#include "dapo/parallel/grid.h"

namespace dapo::rollout {

struct ModelSource {
  std::string path;       // the checkpoint file or the HF directory
  bool hf_dir = false;    // an HF directory (config.json + safetensors), imported in memory
  std::string tokenizer;  // tokenizer.json to use; empty: none (the model works on token ids alone)
};

// `checkpoint` (the --checkpoint option; empty: model.path) and the
// tokenizer: model.tokenizer if set (it must exist), else tokenizer.json in
// the HF directory or beside the checkpoint file, if there is one. Throws
// UserError when neither names a model, or a named path does not exist.
ModelSource resolve_model_source(const std::string& checkpoint, const ModelConfig& config);

// This rank's slice (grid.tp_rank of grid.tp_size) of every parameter.
// Collective over grid.world. A checkpoint goes through
// io::load_model_checkpoint; an HF directory is read tensor by tensor from
// its safetensors (one file or an index of shards; F32/BF16/F16) after
// config.json (unsupported architectures refused). UserErrors name the file
// (and tensor) and are thrown on every rank alike.
// The ids that end a response: the tokenizer's chat markers
// (data::eos_token_ids; none without a tokenizer), then the model's
// config.json eos_token_id(s), without repeats.
// Also says, once per process, how the model's vocabulary fits the
// tokenizer's (vocab_fit_note): generate, train and eval all call it when
// they load the model and tokenizer.
std::vector<int32_t> response_eos_ids(const data::Tokenizer* tokenizer, const model::Qwen2Config& config);

// A model with more embedding rows (config vocab_size) than the tokenizer
// has ids samples ids that decode to nothing. Qwen pads its embedding so
// (151,936 rows for 151,665 ids): padding, a row count that is a multiple
// of 32 with fewer than kVocabPaddingRows spare rows, gets an information
// line ("... are the embedding's padding, as Qwen ships it ..."); more
// spare rows get a warning (`*warning` set) asking whether the tokenizer
// belongs to the model. Both name both sizes. "" when the tokenizer covers
// the model's ids.
inline constexpr int64_t kVocabPaddingRows = 1024;
std::string vocab_fit_note(const data::Tokenizer& tokenizer, const model::Qwen2Config& config, bool* warning);

// The store lives on `device` (ordered on `stream`, the rank's GPU stream, for a GPU).
std::unique_ptr<model::ParamStore> load_model_params(const ModelSource& source, const parallel::Grid& grid,
                                                     Device device = Device::cpu, void* stream = nullptr);

// A prompt of `prompt_tokens` plus up to `max_response_length` response
// tokens must fit the model's max_position_embeddings, as `dapo sft`
// requires of its pairs (beyond it the rotary positions are ones the model
// never saw). UserError "<where>: ..." naming both keys otherwise.
void check_positions(int64_t prompt_tokens, int64_t max_response_length, const model::Qwen2Config& config,
                     const std::string& where);

}  // namespace dapo::rollout
