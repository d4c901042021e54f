// Model checkpoints: root attributes + /model/<hf name> in full logical
// shape, written and read per tp slice; see checkpoint.h.
#include "dapo/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "dapo/core/error.h"
#include "dapo/core/log.h"

namespace dapo::io {

namespace fs = std::filesystem;

ShardPlace ShardPlace::of(const parallel::Grid& grid) { return ShardPlace{grid.tp_rank, grid.tp_size, grid.dp_rank}; }

std::string model_dataset(const std::string& hf_name) { return "/model/" + hf_name; }

Hyperslab slab_of(const model::ParamSpec& spec, const model::SliceSpec& slice) {
  Hyperslab s = Hyperslab::whole(spec.shape);
  if (slice.dim >= 0) {
    s.start[size_t(slice.dim)] = slice.begin;
    s.count[size_t(slice.dim)] = slice.count;
  }
  return s;
}

bool writes_slice(const model::ParamSpec& spec, const model::Qwen2Config& config, const ShardPlace& place) {
  if (place.dp_rank != 0) return false;
  switch (spec.partition) {
    case model::Partition::replicated: return place.tp_rank == 0;
    case model::Partition::column_kv: return place.tp_rank % model::kv_replicas(config, place.tp) == 0;
    case model::Partition::column:
    case model::Partition::row:
    case model::Partition::vocab: return true;
  }
  return true;
}

void agree_on_error(const parallel::Comm& comm, const std::string& error) {
  // The common case costs one small all-reduce; messages move only on failure.
  if (comm.all_reduce_i64(error.empty() ? 0 : 1, parallel::ReduceOp::max) == 0) return;
  std::vector<std::vector<std::byte>> to_each(size_t(comm.size()));
  if (!error.empty())
    for (auto& b : to_each) {
      b.resize(error.size());
      std::memcpy(b.data(), error.data(), error.size());
    }
  std::vector<int64_t> sizes;
  const std::vector<std::byte> got = comm.all_to_all_v(to_each, &sizes);
  size_t at = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] > 0) {
      const std::string msg(reinterpret_cast<const char*>(got.data()) + at, size_t(sizes[r]));
      throw UserError(int(r) == comm.rank() ? msg : cat(msg, " (on rank ", r, ")"));
    }
    at += size_t(sizes[r]);
  }
}

// ---- writing --------------------------------------------------------------------

