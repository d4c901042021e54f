// Resolving and loading the model of `dapo generate`: checkpoint or HF
// directory, each rank reading its own slices.
#include "dapo/rollout/model_source.h"

#include <algorithm>
#include <atomic>
#include <filesystem>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/data/chat_template.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/io/tensor_digest.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::rollout {
namespace fs = std::filesystem;

ModelSource resolve_model_source(const std::string& checkpoint, const ModelConfig& config) {
  ModelSource s;
  s.path = checkpoint.empty() ? config.path : checkpoint;
  if (s.path.empty())
    throw UserError("no model: give --checkpoint C.h5, or model.path (a checkpoint or an HF model directory)");
  const std::string named_by = checkpoint.empty() ? "model.path" : "--checkpoint";
  std::error_code ec;
  if (!fs::exists(s.path, ec)) throw UserError(cat(s.path, ": no such file or directory (", named_by, ")"));
  // A folder is an HF model directory, unless it is a sharded checkpoint's.
  s.hf_dir = fs::is_directory(s.path, ec) && !io::is_sharded_checkpoint(s.path);
  if (!config.tokenizer.empty()) {
    if (!fs::exists(config.tokenizer, ec))
      throw UserError(cat(config.tokenizer, ": no such file (model.tokenizer)"));
    s.tokenizer = config.tokenizer;
  } else {
    const fs::path dir = s.hf_dir ? fs::path(s.path) : fs::path(s.path).parent_path();
    const fs::path beside = (dir.empty() ? fs::path(".") : dir) / "tokenizer.json";
    if (fs::exists(beside, ec)) s.tokenizer = beside.string();
  }
  return s;
}

