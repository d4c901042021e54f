// dapo checkpoints (docs/DESIGN.md section 4): the model alone (what `import-hf`
// and `dapo sft` write) or a training checkpoint, which adds the optimizer
// state, the random-number key and the data loader's position:
//
//   <path>.h5                       (written as <path>.h5.partial, synced, then renamed)
//     root attributes: format = "dapo-checkpoint", format_version = 2, step,
//       config (INI text, may be empty), model_config (config.json text),
//       world_size, tp, dp (of the run that saved it)
//     /model/<hf name>              fp32 master weights, full logical shape
//     /optimizer/exp_avg/<hf name>, /optimizer/exp_avg_sq/<hf name>
//                                   AdamW moments, same shapes (training only);
//                                   root attribute optimizer_steps (bias correction)
//     /rng/seed                     i64 (world_size): every rank's generator key.
//                                   dapo's randomness is counter-based (Philox keyed
//                                   by the seed; streams named by step, round, prompt
//                                   uid, sample): the key is the whole state.
//     /data/position                i64 (4): seed, prompts, epoch, position of the
//                                   prompt order (data/prompt_order.h)
// Every dataset is chunked with HDF5's Fletcher-32 checksum (verified by
// HDF5 on every read) and carries a `digest` attribute (tensor_digest.h),
// verified on load whatever tp reads it. format_version 1 files (model only,
// no digests) still load.
//
// Tensors are stored whole whatever the tp of the writer; each rank writes
// (or reads) the block it holds per model::local_slice(), so a checkpoint
// saved with one tp loads with another: resharding is just loading.
//
// Collectives: writer and reader are built, committed and closed by every
// rank of the Comm together (parallel HDF5). Errors are UserErrors naming
// the file (and tensor) and are raised on every rank alike: loads and
// commits agree over the Comm before they return, so no rank is left
// waiting for another that failed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dapo/io/hdf5_file.h"
#include "dapo/model/param_spec.h"
#include "dapo/model/qwen2_config.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/grid.h"

namespace dapo::io {

class ShardedIndex;  // sharded_checkpoint.h

inline constexpr const char* kCheckpointFormat = "dapo-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 2;

// What a training checkpoint holds beyond the model.
struct TrainingState {
  int64_t optimizer_steps = 0;  // AdamW steps taken
  uint64_t rng_seed = 0;        // train.seed: the sampler's Philox key
  // The prompt order (data::PromptOrderState as integers).
  uint64_t data_seed = 0;
  int64_t data_size = 0, data_epoch = 0, data_position = 0;
  // The generation engine's KV-pool memory cap (bytes; 0: none pinned):
  // a resumed run keeps the saved run's pools, so its schedules. Format 3
  // only (the index's attribute kv_cache_cap_bytes).
  int64_t kv_cache_cap_bytes = 0;
  bool operator==(const TrainingState&) const = default;
};

// The root attributes (and, for a training checkpoint, its state).
struct CheckpointInfo {
  int64_t format_version = kCheckpointFormatVersion;  // what the file says (writers write the current one)
  int64_t step = 0;
  std::string config_ini;  // the run's resolved configuration; empty for an import
  model::Qwen2Config model;
  int64_t world_size = 1, tp = 1, dp = 1;
  bool training = false;   // has /optimizer, /rng, /data
  TrainingState state;     // when training
};

// Where a rank sits in the tp x dp grid: which slice of each tensor it holds.
struct ShardPlace {
  int64_t tp_rank = 0, tp = 1, dp_rank = 0;
  static ShardPlace of(const parallel::Grid& grid);
};

// "/model/<hf name>"
std::string model_dataset(const std::string& hf_name);
// "/optimizer/exp_avg/<hf name>", "/optimizer/exp_avg_sq/<hf name>"
std::string exp_avg_dataset(const std::string& hf_name);
std::string exp_avg_sq_dataset(const std::string& hf_name);
// The block of the full tensor that `slice` describes.
Hyperslab slab_of(const model::ParamSpec& spec, const model::SliceSpec& slice);
// Whether the rank at `place` writes its slice of `spec`: only dp rank 0's
// copy, and of the tp ranks holding the same data (replicated tensors,
// KV heads replicated when tp > Hkv) only the first.
bool writes_slice(const model::ParamSpec& spec, const model::Qwen2Config& config, const ShardPlace& place);

class CheckpointWriter {
 public:
  // Creates `path`.partial fresh (a stale file or symlink there removed,
  // never written through: H5File::create_fresh), writes the root
  // attributes (format_version: the current one) and creates /model/<name>
  // for every parameter of info.model - and with info.training the
  // optimizer datasets, /rng/seed (every rank writes its own entry: pass
  // this rank's key) and /data/position. Datasets get Fletcher-32 whatever
  // `options` says. Collective over `comm`, which must outlive the writer.
  // UserError if the file cannot be created.
  CheckpointWriter(std::string path, const parallel::Comm& comm, const CheckpointInfo& info,
                   const DatasetOptions& options = {});
  // Without commit(): closes the file (collective) and removes the .partial.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const std::vector<model::ParamSpec>& specs() const { return specs_; }
  // Writes this rank's block of /model/<name> (slab.numel() fp32 values,
  // row-major over the slab; Hyperslab::none() for nothing). Collective:
  // every rank calls it for the same tensor in the same order; blocks of
  // different ranks must not overlap.
  void write_model(const std::string& name, const Hyperslab& slab, const float* data);
  // Training checkpoints: /rng/seed (each rank writes its own key) and
  // /data/position (from info.state). Collective.
  void write_training_state(uint64_t rng_key);
  // The same as write_model for /optimizer/exp_avg/<name> and
  // /optimizer/exp_avg_sq/<name> (training checkpoints).
  void write_moments(const std::string& name, const Hyperslab& slab, const float* exp_avg, const float* exp_avg_sq);
  // Writes every dataset's digest, closes the file, syncs it and renames it
  // to `path`. Collective. UserError (on every rank) if the rename fails.
  void commit();