namespace {

// The file's data and then its new name reach the disk before we say "saved".
void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw UserError(cat(path, ": cannot open to sync: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory (EINVAL); the rename stands.
  if (rc != 0 && !(directory && err == EINVAL)) throw UserError(cat(path, ": cannot sync: ", std::strerror(err)));
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string path, const parallel::Comm& comm, const CheckpointInfo& info,
                                   const DatasetOptions& options)
    : path_(std::move(path)), partial_(path_ + ".partial"), comm_(&comm), specs_(model::qwen2_param_specs(info.model)) {
  file_ = H5File::create(partial_, comm);
  file_.set_attr("/", "format", std::string(kCheckpointFormat));
  file_.set_attr("/", "format_version", kCheckpointFormatVersion);
  file_.set_attr("/", "step", info.step);
  file_.set_attr("/", "config", info.config_ini);
  file_.set_attr("/", "model_config", model::qwen2_config_to_json(info.model));
  file_.set_attr("/", "world_size", info.world_size);
  file_.set_attr("/", "tp", info.tp);
  file_.set_attr("/", "dp", info.dp);
  for (const auto& spec : specs_) file_.create_dataset(model_dataset(spec.name), DType::f32, spec.shape, options);
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  file_.close();
  if (comm_->rank() == 0) {
    std::error_code ec;
    fs::remove(partial_, ec);
  }
  // A retry under the same name must not race with this removal.
  comm_->barrier();
}

void CheckpointWriter::write_model(const std::string& name, const Hyperslab& slab, const float* data) {
  DAPO_CHECK(!committed_, path_, ": write after commit");
  file_.write(model_dataset(name), slab, data);
}

void CheckpointWriter::commit() {
  DAPO_CHECK(!committed_, path_, ": committed twice");
  file_.close();
  std::string error;
  if (comm_->rank() == 0) {
    try {
      sync_path(partial_, false);
      std::error_code ec;
      fs::rename(partial_, path_, ec);
      if (ec) throw UserError(cat(path_, ": cannot rename ", partial_, " to it: ", ec.message()));
      const fs::path dir = fs::path(path_).parent_path();
      sync_path(dir.empty() ? "." : dir.string(), true);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  agree_on_error(*comm_, error);
  committed_ = true;
}

void save_model_checkpoint(const std::string& path, const parallel::Comm& comm, const ShardPlace& place,
                           const CheckpointInfo& info, const SliceSource& source, const DatasetOptions& options) {
  DAPO_CHECK(info.tp == place.tp, "save_model_checkpoint: info.tp ", info.tp, " but the rank's place has tp ", place.tp);
  model::check_tp_compatible(info.model, place.tp);
  CheckpointWriter writer(path, comm, info, options);
  for (const auto& spec : writer.specs()) {
    const model::SliceSpec slice = model::local_slice(spec, info.model, place.tp_rank, place.tp);
    if (writes_slice(spec, info.model, place)) {
      const float* data = source(spec, slice);
      DAPO_CHECK(data != nullptr, "save_model_checkpoint: no data for ", spec.name);
      writer.write_model(spec.name, slab_of(spec, slice), data);
    } else {
      writer.write_model(spec.name, Hyperslab::none(), nullptr);
    }
  }
  writer.commit();
}

// ---- reading --------------------------------------------------------------------

namespace {
std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}
}  // namespace

CheckpointReader::CheckpointReader(std::string path, const parallel::Comm& comm) : path_(std::move(path)) {
  file_ = H5File::open(path_, comm);
  if (!file_.has_attr("/", "format")) throw UserError(cat(path_, ": not a dapo checkpoint (no 'format' attribute)"));
  const std::string format = file_.attr_string("/", "format");
  if (format != kCheckpointFormat)
    throw UserError(cat(path_, ": not a dapo checkpoint (format '", format, "', expected '", kCheckpointFormat, "')"));
  info_.format_version = file_.attr_int("/", "format_version");
  if (info_.format_version > kCheckpointFormatVersion)
    throw UserError(cat(path_, ": format_version ", info_.format_version, " is newer than this dapo reads (up to ",
                        kCheckpointFormatVersion, "): use a newer dapo"));
  if (info_.format_version < 1) throw UserError(cat(path_, ": invalid format_version ", info_.format_version));
  info_.step = file_.attr_int("/", "step");
  info_.config_ini = file_.attr_string("/", "config");
  info_.model = model::parse_qwen2_config(file_.attr_string("/", "model_config"), cat(path_, ": model_config"));
  info_.world_size = file_.attr_int("/", "world_size");
  info_.tp = file_.attr_int("/", "tp");
  info_.dp = file_.attr_int("/", "dp");
  specs_ = model::qwen2_param_specs(info_.model);
  if (!file_.exists("/model")) throw UserError(cat(path_, ": no /model group (not a complete checkpoint)"));
  std::set<std::string> expected;
  for (const auto& spec : specs_) {
    const std::string ds = model_dataset(spec.name);
    expected.insert(spec.name);
    if (!file_.is_dataset(ds)) throw UserError(cat(path_, ": missing tensor ", ds));
    const std::vector<int64_t> shape = file_.dataset_shape(ds);
    if (shape != spec.shape)
      throw UserError(cat(path_, ": tensor ", ds, " has shape ", shape_string(shape), " but model_config needs ",
                          shape_string(spec.shape)));
  }
  if (comm.rank() == 0)
    for (const auto& name : file_.list_datasets("/model"))
      if (!expected.count(name)) DAPO_WARN(path_, ": ignoring ", model_dataset(name), " (not a parameter of model_config)");
}

void CheckpointReader::read_model(const std::string& name, const Hyperslab& slab, float* out) const {
  file_.read(model_dataset(name), slab, out);
}

CheckpointInfo load_model_checkpoint(const std::string& path, const parallel::Comm& comm, int64_t tp_rank, int64_t tp,
                                     const SliceSink& sink) {
  CheckpointReader reader(path, comm);
  model::check_tp_compatible(reader.info().model, tp);
  // Reads are independent: a rank that fails stops reading and reports at
  // the agreement below, which every rank reaches.
  std::string error;
  for (const auto& spec : reader.specs()) {
    try {
      const model::SliceSpec slice = model::local_slice(spec, reader.info().model, tp_rank, tp);
      float* out = sink(spec, slice);
      DAPO_CHECK(out != nullptr, "load_model_checkpoint: nowhere to put ", spec.name);
      reader.read_model(spec.name, slab_of(spec, slice), out);
    } catch (const UserError& e) {
      error = e.what();
      break;
    }
  }
  agree_on_error(comm, error);
  reader.close();
  return reader.info();
}

}  // namespace dapo::io
