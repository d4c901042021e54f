// Rollout dumps (docs/DESIGN.md section 4): every group one training step
// generated - the ones it trained on and the ones it did not - written to
// one HDF5 file by all ranks together, each rank writing its own rows, and
// read back by `dapo inspect` or by h5py. The rows are rl::GroupData (the one
// rollout batch type of docs/DESIGN.md 3b) laid out as flat arrays + offsets.
//
// File layout (format "dapo-rollout-dump", format_version 1). P prompts
// (groups), R responses; "NAME + NAME_offsets" is a ragged array: row i is
// NAME[NAME_offsets[i] : NAME_offsets[i+1]] (offsets have rows+1 entries,
// start at 0, end at len(NAME)).
//   root attributes: format, format_version, step, config (the run's INI
//     text), n (rollout.n), max_response_length, world_size (ranks that
//     wrote it)
//   /prompts    uid i64 (the dataset's uint64 prompt uid, same bits:
//                 h5py `.view("u8")`), round i64 (generation round of the
//                 step, 0-based), position i64 (place in its round's
//                 generation batch), trained u8 (1: in the update),
//                 outcome u8 (rl::GroupOutcome; attribute `names` =
//                 "mixed,all_correct,all_wrong,uniform_other"; mixed =
//                 kept by dynamic sampling), response_rows i64 (P+1: the
//                 responses of prompt p are rows [response_rows[p],
//                 response_rows[p+1]) of /responses),
//                 tokens i32 + tokens_offsets, text u8 + text_offsets,
//                 ground_truth u8 + ground_truth_offsets,
//                 data_source u8 + data_source_offsets
//   /responses  prompt_index i64 (row of /prompts), sample_index i64,
//                 tokens i32 + tokens_offsets, old_logprob f32 (one per
//                 token, aligned with tokens; NaN where not trained),
//                 sampling_logprob f32 (the rollout engine's log-prob of
//                 each token, aligned with tokens; format 2 on; NaN where
//                 the group did not carry them),
//                 text u8 + text_offsets, pred u8 + pred_offsets (the
//                 extracted answer), finish_reason u8 (attribute `names` =
//                 "eos,length": code i is the i-th name), length i64
//                 (tokens), score f64, reward f64 (after overlong shaping),
//                 acc f64, advantage f64 (NaN where not trained), in_loss u8
//
// Every non-empty dataset is chunked with HDF5's Fletcher-32 checksum,
// verified by HDF5 on every read (h5py too): a damaged dump fails to load.
//
// Strings are UTF-8 bytes + offsets, not HDF5 variable-length strings:
// parallel HDF5 cannot write variable-length data collectively. In h5py:
//   b, o = f["/responses/text"][:], f["/responses/text_offsets"][:]
//   text_i = b[o[i]:o[i+1]].tobytes().decode("utf-8", "replace")
// (decoded responses may end inside a multi-byte character). The few
// global strings (format, config) are variable-length attributes.
//
// Row order: rank 0's rows, then rank 1's, ...; within a rank the trained
// groups, then the others, each in the order given. A group's responses are
// consecutive rows. Readers that want a layout-independent order sort by
// (round, position), which is unique within a step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dapo/io/hdf5_file.h"
#include "dapo/parallel/comm.h"
#include "dapo/rl/dynamic_sampling.h"
#include "dapo/rl/group_data.h"

namespace dapo::dump {

inline constexpr const char* kRolloutDumpFormat = "dapo-rollout-dump";
inline constexpr int64_t kRolloutDumpFormatVersion = 2;

// The root attributes besides format and format_version.
struct DumpInfo {
  int64_t step = 0;                 // the training step (1-based)
  std::string config_ini;           // the run's resolved configuration
  int64_t n = 0;                    // rollout.n (0: not given)
  int64_t max_response_length = 0;  // rollout.max_response_length (0: not given)
};

// One group to write. `outcome` is the caller's dynamic-sampling class of
// the group (trainer::group_outcome(), which knows the filter metric and
// whether dynamic sampling is on), stored as given.
//
// The group must carry finish_reason, score, acc, reward, in_loss,
// response_text and pred for each of its n >= 1 responses (what scoring
// fills; DAPO_CHECK). advantage and old_logprobs may be empty (a group
// that was not trained): they are written as NaN.
struct DumpGroup {
  const rl::GroupData* group = nullptr;
  rl::GroupOutcome outcome = rl::GroupOutcome::mixed;
  bool trained = false;
};

// Writes `path` (as path + ".partial", closed, synced, then renamed, so a
// crash never leaves a half-written dump under the final name; the
// directory must exist). Collective over `comm`, every rank of the job:
// each rank passes its own groups (possibly none) and writes them as its
// own contiguous rows, one collective write per dataset; only per-rank
// counts are exchanged (one all-gather), no rank gathers the others' data.
// Ranks holding copies of another rank's groups (tp ranks > 0) pass none.
// Errors (cannot create, cannot rename) are UserErrors raised on every
// rank alike.
void write_rollout_dump(const std::string& path, const parallel::Comm& comm, std::span<const DumpGroup> groups,
                        const DumpInfo& info, const io::DatasetOptions& options = {});

// The same, from this rank's trained groups (advantage and old log-probs
// filled) and the groups it generated but did not train on, with their
// dynamic-sampling outcomes (parallel spans of equal length, DAPO_CHECK).
void write_rollout_dump(const std::string& path, const parallel::Comm& comm, std::span<const rl::GroupData> trained,
                        std::span<const rl::GroupOutcome> trained_outcomes, std::span<const rl::GroupData> dropped,
                        std::span<const rl::GroupOutcome> dropped_outcomes, const DumpInfo& info);

// A group as read back.
struct DumpedGroup {
  rl::GroupData group;
  rl::GroupOutcome outcome = rl::GroupOutcome::mixed;
  bool trained = false;
};

struct RolloutDump {
  std::string path;
  int64_t format_version = 0;
  DumpInfo info;
  int64_t world_size = 0;
  std::vector<std::string> finish_reason_names;  // code -> name (empty: the file names none)
  std::vector<DumpedGroup> groups;               // in file order

  int64_t num_responses() const;
  // "eos", "length", or the code as a number when the file names none.
  std::string finish_reason_name(uint8_t code) const;
};

// Reads a whole dump in this process alone (no MPI, no collectives; any
// rank or a tool). What was written reads back equal, except that a group
// whose advantages (old log-probs) are all NaN reads back with an empty
// advantage (old_logprobs) vector - how a group that was not trained was
// written. Bad input (missing file, not HDF5, another format, a newer
// format_version, a missing or inconsistent dataset) is a UserError naming
// the file and the attribute or dataset at fault.
RolloutDump read_rollout_dump(const std::string& path);

}  // namespace dapo::dump