  const std::string& path() const { return path_; }

 private:
  void write_digested(const std::string& dataset, const std::vector<int64_t>& shape, const Hyperslab& slab,
                      const float* data);
  // The root attributes and every dataset, in the fresh .partial file.
  void create_layout(const DatasetOptions& options);
  // Closes the file (ignoring a failure) and removes the .partial. Collective.
  void discard();

  std::string path_, partial_;
  const parallel::Comm* comm_;
  H5File file_;
  std::vector<model::ParamSpec> specs_;
  std::vector<std::string> datasets_;  // every tensor dataset, in creation order
  std::vector<uint64_t> digests_;      // this rank's digest parts, by datasets_
  CheckpointInfo info_;
  bool committed_ = false;
};

class CheckpointReader {
 public:
  // Opens `path`, a file (format 1, 2) or the folder of a sharded training
  // checkpoint (format 3, sharded_checkpoint.h), and checks it: an HDF5 file, format "dapo-checkpoint", a
  // format_version this dapo reads, a valid model_config, and every
  // parameter of that config present in /model with its shape (other
  // datasets in /model are ignored with a warning). Collective over `comm`,
  // which must outlive the reader. UserError naming the file (and tensor).
  CheckpointReader(std::string path, const parallel::Comm& comm);

  const CheckpointInfo& info() const { return info_; }
  const std::vector<model::ParamSpec>& specs() const { return specs_; }
  const std::string& path() const { return path_; }
  // Reads a block of /model/<name> (independent: any rank, any block).
  // UserError if the read fails (damaged data).
  void read_model(const std::string& name, const Hyperslab& slab, float* out) const;
  // Reads a block of any tensor dataset (e.g. exp_avg_dataset(name)).
  void read_tensor(const std::string& dataset, const Hyperslab& slab, float* out) const;
  // The stored digest of a tensor dataset; false for files without digests.
  bool stored_digest(const std::string& dataset, uint64_t* digest) const;
  // Collective; also done by the destructor.
  void close() { file_.close(); }

 private:
  void open_sharded(const parallel::Comm& comm);
  void read_root_attributes(const std::string& where);
  void read_training_state(const std::string& where);

