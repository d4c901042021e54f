// Output folders checked and locked before the first step (run_guard.h).
#include "dapo/trainer/run_guard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/core/text_lines.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/io/checkpoint.h"
#include "dapo/model/param_spec.h"

namespace dapo::trainer {
namespace fs = std::filesystem;
namespace {

struct Folder {
  std::string key;
  std::string dir;
};

std::vector<Folder> output_folders(const Config& config, bool dumps) {
  std::vector<Folder> out{{"checkpoint.dir", config.checkpoint.dir}, {"log.dir", config.log.dir}};
  if (dumps) out.push_back({"dump.dir", config.dump.dir});
  return out;
}

// The folder's canonical path: through symlinks, weakly for a path (or its
// tail) that does not exist yet.
fs::path canonical_dir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return fs::absolute(dir).lexically_normal();
  // "a/b/" and "a/b" are the same folder.
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

std::string bytes_text(uint64_t bytes) {
  char buf[64];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t(1) << 30));
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / double(uint64_t(1) << 20));
  return cat(bytes, " bytes (", buf, ")");
}

// What to do about errno `err` when writing in a folder.
std::string remedy(int err, const std::string& key) {
  if (err == EROFS) return cat("it is on a read-only file system; choose a folder on a writable one for ", key);
  if (err == EACCES || err == EPERM)
    return cat("this user may not write there; fix its permissions or choose another ", key);
  if (err == ENOSPC || err == EDQUOT) return cat("free space there or choose another ", key);
  return cat("choose another ", key);
}

std::string read_lock_file(int fd) {
  std::string text;
  char buf[512];
  ssize_t n;
  off_t at = 0;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    text.append(buf, size_t(n));
    at += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

uint64_t checkpoint_bytes(const model::Qwen2Config& model, bool training) {
  uint64_t elements = 0;
  for (const model::ParamSpec& spec : model::qwen2_param_specs(model)) {
    uint64_t n = 1;
    for (const int64_t d : spec.shape) n *= uint64_t(d);
    elements += n;
  }
  const uint64_t data = elements * sizeof(float) * (training ? 3 : 1);
  return data + data / 100 + (uint64_t(1) << 20);  // HDF5 metadata, digests, the configuration
}

void check_folder_clash(const Config& config, bool dumps) {
  if (!dumps) return;
  if (canonical_dir(config.dump.dir) != canonical_dir(config.checkpoint.dir)) return;
  throw UserError(cat(config.origin_of("dump.dir"), ": dump.dir: ", config.dump.dir,
                      " is the same folder as checkpoint.dir = ", config.checkpoint.dir, " (",
                      config.origin_of("checkpoint.dir"),
                      "): both write step_%08d.h5, so checkpoints would overwrite the rollout dumps and "
                      "checkpoint.keep_last would delete them; choose another dump.dir (or dump.every = 0)"));
}

void check_folders_writable(const Config& config, bool dumps) {
  for (const Folder& f : output_folders(config, dumps)) {
    const std::string origin = config.origin_of(f.key);
    std::error_code ec;
    fs::create_directories(f.dir, ec);
    if (ec)
      throw UserError(cat(origin, ": ", f.key, ": cannot create the folder ", f.dir, ": ", ec.message(), "; ",
                          remedy(ec.value(), f.key)));
    if (!fs::is_directory(f.dir, ec))
      throw UserError(cat(origin, ": ", f.key, ": ", f.dir, " is not a folder; choose another ", f.key));
    const std::string probe =
        (fs::path(f.dir) / cat(".dapo.probe.", host_name(), ".", long(getpid()))).string();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      if (::write(fd, "x", 1) != 1) err = errno ? errno : EIO;
      if (::close(fd) != 0 && !err) err = errno;
      ::unlink(probe.c_str());
    }
    if (err)
      throw UserError(cat(origin, ": ", f.key, ": cannot write in ", f.dir, ": ", std::strerror(err), "; ",
                          remedy(err, f.key)));
  }
}

void check_free_space(const Config& config, const std::string& key, const std::string& dir, uint64_t needed,
                      const std::string& what) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return;  // not measurable: the save reports what happens
  const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
  if (free_bytes >= needed) return;
  throw UserError(cat(config.origin_of(key), ": ", key, ": ", dir, " has ", bytes_text(free_bytes), " free, but ",
                      what, " of this model needs ", bytes_text(needed), "; free space there or choose another ",
                      key));
}

