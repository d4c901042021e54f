// Durable renames: a file's data, and then its new name in the directory,
// reach the disk before a save is reported done (checkpoints, rollout dumps).
#pragma once

#include <string>

namespace dapo::io {

// fsync of a file, or of a directory (directory = true). UserError naming
// the path on failure; a file system that cannot sync a directory (EINVAL)
// is accepted, the rename stands.
void sync_path(const std::string& path, bool directory);

// Syncs `partial`, renames it to `path` and syncs the directory.
// UserError naming both on failure.
void commit_file(const std::string& partial, const std::string& path);

}  // namespace dapo::io
