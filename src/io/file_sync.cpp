// sync_path / commit_file / write_output_file (file_sync.h).
#include "dapo/io/file_sync.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

void check_free_space(const std::string& path, uint64_t bytes, const char* what) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  struct statvfs st {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return;
  const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
  if (free_bytes >= bytes) return;
  const auto mib = [](uint64_t b) { return (b + (uint64_t(1) << 20) - 1) >> 20; };
  throw UserError(cat(path, ": no space left on device for the ", what, " (about ", mib(bytes), " MiB needed, ",
                      free_bytes >> 20, " MiB free)"));
}

std::string free_space_note(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  struct statvfs st {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return {};
  return cat("; the file system has ", uint64_t(st.f_bavail) * uint64_t(st.f_frsize),
             " bytes free for this user (a full disk, a quota, a file-size limit or a read-only remount refuse "
             "writes)");
}

std::string output_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {  // 40: Linux's own limit (MAXSYMLINKS)
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) throw UserError(cat(path, ": cannot read the symlink ", p.string(), ": ", ec.message()));
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  throw UserError(cat(path, ": too many levels of symbolic links"));
}

bool writes_in_place(const std::string& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) return false;  // missing: a new regular file
  return S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
}

void remove_stale_temporary(const std::string& partial) {
  struct stat st {};
  if (::lstat(partial.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw UserError(cat(partial, ": cannot check the temporary file: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode))
    throw UserError(cat(partial, ": a directory is where the temporary file goes; remove or rename it"));
  if (::unlink(partial.c_str()) != 0 && errno != ENOENT)  // unlink removes a symlink, not its target
    throw UserError(cat(partial, ": cannot remove the stale temporary file: ", std::strerror(errno)));
}

int create_temporary(const std::string& partial, const char* what, unsigned mode) {
  remove_stale_temporary(partial);
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_t(mode));
  if (fd < 0) throw UserError(cat(partial, ": cannot create the ", what, ": ", std::strerror(errno)));
  return fd;
}

namespace {

// Writes all of `text` to `fd`; errno of the failure, or 0.
int write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    text.remove_prefix(size_t(n));
  }
  return 0;
}

}  // namespace

void write_output_file(const std::string& path, std::string_view text, const char* what) {
  if (path == "-") {  // standard output, as for every command that reads or writes '-'
    std::fflush(stdout);  // what stdio holds goes first
    const int err = write_all(STDOUT_FILENO, text);
    if (err != 0) throw UserError(cat("<stdout>: cannot write the ", what, ": ", std::strerror(err)));
    return;
  }
  // A device, FIFO or socket as the kernel resolves the path is written in
  // place through it: /dev/stdout into a pipe is a link to "pipe:[N]", which
  // names no file that output_target could follow.
  const std::string target = writes_in_place(path) ? path : output_target(path);
  const std::string shown = target == path ? path : cat(path, " (-> ", target, ")");
  if (writes_in_place(target)) {
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw UserError(cat(shown, ": cannot open the ", what, ": ", std::strerror(errno)));
    const int err = write_all(fd, text);
    ::close(fd);
    if (err != 0) throw UserError(cat(shown, ": cannot write the ", what, ": ", std::strerror(err)));
    return;
  }
  if (std::filesystem::is_directory(target))
    throw UserError(cat(shown, ": is a directory (expected a file for the ", what, ")"));
  const std::string partial = target + ".partial";
  const int fd = create_temporary(partial, what);
  int err = write_all(fd, text);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(partial.c_str());  // a full disk keeps no half-written file
    throw UserError(cat(shown, ": cannot write the ", what, ": ", std::strerror(err)));
  }
  std::error_code ec;
  std::filesystem::rename(partial, target, ec);
  if (ec) {
    ::unlink(partial.c_str());
    throw UserError(cat(shown, ": cannot rename ", partial, " to it: ", ec.message()));
  }
  const std::filesystem::path dir = std::filesystem::path(target).parent_path();
  sync_path(dir.empty() ? "." : dir.string(), true);
}

}  // namespace dapo::io
