// Durable renames: a file's data, and then its new name in the directory,
// reach the disk before a save is reported done (checkpoints, rollout dumps);
// and output files that a user names, which may be devices or FIFOs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dapo::io {

// fsync of a file, or of a directory (directory = true). UserError naming
// the path on failure; a file system that cannot sync a directory (EINVAL)
// is accepted, the rename stands.
void sync_path(const std::string& path, bool directory);

// Syncs `partial`, renames it to `path` and syncs the directory.
// UserError naming both on failure.
void commit_file(const std::string& partial, const std::string& path);

// Refuses to start writing about `bytes` bytes to `path` when its file
// system has less free space (UserError "PATH: no space left on device for
// the WHAT (about N MiB needed, M MiB free)"): a checkpoint that fills the
// disk half-way would fail deep inside HDF5 with no word of the cause.
// Quietly accepts what statvfs cannot tell.
void check_free_space(const std::string& path, uint64_t bytes, const char* what);

// For the message of a write to `path` that failed: "; the file system has
// N bytes free for this user (a full disk, a quota, a file-size limit or a
// read-only remount refuse writes)", which tells those causes apart; empty
// when statvfs cannot say.
std::string free_space_note(const std::string& path);

// Where a write to `path` lands: symlinks followed (a relative target is
// relative to the link's folder) to a path that is no symlink, existing or
// not. UserError for a symlink loop.
std::string output_target(const std::string& path);

// Whether `path` (after output_target) is something to write into directly
// rather than replace: an existing device, FIFO or socket. Renaming a file
// over /dev/null as root would replace the device with a regular file.
bool writes_in_place(const std::string& target);

// Makes way for the temporary file `partial` (a `.partial` beside an output)
// that is about to be created: a stale file or symlink there is removed -
// the link itself, never the file it points to. UserError for a directory
// in the way, or when it cannot be removed.
void remove_stale_temporary(const std::string& partial);

// Creates the temporary file `partial` fresh for writing: a stale one is
// removed (remove_stale_temporary), then it is created with O_CREAT |
// O_EXCL | O_NOFOLLOW, so nothing is ever written through a symlink a
// temporary name holds (one put there in between makes the create fail).
// Returns the descriptor. UserError "PARTIAL: cannot create the WHAT: ...".
int create_temporary(const std::string& partial, const char* what, unsigned mode = 0666);

// Writes `text` to the output file `path` that a user named (`what` says
// what it is, for messages). "-" is standard output. A regular file, or a new one, is written as
// target.partial (created fresh: create_temporary), synced and renamed over
// the target, so a failure leaves the old file whole; a device, FIFO or socket is written directly; a
// symlink is followed and its target written, the link kept. On failure
// (e.g. "No space left on device") the .partial file is removed and a
// UserError names the path and the system's reason.
void write_output_file(const std::string& path, std::string_view text, const char* what);

}  // namespace dapo::io
