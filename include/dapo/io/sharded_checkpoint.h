// Training checkpoints in format 3: a folder with a file per rank and an
// index, written at disk speed and, if the caller wants, in the background
// (docs/DESIGN.md section 4).
//
//   <path>/                        written as <path>.partial/, renamed when complete
//     index.h5                     root attributes as in format 2 (checkpoint.h) with
//                                  format_version = 3 and layout = "sharded";
//                                  /rng/seed, /data/position as in format 2;
//                                  /index/pieces  i64 (P, 6): tensor, rank, element offset
//                                                 in that rank's /data, source tp rank,
//                                                 begin, end (elements of the tp slice)
//                                  /index/digests i64 (T): each tensor's digest (tensor_digest.h)
//                                  attribute `tensors` of /index: the T dataset names
//                                  ("/model/<hf name>", "/optimizer/exp_avg/<hf name>", ...),
//                                  one per line
//     rank_00000.h5 ...            one per rank: /data, f32 (n), contiguous: the
//                                  rank's pieces back to back
//
// Why: in format 2 every rank wrote into one parallel-HDF5 file, and the
// ZeRO-1 shards were gathered to dp rank 0 first, so a node's ranks wrote
// no faster together than one. Here every rank writes its own bytes, with
// no gather: each dp rank writes the part of its tp slice that its
// optimizer shard covers (the weights too), so the ranks of a node share the
// work; the bytes go out with pwrite at offsets HDF5 allocated, so the
// writer makes no HDF5 or MPI call and may run on a thread of its own
// while the next step runs. HDF5 tools still read every file.
//
// A piece is a flat range [begin, end) of one tp rank's slice of one tensor
// (row-major over the slice, model::local_slice of the saving tp). Readers
// of any tp assemble their own slab from the pieces that overlap it:
// resharding is still just loading. Guarantees kept from format 2: the
// folder appears under its name only once every rank's file is synced and
// the index written (atomic); every tensor's digest is verified on load
// across any resharding (checksummed); a damaged or missing rank file is a
// UserError naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/io/checkpoint.h"
#include "dapo/model/param_store.h"
#include "dapo/parallel/comm.h"

namespace dapo::io {

inline constexpr int64_t kShardedFormatVersion = 3;
inline constexpr const char* kShardedIndexName = "index.h5";

// Whether `path` is a format-3 checkpoint folder (a directory holding index.h5).
bool is_sharded_checkpoint(const std::string& path);
// "rank_00003.h5"
std::string shard_file_name(int64_t rank);
// Whether `name` is a file dapo writes in a checkpoint folder (index.h5,
// rank_N.h5): a stale temporary folder holding only these is dapo's to remove.
bool is_shard_folder_entry(const std::string& name);
// What a checkpoint folder `dir` holds: `foreign` names the first entry that
// is not one of dapo's regular files (a directory or symlink under a dapo
// name counts as foreign: removing the folder would reach into it), empty
// when there is none; `bytes` is the size of dapo's files.
struct ShardFolderScan {
  std::string foreign;
  uint64_t bytes = 0;
};
ShardFolderScan scan_shard_folder(const std::string& dir);

// One range of one tensor's tp slice held by a rank file.
struct ShardPiece {
  int64_t tensor = 0;       // index into the tensor names
  int64_t rank = 0;         // the rank file holding it
  int64_t offset = 0;       // first element in that file's /data
  int64_t src_tp_rank = 0;  // whose tp slice (of the saving tp)
  int64_t begin = 0, end = 0;  // elements of that slice, row-major
  bool operator==(const ShardPiece&) const = default;
};

// Where each of this rank's elements comes from and goes.
struct ShardedSavePlan {
  std::vector<std::string> tensors;  // every rank the same: model, then (training) exp_avg, exp_avg_sq
  std::vector<ShardPiece> pieces;    // this rank's, in /data order
  // Per piece, the first element in the flat buffers (ParamStore layout) it is copied from.
  std::vector<int64_t> flat_begin;
  int64_t elements = 0;              // this rank's /data length
  int64_t model_elements = 0;        // of which the weights (the first pieces); then exp_avg, then exp_avg_sq
};

// The plan of the rank at `place` (its tp slice, world rank `rank`):
// every parameter whose slice this tp rank writes (writes_slice as dp rank
// 0: replicated tensors once, KV replicas once), cut to the flat spans
// `mine` [begin, end) (this dp rank's part of the buffer, e.g. its ZeRO-1
// shard: the dp ranks' spans must cover the buffer once). `offsets`: each
// parameter's first element in the flat buffer, in qwen2_param_specs order.
// Pure: tested without files.
ShardedSavePlan plan_sharded_save(const model::Qwen2Config& config, const ShardPlace& place, int64_t rank,
                                  const std::vector<int64_t>& offsets, const std::vector<model::ShardRange>& mine,
                                  bool training);

// The digest part of elements [begin, end) of the slice `slab` (of a
// tensor of `full_shape`), row-major over the slab: slab_digest of the
// rows it covers (a range of a 2-D slab is up to three blocks).
uint64_t range_digest(const std::vector<int64_t>& full_shape, const Hyperslab& slab, int64_t begin, int64_t end,
                      const float* data);

// Writes one format-3 checkpoint. Use: construct (collective), fill
// data() with the plan's elements, write() (no collective: any thread),
// commit() (collective). Destroyed without commit(): the .partial folder
// is removed (collective).
class ShardedCheckpointWriter {
 public:
  // Checks the free space for the whole checkpoint (rank 0), makes
  // <path>.partial/ fresh (a stale one from a crash removed: only dapo's
  // files in it; anything else there is a UserError) and creates this
  // rank's file with /data allocated. `comm` (every rank of the grid) must
  // outlive the writer; `data` is the caller's (plan.elements floats, e.g.
  // pinned host memory) and must stay valid until write() returns.
  ShardedCheckpointWriter(std::string path, const parallel::Comm& comm, const CheckpointInfo& info,
                          ShardedSavePlan plan, uint64_t rng_key);
  ~ShardedCheckpointWriter();
  ShardedCheckpointWriter(const ShardedCheckpointWriter&) = delete;
  ShardedCheckpointWriter& operator=(const ShardedCheckpointWriter&) = delete;