  std::string path_;
  H5File file_;  // the checkpoint (format 1, 2) or its index (format 3)
  CheckpointInfo info_;
  std::vector<model::ParamSpec> specs_;
  std::shared_ptr<const ShardedIndex> sharded_;  // format 3
};

// A rank's slice of a parameter: slice.local_shape fp32 values, row-major.
using SliceSource = std::function<const float*(const model::ParamSpec& spec, const model::SliceSpec& slice)>;
using SliceSink = std::function<float*(const model::ParamSpec& spec, const model::SliceSpec& slice)>;

// For state spread over a dp group (an optimizer sharded over dp, ZeRO-1):
// called before each parameter's slice is written on EVERY rank of the dp
// groups that write it (writes_slice() true for dp rank 0 of the group),
// in HF order, so that it may gather the slice to dp rank 0 collectively
// over the group; the sources, asked on the writer only, then hand out
// what was gathered. Empty: nothing to gather.
using SliceGather = std::function<void(const model::ParamSpec& spec, const model::SliceSpec& slice)>;

// Saves every parameter of info.model, in HF order, to `path` (atomically):
// `source` is asked for this rank's slice only where writes_slice() says
// this rank writes it. Collective over `comm` (every rank of the grid).
void save_model_checkpoint(const std::string& path, const parallel::Comm& comm, const ShardPlace& place,
                           const CheckpointInfo& info, const SliceSource& source,
                           const DatasetOptions& options = {}, const SliceGather& gather = {});

// Loads every parameter's slice for tp rank `tp_rank` of `tp` (the tp the
// caller runs with, whatever the checkpoint was saved with) into the buffers
// `sink` returns. Collective over `comm`; a failure on any rank is thrown on
// every rank. Returns the root attributes. UserError also if the model
// cannot be split over `tp` (model::check_tp_compatible), and if a stored
// digest does not match the data read ("damaged"), and if the data read
// holds NaN or Inf ("non-finite values in tensor X of FILE": the model could
// not run; export-hf, which reads with CheckpointReader, converts it as is).
// Digests are verified when the ranks of `comm` together hold every tp
// rank's slices (as a grid does), from one holder of each slice.
CheckpointInfo load_model_checkpoint(const std::string& path, const parallel::Comm& comm, int64_t tp_rank, int64_t tp,
                                     const SliceSink& sink);

// Saves weights and AdamW moments (training checkpoint; info.training must
// be set, info.state filled) as save_model_checkpoint does; `rng_key` is
// this rank's generator key (/rng/seed).
void save_training_checkpoint(const std::string& path, const parallel::Comm& comm, const ShardPlace& place,
                              const CheckpointInfo& info, uint64_t rng_key, const SliceSource& params,
                              const SliceSource& exp_avg, const SliceSource& exp_avg_sq,
                              const SliceGather& gather = {});

// Loads weights and moments of a training checkpoint as
// load_model_checkpoint does (digests verified). UserError naming the file
// if it holds no optimizer state (a model-only checkpoint).
CheckpointInfo load_training_checkpoint(const std::string& path, const parallel::Comm& comm, int64_t tp_rank,
                                        int64_t tp, const SliceSink& params, const SliceSink& exp_avg,
                                        const SliceSink& exp_avg_sq);

// Refuses a model config whose num_hidden_layers the tensors present cannot
// back (UserError naming `origin`): every layer 0 .. L-1 needs tensors named
// model.layers.<l>.*. Checked before the parameter list of the config is
// built, so that a damaged config (num_hidden_layers = 2e9) fails at once
// instead of allocating for two billion layers. `names`: the HF tensor
// names present.
void check_layer_count(const model::Qwen2Config& config, const std::vector<std::string>& names,
                       const std::string& origin);

// The root attributes every checkpoint file (or format-3 index) carries:
// format, format_version, step, config, model_config, world_size, tp, dp.
// Collective (H5File::set_attr).
void write_root_attributes(H5File& file, const CheckpointInfo& info, int64_t format_version);

// Throws the same UserError on every rank of `comm` if `error` is non-empty
// on any rank (the lowest such rank's message), else returns. Collective.
void agree_on_error(const parallel::Comm& comm, const std::string& error);

}  // namespace dapo::io