std::string lock_holder_line() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return cat("host ", host_name(), ", pid ", long(getpid()), ", started ", when);
}

RunLock::RunLock(const Config& config, const parallel::Grid& grid) {
  std::string error;
  if (grid.world_rank() == 0) {
    std::vector<fs::path> seen;
    const std::string holder = lock_holder_line();
    for (const Folder& f : output_folders(config, false)) {
      const fs::path canon = canonical_dir(f.dir);
      if (std::find(seen.begin(), seen.end(), canon) != seen.end()) continue;
      seen.push_back(canon);
      std::error_code ec;
      fs::create_directories(f.dir, ec);  // a failure shows in open's error
      const std::string path = (fs::path(f.dir) / kRunLockName).string();
      const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) {
        const int err = errno;
        error = cat(config.origin_of(f.key), ": ", f.key, ": cannot open the lock file ", path, ": ",
                    std::strerror(err), "; ", remedy(err, f.key));
        break;
      }
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        std::string who;
        if (err == EWOULDBLOCK) {
          // The holder writes its line just after locking: give it a moment.
          for (int i = 0; i < 20 && (who = read_lock_file(fd)).empty(); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          error = cat(config.origin_of(f.key), ": ", f.key, ": ", f.dir, " is in use by another dapo run (",
                      who.empty() ? std::string("holder unknown") : who, "; lock file ", path,
                      "): two runs in one folder overwrite each other's checkpoints and logs; wait for that run "
                      "to end, or choose another ", f.key);
        } else if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
          // Lustre or GPFS mounted without flock support (slurm/env.sh turns
          // HDF5's own locking off for them): such a folder cannot be
          // guarded, and refusing would make the file system unusable.
          DAPO_WARN(config.origin_of(f.key), ": ", f.key, ": ", f.dir, " cannot be locked (", std::strerror(err),
                    ": the file system has no flock); nothing stops a second run from writing into it");
          ::close(fd);
          continue;
        } else {
          error = cat(config.origin_of(f.key), ": ", f.key, ": cannot lock ", path, ": ", std::strerror(err),
                      "; ", remedy(err, f.key));
        }
        ::close(fd);
        break;
      }
      fds_.push_back(fd);
      const std::string line = holder + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != ssize_t(line.size())) {
        const int err = errno;
        error = cat(config.origin_of(f.key), ": ", f.key, ": cannot write the lock file ", path, ": ",
                    std::strerror(err), "; ", remedy(err, f.key));
        break;
      }
    }
    if (!error.empty()) {
      for (const int fd : fds_) ::close(fd);
      fds_.clear();
    }
  }
  io::agree_on_error(grid.world, error);
}

RunLock::~RunLock() {
  for (const int fd : fds_) ::close(fd);  // closing the last descriptor releases the flock
}

RunLock prepare_output_folders(const Config& config, const parallel::Grid& grid, bool dumps) {
  std::string error;
  if (grid.world_rank() == 0) {
    try {
      check_folder_clash(config, dumps);
      check_folders_writable(config, dumps);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
  return RunLock(config, grid);
}

namespace {

// The value of `dir` in the [checkpoint] section of a config.ini text
// (config_to_ini's layout: "[section]" lines, then "key = value"); empty
// when there is none. Read by hand, not by load_config: a config.ini of an
// older dapo with keys since renamed must still name its folder.
std::string checkpoint_dir_of(const std::string& ini) {
  std::string section, line;
  std::istringstream in(ini);
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.front() == '[') {
      section = line;
      continue;
    }
    if (section != "[checkpoint]" || line.rfind("dir", 0) != 0) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || line.find_first_not_of(" \t", 3) != eq) continue;
    const size_t b = line.find_first_not_of(" \t", eq + 1);
    return b == std::string::npos ? std::string() : line.substr(b);
  }
  return {};
}

// A config.ini text without its checkpoint.resume line: how a run starts
// (auto, never, a path) is no part of which run it is.
std::string run_identity(const std::string& ini) {
  std::string out, section, line;
  std::istringstream in(ini);
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '[') section = line;
    if (section == "[checkpoint]" && line.rfind("resume = ", 0) == 0) continue;
    out += line;
    out += '\n';
  }
  return out;
}