  const ShardedSavePlan& plan() const { return plan_; }
  // Writes `data` (plan().elements floats) into this rank's file, digests
  // each piece and syncs the file. No MPI, no HDF5: may run on another
  // thread than the one that made the writer (one at a time). A failure
  // (a full disk) is kept and raised by commit() on every rank.
  void write(const float* data);
  // Collective: agrees on the writes' outcome, sums the digests, writes
  // the index (rank 0), syncs and renames the folder to `path` (replacing
  // nothing: an existing `path` is a UserError). UserError on every rank
  // alike; the .partial is then removed.
  void commit();
  const std::string& path() const { return path_; }
  // Seconds write() took on this rank (0 before).
  double write_seconds() const { return write_seconds_; }

 private:
  void discard();

  std::string path_, partial_, file_;
  const parallel::Comm* comm_;
  CheckpointInfo info_;
  ShardedSavePlan plan_;
  uint64_t rng_key_ = 0;
  int64_t data_offset_ = 0;          // bytes: where /data starts in file_
  std::vector<uint64_t> digests_;    // per tensor, this rank's part
  std::string error_;                // of write()
  bool written_ = false, committed_ = false;
  double write_seconds_ = 0;
};

// The index of a format-3 checkpoint, for CheckpointReader.
class ShardedIndex {
 public:
  // Reads the piece table of `index` (<dir>/index.h5, opened by the
  // caller, whose root attributes gave `info`) and checks it: its pieces
  // lie inside their tensors and ranks, and cover every tensor of `specs`
  // (weights and both moments) with as many elements as it has. UserError
  // naming the file.
  ShardedIndex(const std::string& dir, const H5File& index, const CheckpointInfo& info,
               const std::vector<model::ParamSpec>& specs);
  bool has(const std::string& dataset) const;
  // The block `slab` of tensor `dataset`, from the rank files (pread).
  // UserError naming the rank file if it is missing, short or not HDF5.
  void read(const std::string& dataset, const Hyperslab& slab, float* out) const;
  bool digest(const std::string& dataset, uint64_t* out) const;

 private:
  int64_t data_offset(int64_t rank) const;  // bytes, the rank file's /data (opened once, cached)

  std::string dir_;
  CheckpointInfo info_;
  std::vector<model::ParamSpec> specs_;
  std::vector<std::string> tensors_;
  std::vector<uint64_t> digests_;
  std::vector<std::vector<ShardPiece>> by_tensor_;
  std::vector<int64_t> spec_index_;  // per tensor: its parameter's index in specs_, -1 for none
  std::vector<int64_t> file_elements_;        // per rank: what its pieces need
  mutable std::vector<int64_t> offsets_;      // per rank: -1 until opened
};

}  // namespace dapo::io