namespace {

// The model's config, checked against the tensors present before the
// caller sizes a ParamStore by it (a damaged config must not allocate).
model::Qwen2Config read_config(const ModelSource& source, const parallel::Comm& world) {
  if (source.hf_dir) {
    const model::Qwen2Config config = model::load_qwen2_config((fs::path(source.path) / "config.json").string());
    io::check_hf_weights(io::SafetensorsSet::open_dir(source.path), config, source.path);
    return config;
  }
  io::CheckpointReader reader(source.path, world);
  model::Qwen2Config config = reader.info().model;
  reader.close();
  return config;
}

// Reads every tensor slice of `store` from the HF directory's safetensors;
// returns the first error's message ("" when all went well).
std::string read_hf_slices(const std::string& dir, model::ParamStore& store) {
  try {
    const io::SafetensorsSet weights = io::SafetensorsSet::open_dir(dir);
    std::vector<float> local;
    for (const model::ParamEntry& e : store.entries()) {
      const std::string& name = e.spec.name;
      if (!weights.contains(name)) throw UserError(cat(weights.origin(), ": missing tensor '", name, "'"));
      const io::TensorInfo& info = weights.info(name);
      if (info.shape != e.spec.shape) {
        std::string want = "(";
        for (size_t i = 0; i < e.spec.shape.size(); ++i) want += cat(i ? ", " : "", e.spec.shape[i]);
        throw UserError(cat(weights.file_of(name).path(), ": tensor '", name, "' has shape ", info.shape_string(),
                            ", config.json implies ", want, ")"));
      }
      local.resize(size_t(e.param.numel()));
      if (e.slice.dim < 0)
        weights.read_f32(name, local.data());
      else
        weights.read_f32_slice(name, e.slice.dim, e.slice.begin, e.slice.count, local.data());
      if (io::count_non_finite(local.data(), int64_t(local.size())) > 0)
        throw UserError(cat("non-finite values in tensor ", name, " of ", weights.file_of(name).path(),
                            ": the model cannot run"));
      store.load_local(name, local.data(), int64_t(local.size()));
    }
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

std::unique_ptr<model::ParamStore> load_model_params(const ModelSource& source, const parallel::Grid& grid,
                                                     Device device, void* stream) {
  const parallel::Comm& world = grid.world;
  std::string error;
  model::Qwen2Config config;
  try {
    config = read_config(source, world);
    model::check_tp_compatible(config, grid.tp_size);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(world, error);
  auto store = std::make_unique<model::ParamStore>(config, grid.tp_rank, grid.tp_size, device, stream);
  if (source.hf_dir) {
    io::agree_on_error(world, read_hf_slices(source.path, *store));
    DAPO_INFO("model: ", store->entries().size(), " tensors from the HF directory ", source.path,
              " (imported in memory)");
  } else {
    model::ParamHostAccess host(*store);
    io::load_model_checkpoint(source.path, world, grid.tp_rank, grid.tp_size,
                              [&](const model::ParamSpec& spec, const model::SliceSpec&) {
                                return host.write_target(*store, spec.name);
                              });
    host.finish(*store);
    DAPO_INFO("model: ", store->entries().size(), " tensors from the checkpoint ", source.path);
  }
  return store;
}

void check_positions(int64_t prompt_tokens, int64_t max_response_length, const model::Qwen2Config& config,
                     const std::string& where) {
  if (prompt_tokens + max_response_length <= config.max_position_embeddings) return;
  throw UserError(cat(where, ": a prompt of ", prompt_tokens, " tokens + rollout.max_response_length = ",
                      max_response_length, " is ", prompt_tokens + max_response_length,
                      " positions, more than the model's max_position_embeddings = ", config.max_position_embeddings,
                      ": lower rollout.max_response_length or data.max_prompt_length"));
}

std::string vocab_fit_note(const data::Tokenizer& tokenizer, const model::Qwen2Config& config, bool* warning) {
  const int64_t model_vocab = config.vocab_size, tok_vocab = tokenizer.vocab_size();
  if (warning) *warning = false;
  if (model_vocab <= tok_vocab) return "";
  const int64_t extra = model_vocab - tok_vocab;
  // Qwen2.5 and Qwen3 pad their embedding to 151,936 (152,064 from 7B on)
  // rows for a tokenizer of 151,665 or 151,669 ids: 271 to 399 rows that
  // no text maps to, by design. Padding is rounding a row count up to a
  // multiple of 32 (Qwen: of 128) with fewer than 1,024 spare rows; anything
  // more suggests a tokenizer that belongs to another model.
  const bool padding = model_vocab % 32 == 0 && extra < kVocabPaddingRows;
  if (warning) *warning = !padding;
  if (padding)
    return cat("model: vocab_size = ", model_vocab, " rows, the tokenizer ", tokenizer.source(), " has ", tok_vocab,
               " ids: the ", extra, " extra rows (ids ", tok_vocab, "..", model_vocab - 1,
               ") are the embedding's padding, as Qwen ships it; a sampled one would decode to nothing");
  return cat("model: vocab_size = ", model_vocab, " but the tokenizer ", tokenizer.source(), " has only ", tok_vocab,
             " ids: ", extra, " ids (", tok_vocab, "..", model_vocab - 1,
             ") decode to nothing, more than an embedding's padding; does the tokenizer belong to this model?");
}

std::vector<int32_t> response_eos_ids(const data::Tokenizer* tokenizer, const model::Qwen2Config& config) {
  std::vector<int32_t> ids;
  if (tokenizer) {
    // Where the sampler's vocabulary meets the tokenizer's: said once per
    // process (generate, train, eval all come through here at load).
    static std::atomic<bool> said{false};
    bool warning = false;
    const std::string note = vocab_fit_note(*tokenizer, config, &warning);
    if (!note.empty() && !said.exchange(true)) {
      if (warning)
        DAPO_WARN(note);
      else
        DAPO_INFO(note);
    }
    ids = data::eos_token_ids(*tokenizer);
  }
  for (const int64_t id : config.eos_token_ids)
    if (id >= 0 && id < config.vocab_size && std::find(ids.begin(), ids.end(), int32_t(id)) == ids.end())
      ids.push_back(int32_t(id));
  return ids;
}

}  // namespace dapo::rollout