// Why log.dir's metrics.jsonl is not this run's to continue or replace
// (empty: it is, or there is none); `resuming`: see check_log_dir_owner.
std::string log_owner_refusal(const Config& config, const std::string& log_dir, bool resuming) {
  const fs::path metrics = fs::path(log_dir) / "metrics.jsonl";
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(metrics, ec);
  if (ec || bytes == 0) return {};  // none, empty, or not a file: nothing of another run to lose
  const fs::path ini_path = fs::path(log_dir) / "config.ini";
  std::string why;
  if (!fs::exists(ini_path, ec)) {
    why = "no config.ini beside it names its run";
  } else {
    std::string ini;
    try {
      ini = read_text_file(ini_path.string(), "the log's config.ini", size_t(1) << 16);
    } catch (const UserError& e) {
      why = cat("its config.ini does not read: ", e.what());
    }
    if (why.empty()) {
      if (run_identity(ini) == run_identity(config_to_ini(config))) return {};  // this very run, started again
      const std::string theirs = checkpoint_dir_of(ini);
      const bool same_checkpoints = !theirs.empty() && canonical_dir(theirs) == canonical_dir(config.checkpoint.dir);
      // A resumed run continues the log of the run whose checkpoints it loads.
      if (resuming && same_checkpoints) return {};
      why = "its config.ini is another configuration";
      if (!theirs.empty() && !same_checkpoints) why += cat(", with checkpoint.dir = ", printable(theirs));
    }
  }
  return cat(config.origin_of("log.dir"), ": log.dir: ", log_dir, " holds another run's metrics.jsonl (",
             uint64_t(bytes), " bytes; ", why, "), which this run would overwrite, with its config.ini; choose "
             "another log.dir, or move those two files away");
}

}  // namespace

void check_log_dir_owner(const Config& config, const parallel::Grid& grid, bool resuming) {
  std::string error;
  if (grid.world_rank() == 0) error = log_owner_refusal(config, config.log.dir, resuming);
  io::agree_on_error(grid.world, error);
}

std::vector<std::string> remove_stale_partials(const std::string& dir) {
  static const std::regex partial_re(R"(((step_\d+|sft_final)\.h5|latest)\.partial)");
  // A sharded checkpoint's temporary folder, or an older one moved aside
  // while a checkpoint of the same step replaced it.
  static const std::regex folder_re(R"(step_\d+\.(partial|replaced))");
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code sec;
    if (std::regex_match(name, folder_re) && e.is_directory(sec) && !e.is_symlink(sec)) {
      // Only a folder of dapo's files: anything else in it is not ours to delete.
      const io::ShardFolderScan scan = io::scan_shard_folder(e.path().string());
      if (!scan.foreign.empty()) continue;
      if (fs::remove_all(e.path(), sec) != static_cast<uintmax_t>(-1) && !sec)
        removed.push_back(cat(printable(e.path().string()), " (", scan.bytes, " bytes)"));
      else
        DAPO_WARN("checkpoint: cannot remove the stale ", printable(e.path().string()), ": ", sec.message());
      continue;
    }
    if (!std::regex_match(name, partial_re)) continue;
    const fs::file_status st = e.symlink_status(sec);
    if (sec || !(fs::is_regular_file(st) || fs::is_symlink(st))) continue;  // a folder: not dapo's
    uintmax_t bytes = fs::is_regular_file(st) ? e.file_size(sec) : 0;
    if (sec) bytes = 0;
    if (fs::remove(e.path(), sec))
      removed.push_back(cat(printable(e.path().string()), " (", uint64_t(bytes), " bytes)"));
    else if (sec)
      DAPO_WARN("checkpoint: cannot remove the stale ", printable(e.path().string()), ": ", sec.message());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

void check_checkpoint_space(const Config& config, const parallel::Grid& grid, const model::Qwen2Config& model,
                            bool training) {
  std::string error;
  if (grid.world_rank() == 0) {
    try {
      // Under the run's lock, so no other run is writing them: a save
      // that a full disk or a kill interrupted left these, and they must
      // not count against this run's room for a checkpoint.
      const std::vector<std::string> removed = remove_stale_partials(config.checkpoint.dir);
      if (!removed.empty()) {
        std::string list;
        for (const std::string& r : removed) list += (list.empty() ? "" : ", ") + r;
        DAPO_INFO("checkpoint: removed the temporary file", removed.size() > 1 ? "s" : "",
                  " of a save that did not finish: ", list);
      }
      check_free_space(config, "checkpoint.dir", config.checkpoint.dir, checkpoint_bytes(model, training),
                       training ? "a training checkpoint (fp32 weights and both AdamW moments)"
                                : "the model checkpoint (fp32 weights)");
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
}

}  // namespace dapo::trainer
