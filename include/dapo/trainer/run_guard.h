// What `dapo train` and `dapo sft` check and hold before their first step,
// so that nothing a user owns is lost and nothing fails late:
//
//   - folders that clash: dump.dir the same folder as checkpoint.dir (both
//     write step_%08d.h5: dumps would be overwritten by checkpoints and
//     pruned by checkpoint.keep_last) is refused; folders are compared by
//     canonical path (through symlinks; weakly for ones not made yet).
//     log.dir may be checkpoint.dir or dump.dir (no names in common).
//   - folders that cannot be written: checkpoint.dir, log.dir and dump.dir
//     (when dumps are on) are created, and a probe file is created and
//     removed in each; a read-only file system or a permission problem is
//     reported as what it is, naming the key and the folder.
//   - space: checkpoint.dir must have room (statvfs, for this user) for one
//     checkpoint of the run (checkpoint_bytes), counted after the
//     temporary files of a save that did not finish (step_*.partial/
//     folders of dapo's files, step_*.h5.partial, sft_final.h5.partial,
//     latest.partial: a disk that filled, a kill)
//     are removed, with an info line naming them; under the run's lock.
//   - one run per folder: RunLock holds an advisory lock (flock) on
//     .dapo.lock in checkpoint.dir and in log.dir (one lock when they are
//     the same folder) for the whole run; the file says which host, pid and
//     start time hold it. A second run is refused with that; the OS drops
//     the lock when the holder dies, so a killed job's file never blocks
//     the next one. dump.dir is not locked: runs of one configuration file
//     share its relative default (their dumps of a step still overwrite
//     each other).
//   - a log of another run: log.dir/metrics.jsonl and config.ini are this
//     run's to replace or continue only when they are its own: the
//     config.ini there is this run's configuration (byte for byte, but for
//     checkpoint.resume: the same run started again, a requeue before its
//     first checkpoint), or this
//     run resumes from a checkpoint and that config.ini names the same
//     checkpoint.dir (a run continued, perhaps with changed settings). A
//     non-empty metrics.jsonl with any other config.ini, or none, is
//     another run's record: refused, naming the file.
//
// Errors are UserErrors "ORIGIN: key: what is wrong; what to do", raised on
// every rank alike (world rank 0 does the file-system work).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/model/qwen2_config.h"
#include "dapo/parallel/grid.h"

namespace dapo::trainer {

// The name of the lock file in each output folder.
inline constexpr const char* kRunLockName = ".dapo.lock";

// Bytes of one checkpoint file of `model`: fp32 weights, and with
// `training` both AdamW moments (3 x), plus a margin for HDF5's metadata.
uint64_t checkpoint_bytes(const model::Qwen2Config& model, bool training);

// The output folders of a run: checkpoint.dir, log.dir, and dump.dir when
// `dumps` (dump.every > 0 in dapo train). Throws a UserError for folders
// that clash (see above). Not collective (no writes).
void check_folder_clash(const Config& config, bool dumps);

// Creates each output folder and probes it with a file created and removed.
// UserError naming the key, its origin, the folder and the cause. Not collective.
void check_folders_writable(const Config& config, bool dumps);

// UserError unless `dir` (the value of `key`) has `needed` bytes free for
// this user (statvfs f_bavail); `what` names the file ("a training checkpoint").
void check_free_space(const Config& config, const std::string& key, const std::string& dir, uint64_t needed,
                      const std::string& what);

// The holder's line in a lock file: "host HOST, pid PID, started TIME".
std::string lock_holder_line();

// The advisory locks of a run, taken by world rank 0 in checkpoint.dir
// and log.dir (created if needed) and held until destruction.
// Collective: a folder another process holds is a UserError on every rank:
//   "ORIGIN: key: DIR is in use by another dapo run (host H, pid P,
//    started T; lock file DIR/.dapo.lock); wait for it to end, or choose
//    another KEY".
class RunLock {
 public:
  RunLock(const Config& config, const parallel::Grid& grid);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  std::vector<int> fds_;
};

// check_folder_clash and check_folders_writable by world rank 0, then the
// RunLock; collective, errors on every rank alike.
RunLock prepare_output_folders(const Config& config, const parallel::Grid& grid, bool dumps);

// The check of a log of another run (see above) by world rank 0; `resuming`:
// checkpoint.dir holds a checkpoint this run resumes from. Collective.
// Call it holding the RunLock, before write_run_config.
void check_log_dir_owner(const Config& config, const parallel::Grid& grid, bool resuming);

// Removes the stale .partial files of checkpoint saves in `dir` (see
// above; a step_*.h5.partial folder, or a step_*.partial/ folder holding
// anything dapo does not write, stays) and returns them, each with its
// size: "PATH (N bytes)". Not collective; call it holding the RunLock.
std::vector<std::string> remove_stale_partials(const std::string& dir);

// remove_stale_partials, then check_free_space of checkpoint.dir for one
// checkpoint of `model` (`training`: with the AdamW moments) by world rank
// 0; collective. Call it holding the RunLock.
void check_checkpoint_space(const Config& config, const parallel::Grid& grid, const model::Qwen2Config& model,
                            bool training);

}  // namespace dapo::trainer
