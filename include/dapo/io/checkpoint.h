// dapo checkpoints, model part (DESIGN.md section 4; the step-0 layout that
// `import-hf` writes; the full checkpoint of issue #6 adds optimizer, RNG
// and data-loader groups to the same file):
//
//   <path>.h5                       (written as <path>.h5.partial, then renamed)
//     root attributes: format = "dapo-checkpoint", format_version = 1, step,
//       config (INI text, may be empty), model_config (config.json text),
//       world_size, tp, dp (of the run that saved it)
//     /model/<hf name>              fp32, full logical shape, chunked
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
#include <string>
#include <vector>

#include "dapo/io/hdf5_file.h"
#include "dapo/model/param_spec.h"
#include "dapo/model/qwen2_config.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/grid.h"

namespace dapo::io {

inline constexpr const char* kCheckpointFormat = "dapo-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 1;

// The root attributes.
struct CheckpointInfo {
  int64_t format_version = kCheckpointFormatVersion;  // what the file says (writers write the current one)
  int64_t step = 0;
  std::string config_ini;  // the run's resolved configuration; empty for an import
  model::Qwen2Config model;
  int64_t world_size = 1, tp = 1, dp = 1;
};

// Where a rank sits in the tp x dp grid: which slice of each tensor it holds.
struct ShardPlace {
  int64_t tp_rank = 0, tp = 1, dp_rank = 0;
  static ShardPlace of(const parallel::Grid& grid);
};

// "/model/<hf name>"
std::string model_dataset(const std::string& hf_name);
// The block of the full tensor that `slice` describes.
Hyperslab slab_of(const model::ParamSpec& spec, const model::SliceSpec& slice);
// Whether the rank at `place` writes its slice of `spec`: only dp rank 0's
// copy, and of the tp ranks holding the same data (replicated tensors,
// KV heads replicated when tp > Hkv) only the first.
bool writes_slice(const model::ParamSpec& spec, const model::Qwen2Config& config, const ShardPlace& place);

class CheckpointWriter {
 public:
  // Creates `path`.partial (truncating a stale one), writes the root
  // attributes (format_version: the current one) and creates /model/<name>
  // for every parameter of info.model. Collective over `comm`, which must
  // outlive the writer. UserError if the file cannot be created.
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
  // Closes the file, syncs it and renames it to `path`. Collective.
  // UserError (on every rank) if the rename fails.
  void commit();

  const std::string& path() const { return path_; }

 private:
  std::string path_, partial_;
  const parallel::Comm* comm_;
  H5File file_;
  std::vector<model::ParamSpec> specs_;
  bool committed_ = false;
};

class CheckpointReader {
 public:
  // Opens `path` and checks it: an HDF5 file, format "dapo-checkpoint", a
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
  // Collective; also done by the destructor.
  void close() { file_.close(); }

 private:
  std::string path_;
  H5File file_;
  CheckpointInfo info_;
  std::vector<model::ParamSpec> specs_;
};

// A rank's slice of a parameter: slice.local_shape fp32 values, row-major.
using SliceSource = std::function<const float*(const model::ParamSpec& spec, const model::SliceSpec& slice)>;
using SliceSink = std::function<float*(const model::ParamSpec& spec, const model::SliceSpec& slice)>;

// Saves every parameter of info.model, in HF order, to `path` (atomically):
// `source` is asked for this rank's slice only where writes_slice() says
// this rank writes it. Collective over `comm` (every rank of the grid).
void save_model_checkpoint(const std::string& path, const parallel::Comm& comm, const ShardPlace& place,
                           const CheckpointInfo& info, const SliceSource& source,
                           const DatasetOptions& options = {});

// Loads every parameter's slice for tp rank `tp_rank` of `tp` (the tp the
// caller runs with, whatever the checkpoint was saved with) into the buffers
// `sink` returns. Collective over `comm`; a failure on any rank is thrown on
// every rank. Returns the root attributes. UserError also if the model
// cannot be split over `tp` (model::check_tp_compatible).
CheckpointInfo load_model_checkpoint(const std::string& path, const parallel::Comm& comm, int64_t tp_rank, int64_t tp,
                                     const SliceSink& sink);

// Throws the same UserError on every rank of `comm` if `error` is non-empty
// on any rank (the lowest such rank's message), else returns. Collective.
void agree_on_error(const parallel::Comm& comm, const std::string& error);

}  // namespace dapo::io
