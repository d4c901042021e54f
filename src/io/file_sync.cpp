// sync_path / commit_file (file_sync.h).
#include "dapo/io/file_sync.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dapo/core/error.h"

namespace dapo::io {

void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw UserError(cat(path, ": cannot open to sync: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && err == EINVAL)) throw UserError(cat(path, ": cannot sync: ", std::strerror(err)));
}

void commit_file(const std::string& partial, const std::string& path) {
  sync_path(partial, false);
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) throw UserError(cat(path, ": cannot rename ", partial, " to it: ", ec.message()));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  sync_path(dir.empty() ? "." : dir.string(), true);
}

}  // namespace dapo::io
