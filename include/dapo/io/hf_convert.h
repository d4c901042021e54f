// HF model directories <-> dapo checkpoints: the work of `dapo import-hf`
// and `dapo export-hf`, tensor by tensor through host buffers (never the
// whole model in memory at once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/model/qwen2_config.h"
#include "dapo/parallel/comm.h"

namespace dapo::io {

struct ImportSummary {
  model::Qwen2Config config;
  int64_t tensors = 0;
  int64_t parameters = 0;            // elements over all tensors
  std::vector<std::string> ignored;  // tensors of the HF files that are not parameters (rotary inv_freq, ...)
  std::vector<std::string> non_finite;  // parameters holding NaN or Inf (imported, with a warning)
};

// Reads `hf_dir`/config.json (unsupported architectures refused) and the
// weights (model.safetensors, or the shards of model.safetensors.index.json;
// F32, BF16 or F16, converted to fp32 exactly) and writes the step-0
// checkpoint `output` (checkpoint.h; written as `output`.partial, renamed
// when complete). Every input is checked before the output is created: a
// missing tensor, a shape that does not fit config.json or another dtype is
// a UserError naming the file and tensor, and so is a tensor the model would
// leave out (check_hf_weights): only rotary inv_freq buffers and a tied
// model's lm_head.weight are ignored (debug log). NaN or Inf in a
// parameter is imported as is, with a warning per tensor ("non-finite
// values in tensor X of FILE"): loading the checkpoint to run or train it
// (load_model_checkpoint) refuses it.
// Collective over `comm`: the ranks split the rows of every tensor between
// them (each reads and writes only its rows). Errors are raised on every
// rank alike.
ImportSummary import_hf(const std::string& hf_dir, const std::string& output, const parallel::Comm& comm);

class SafetensorsSet;

// Checks an HF directory's weights against its config.json before anything
// is sized from the config: the layer count (check_layer_count), no tensors
// of layers beyond num_hidden_layers (a config saying too few layers), every
// parameter present with its shape and a dtype dapo reads (F32, BF16, F16),
// and no tensor that is not a parameter besides those Qwen2 saves carry and
// dapo may leave out (rotary inv_freq buffers; lm_head.weight of a tied
// model), which are appended to `ignored` if given. Nothing is dropped
// silently: UserError naming the file, the tensors (the first few and a
// count) and, for layers, num_hidden_layers. Returns the parameters'
// element count.
int64_t check_hf_weights(const SafetensorsSet& weights, const model::Qwen2Config& config, const std::string& hf_dir,
                         std::vector<std::string>* ignored = nullptr);

enum class ExportDtype { f32, bf16 };
ExportDtype parse_export_dtype(const std::string& name);  // "f32"/"float32", "bf16"/"bfloat16"; UserError

struct ExportSummary {
  model::Qwen2Config config;
  int64_t tensors = 0;
  int64_t parameters = 0;
};

// Writes `out_dir`/config.json (torch_dtype set to the exported dtype) and
// `out_dir`/model.safetensors (metadata format "pt"; bf16 rounded to
// nearest even) from the checkpoint's /model tensors: a directory HF
// transformers loads with from_pretrained. A tied model gets no lm_head.
// An existing `out_dir` must be empty (UserError naming what it holds
// otherwise: an older export or a sharded model there would mix with the
// new files). Atomic: the files are written into a fresh sibling folder
// `out_dir`.partial-<pid>, synced, and that folder is renamed to `out_dir`
// (missing parent folders are created); on any failure (a tensor that does
// not match the checkpoint's stored digest, a full disk) it is removed and
// `out_dir` is left as it was. Collective over `comm` (the
// checkpoint is opened by all ranks); rank 0 does the work. Errors are
// raised on every rank alike.
ExportSummary export_hf(const std::string& checkpoint, const std::string& out_dir, ExportDtype dtype,
                        const parallel::Comm& comm);

}  // namespace dapo::io
