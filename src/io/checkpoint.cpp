// Model checkpoints: root attributes + /model/<hf name> in full logical
// shape, written and read per tp slice; see checkpoint.h.
#include "dapo/io/checkpoint.h"


#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <string_view>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/file_sync.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/io/tensor_digest.h"

namespace dapo::io {

namespace fs = std::filesystem;

ShardPlace ShardPlace::of(const parallel::Grid& grid) { return ShardPlace{grid.tp_rank, grid.tp_size, grid.dp_rank}; }

std::string model_dataset(const std::string& hf_name) { return "/model/" + hf_name; }
std::string exp_avg_dataset(const std::string& hf_name) { return "/optimizer/exp_avg/" + hf_name; }
std::string exp_avg_sq_dataset(const std::string& hf_name) { return "/optimizer/exp_avg_sq/" + hf_name; }

namespace {
constexpr const char* kRngDataset = "/rng/seed";
constexpr const char* kDataDataset = "/data/position";
constexpr const char* kDigestAttr = "digest";
}  // namespace

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
    case model::Partition::replicated:
    case model::Partition::replicated_tp_grad: return place.tp_rank == 0;
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

void write_root_attributes(H5File& file, const CheckpointInfo& info, int64_t format_version) {
  file.set_attr("/", "format", std::string(kCheckpointFormat));
  file.set_attr("/", "format_version", format_version);
  file.set_attr("/", "step", info.step);
  file.set_attr("/", "config", info.config_ini);
  file.set_attr("/", "model_config", model::qwen2_config_to_json(info.model));
  file.set_attr("/", "world_size", info.world_size);
  file.set_attr("/", "tp", info.tp);
  file.set_attr("/", "dp", info.dp);
}

CheckpointWriter::CheckpointWriter(std::string path, const parallel::Comm& comm, const CheckpointInfo& info,
                                   const DatasetOptions& options)
    : path_(output_target(path)),  // a symlink's target is written, the link kept
      partial_(path_ + ".partial"),
      comm_(&comm),
      specs_(model::qwen2_param_specs(info.model)),
      info_(info) {
  // The rename of the .partial would replace a device or FIFO (--output /dev/null as root).
  if (writes_in_place(path_))
    throw UserError(cat(path, ": not a regular file (a device, FIFO or socket): a checkpoint is an HDF5 file, "
                              "written beside it and renamed into place"));
  // The final rename cannot replace a directory: say so before writing it all.
  if (fs::is_directory(path_))
    throw UserError(cat(path, ": is a directory (a checkpoint is a file, written beside it and renamed into place); "
                              "name a file"));
  // A full disk found before the file exists, with a message that says so
  // (and no .partial left behind), rather than deep inside HDF5's writes.
  std::string error;
  if (comm.rank() == 0) {
    uint64_t bytes = uint64_t(1) << 20;  // attributes, metadata
    for (const auto& spec : specs_) {
      uint64_t n = sizeof(float);
      for (const int64_t d : spec.shape) n *= uint64_t(d);
      bytes += info.training ? 3 * n : n;
    }
    try {
      check_free_space(path_, bytes, info.training ? "training checkpoint" : "checkpoint");
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  agree_on_error(comm, error);
  file_ = H5File::create_fresh(partial_, comm);  // never through a stale .partial symlink
  try {
    create_layout(options);
  } catch (const UserError&) {  // a full disk while the chunks are allocated: raised on every rank alike
    discard();
    throw;
  }
}

void CheckpointWriter::create_layout(const DatasetOptions& options) {
  const CheckpointInfo& info = info_;
  const parallel::Comm& comm = *comm_;
  DatasetOptions opts = options;
  opts.fletcher32 = true;
  write_root_attributes(file_, info, kCheckpointFormatVersion);
  for (const auto& spec : specs_) datasets_.push_back(model_dataset(spec.name));
  if (info.training) {
    file_.set_attr("/", "optimizer_steps", info.state.optimizer_steps);
    for (const auto& spec : specs_) datasets_.push_back(exp_avg_dataset(spec.name));
    for (const auto& spec : specs_) datasets_.push_back(exp_avg_sq_dataset(spec.name));
    file_.create_dataset(kRngDataset, DType::i64, {int64_t(comm.size())}, opts);
    file_.create_dataset(kDataDataset, DType::i64, {4}, opts);
  }
  for (size_t i = 0; i < datasets_.size(); ++i)
    file_.create_dataset(datasets_[i], DType::f32, specs_[i % specs_.size()].shape, opts);
  digests_.assign(datasets_.size(), 0);
}

CheckpointWriter::~CheckpointWriter() {
  if (!committed_) discard();
}

void CheckpointWriter::discard() {
  file_ = H5File();  // closed, a failure ignored: the file goes
  if (comm_->rank() == 0) {
    std::error_code ec;
    fs::remove(partial_, ec);
  }
  // A retry under the same name must not race with this removal.
  comm_->barrier();
}

void CheckpointWriter::write_digested(const std::string& dataset, const std::vector<int64_t>& shape,
                                      const Hyperslab& slab, const float* data) {
  DAPO_CHECK(!committed_, path_, ": write after commit");
  const auto it = std::find(datasets_.begin(), datasets_.end(), dataset);
  DAPO_CHECK(it != datasets_.end(), path_, ": no tensor dataset ", dataset);
  file_.write(dataset, slab, data);
  digests_[size_t(it - datasets_.begin())] += slab_digest(shape, slab, data);
}

void CheckpointWriter::write_model(const std::string& name, const Hyperslab& slab, const float* data) {
  const auto spec = std::find_if(specs_.begin(), specs_.end(), [&](const model::ParamSpec& s) { return s.name == name; });
  DAPO_CHECK(spec != specs_.end(), path_, ": no parameter ", name);
  write_digested(model_dataset(name), spec->shape, slab, data);
}

void CheckpointWriter::write_moments(const std::string& name, const Hyperslab& slab, const float* exp_avg,
                                     const float* exp_avg_sq) {
  DAPO_CHECK(info_.training, path_, ": moments in a model-only checkpoint");
  const auto spec = std::find_if(specs_.begin(), specs_.end(), [&](const model::ParamSpec& s) { return s.name == name; });
  DAPO_CHECK(spec != specs_.end(), path_, ": no parameter ", name);
  write_digested(exp_avg_dataset(name), spec->shape, slab, exp_avg);
  write_digested(exp_avg_sq_dataset(name), spec->shape, slab, exp_avg_sq);
}

void CheckpointWriter::write_training_state(uint64_t rng_key) {
  DAPO_CHECK(info_.training, path_, ": training state in a model-only checkpoint");
  const int64_t key = int64_t(rng_key);
  file_.write(kRngDataset, Hyperslab{{int64_t(comm_->rank())}, {1}}, &key);
  const TrainingState& st = info_.state;
  const int64_t pos[4] = {int64_t(st.data_seed), st.data_size, st.data_epoch, st.data_position};
  file_.write(kDataDataset, comm_->rank() == 0 ? Hyperslab::whole({4}) : Hyperslab::none(), pos);
}

void CheckpointWriter::commit() {
  DAPO_CHECK(!committed_, path_, ": committed twice");
  sum_digests(*comm_, digests_);
  for (size_t i = 0; i < datasets_.size(); ++i) file_.set_attr(datasets_[i], kDigestAttr, int64_t(digests_[i]));
  file_.close();
  std::string error;
  if (comm_->rank() == 0) {
    try {
      commit_file(partial_, path_);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  agree_on_error(*comm_, error);
  committed_ = true;
}

namespace {

// Every parameter's slice (and moments) from the ranks that write it; the
// others join each collective write with nothing.
void write_slices(CheckpointWriter& writer, const ShardPlace& place, const CheckpointInfo& info,
                  const SliceSource& params, const SliceSource* exp_avg, const SliceSource* exp_avg_sq,
                  const SliceGather& gather) {
  DAPO_CHECK(info.tp == place.tp, "checkpoint save: info.tp ", info.tp, " but the rank's place has tp ", place.tp);
  model::check_tp_compatible(info.model, place.tp);
  for (const auto& spec : writer.specs()) {
    const model::SliceSpec slice = model::local_slice(spec, info.model, place.tp_rank, place.tp);
    const bool mine = writes_slice(spec, info.model, place);
    if (gather && writes_slice(spec, info.model, ShardPlace{place.tp_rank, place.tp, 0})) gather(spec, slice);
    const Hyperslab slab = mine ? slab_of(spec, slice) : Hyperslab::none();
    const float* data = mine ? params(spec, slice) : nullptr;
    DAPO_CHECK(!mine || data != nullptr, "checkpoint save: no data for ", spec.name);
    writer.write_model(spec.name, slab, data);
    if (exp_avg) {
      // Two separate calls: each source may hand out the same staging buffer.
      const float* m = mine ? (*exp_avg)(spec, slice) : nullptr;
      std::vector<float> m_copy;
      if (mine) m_copy.assign(m, m + slab.numel());
      const float* v = mine ? (*exp_avg_sq)(spec, slice) : nullptr;
      DAPO_CHECK(!mine || (m != nullptr && v != nullptr), "checkpoint save: no moments for ", spec.name);
      writer.write_moments(spec.name, slab, mine ? m_copy.data() : nullptr, v);
    }
  }
}

}  // namespace

void save_model_checkpoint(const std::string& path, const parallel::Comm& comm, const ShardPlace& place,
                           const CheckpointInfo& info, const SliceSource& source, const DatasetOptions& options,
                           const SliceGather& gather) {
  DAPO_CHECK(!info.training, "save_model_checkpoint: use save_training_checkpoint for training state");
  CheckpointWriter writer(path, comm, info, options);
  write_slices(writer, place, info, source, nullptr, nullptr, gather);
  writer.commit();
}

void save_training_checkpoint(const std::string& path, const parallel::Comm& comm, const ShardPlace& place,
                              const CheckpointInfo& info, uint64_t rng_key, const SliceSource& params,
                              const SliceSource& exp_avg, const SliceSource& exp_avg_sq, const SliceGather& gather) {
  DAPO_CHECK(info.training, "save_training_checkpoint: info.training is not set");
  CheckpointWriter writer(path, comm, info);
  writer.write_training_state(rng_key);
  write_slices(writer, place, info, params, &exp_avg, &exp_avg_sq, gather);
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
  if (is_sharded_checkpoint(path_)) {
    open_sharded(comm);
    return;
  }
  file_ = H5File::open(path_, comm);
  info_.format_version = check_format(file_, path_, kCheckpointFormat, "dapo checkpoint", kShardedFormatVersion);
  if (info_.format_version >= kShardedFormatVersion)
    throw UserError(cat(path_, ": the index of a sharded checkpoint (format ", info_.format_version,
                        "): give the folder that holds it and its rank files"));
  read_root_attributes(path_);
  if (!file_.exists("/model")) throw UserError(cat(path_, ": no /model group (not a complete checkpoint)"));
  check_layer_count(info_.model, file_.list_datasets("/model"), cat(path_, ": model_config"));
  specs_ = model::qwen2_param_specs(info_.model);
  info_.training = file_.exists("/optimizer");
  auto check_tensor = [&](const std::string& ds, const model::ParamSpec& spec) {
    if (!file_.is_dataset(ds)) throw UserError(cat(path_, ": missing tensor ", ds));
    const std::vector<int64_t> shape = file_.dataset_shape(ds);
    if (shape != spec.shape)
      throw UserError(cat(path_, ": tensor ", ds, " has shape ", shape_string(shape), " but model_config needs ",
                          shape_string(spec.shape)));
  };
  std::set<std::string> expected;
  for (const auto& spec : specs_) {
    expected.insert(spec.name);
    check_tensor(model_dataset(spec.name), spec);
    if (info_.training) {
      check_tensor(exp_avg_dataset(spec.name), spec);
      check_tensor(exp_avg_sq_dataset(spec.name), spec);
    }
  }
  if (info_.training) {
    info_.state.optimizer_steps = file_.attr_int("/", "optimizer_steps");
    read_training_state(path_);
  }
  if (comm.rank() == 0)
    for (const auto& name : file_.list_datasets("/model"))
      if (!expected.count(name)) DAPO_WARN(path_, ": ignoring ", model_dataset(name), " (not a parameter of model_config)");
}

void CheckpointReader::read_root_attributes(const std::string& where) {
  info_.step = file_.attr_int("/", "step");
  // Bad input, not a bug: resume = auto then falls back to the previous checkpoint.
  if (info_.step < 0) throw UserError(cat(where, ": step = ", info_.step, " is negative (a damaged checkpoint)"));
  info_.config_ini = file_.attr_string("/", "config");
  info_.model = model::parse_qwen2_config(file_.attr_string("/", "model_config"), cat(where, ": model_config"));
  info_.world_size = file_.attr_int("/", "world_size");
  info_.tp = file_.attr_int("/", "tp");
  info_.dp = file_.attr_int("/", "dp");
}

void CheckpointReader::read_training_state(const std::string& where) {
  TrainingState& st = info_.state;
  for (const char* ds : {kRngDataset, kDataDataset})
    if (!file_.is_dataset(ds)) throw UserError(cat(where, ": missing ", ds, " (an incomplete training checkpoint)"));
  if (file_.dataset_shape(kDataDataset) != std::vector<int64_t>{4})
    throw UserError(cat(where, ": ", kDataDataset, " must hold 4 integers"));
  int64_t pos[4];
  file_.read(kDataDataset, Hyperslab::whole({4}), pos);
  st.data_seed = uint64_t(pos[0]);
  st.data_size = pos[1];
  st.data_epoch = pos[2];
  st.data_position = pos[3];
  const std::vector<int64_t> rng_shape = file_.dataset_shape(kRngDataset);
  if (rng_shape.size() != 1 || rng_shape[0] < 1) throw UserError(cat(where, ": ", kRngDataset, " is empty"));
  int64_t key = 0;
  file_.read(kRngDataset, Hyperslab{{0}, {1}}, &key);
  st.rng_seed = uint64_t(key);
  if (st.optimizer_steps < 0 || st.data_size < 0 || st.data_epoch < 0 || st.data_position < 0)
    throw UserError(cat(where, ": negative optimizer_steps or data position"));
}

void CheckpointReader::open_sharded(const parallel::Comm& comm) {
  const std::string index_path = (fs::path(path_) / kShardedIndexName).string();
  file_ = H5File::open(index_path, comm);
  info_.format_version = check_format(file_, index_path, kCheckpointFormat, "dapo checkpoint", kShardedFormatVersion);
  if (info_.format_version < kShardedFormatVersion || !file_.has_attr("/", "layout") ||
      file_.attr_string("/", "layout") != "sharded")
    throw UserError(cat(index_path, ": not the index of a sharded checkpoint (format_version ", info_.format_version,
                        ", no layout = sharded)"));
  read_root_attributes(index_path);
  // The index sizes its tables by these: a damaged value must not allocate for it.
  if (info_.world_size < 1 || info_.tp < 1 || info_.dp < 1 || info_.world_size > (int64_t(1) << 24) ||
      info_.tp > info_.world_size)
    throw UserError(cat(index_path, ": world_size ", info_.world_size, ", tp ", info_.tp, ", dp ", info_.dp,
                        " (a damaged checkpoint)"));
  info_.training = true;
  info_.state.optimizer_steps = file_.attr_int("/", "optimizer_steps");
  if (file_.has_attr("/", "kv_cache_cap_bytes")) {
    info_.state.kv_cache_cap_bytes = file_.attr_int("/", "kv_cache_cap_bytes");
    if (info_.state.kv_cache_cap_bytes < 0)
      throw UserError(cat(index_path, ": kv_cache_cap_bytes = ", info_.state.kv_cache_cap_bytes, " is negative"));
  }
  std::vector<std::string> names;
  const std::string tensors = file_.exists("/index") ? file_.attr_string("/index", "tensors") : std::string();
  for (size_t at = 0; at < tensors.size();) {
    const size_t nl = std::min(tensors.find('\n', at), tensors.size());
    const std::string t = tensors.substr(at, nl - at);
    if (t.rfind("/model/", 0) == 0) names.push_back(t.substr(7));
    at = nl + 1;
  }
  check_layer_count(info_.model, names, cat(index_path, ": model_config"));
  specs_ = model::qwen2_param_specs(info_.model);
  sharded_ = std::make_shared<const ShardedIndex>(path_, file_, info_, specs_);
  read_training_state(index_path);
}

void CheckpointReader::read_model(const std::string& name, const Hyperslab& slab, float* out) const {
  read_tensor(model_dataset(name), slab, out);
}

void CheckpointReader::read_tensor(const std::string& dataset, const Hyperslab& slab, float* out) const {
  if (sharded_)
    sharded_->read(dataset, slab, out);
  else
    file_.read(dataset, slab, out);
}

bool CheckpointReader::stored_digest(const std::string& dataset, uint64_t* digest) const {
  if (sharded_) return sharded_->digest(dataset, digest);
  if (!file_.has_attr(dataset, kDigestAttr)) return false;
  *digest = uint64_t(file_.attr_int(dataset, kDigestAttr));
  return true;
}

namespace {

// One tensor dataset family to load: its dataset name per parameter and
// where each rank's slice goes.
struct LoadTarget {
  std::string (*dataset)(const std::string&);
  const SliceSink* sink;
};

// Reads this rank's slices of every target, then verifies the digests:
// each slice contributes once (from the lowest rank of `comm` holding that
// tp rank, and of tp ranks holding the same data only the first), so the
// sums over `comm` are the full tensors' digests.
void load_targets(const CheckpointReader& reader, const parallel::Comm& comm, int64_t tp_rank, int64_t tp,
                  const std::vector<LoadTarget>& targets) {
  const model::Qwen2Config& mc = reader.info().model;
  model::check_tp_compatible(mc, tp);
  const std::vector<int64_t> tp_ranks = comm.all_gather_i64(tp_rank);
  std::vector<bool> held(size_t(tp), false);
  int first_holder = comm.rank();
  for (int r = 0; r < int(tp_ranks.size()); ++r) {
    if (tp_ranks[size_t(r)] >= 0 && tp_ranks[size_t(r)] < tp) held[size_t(tp_ranks[size_t(r)])] = true;
    if (tp_ranks[size_t(r)] == tp_rank && r < first_holder) first_holder = r;
  }
  const bool verify = std::all_of(held.begin(), held.end(), [](bool h) { return h; });
  const ShardPlace place{tp_rank, tp, first_holder == comm.rank() ? 0 : 1};

  // Reads are independent: a rank that fails stops reading and reports at
  // the agreement below, which every rank reaches.
  std::string error;
  std::vector<std::string> names;
  std::vector<uint64_t> parts;
  for (const LoadTarget& t : targets) {
    for (const auto& spec : reader.specs()) {
      const std::string ds = t.dataset(spec.name);
      names.push_back(ds);
      parts.push_back(0);
      if (!error.empty()) continue;
      try {
        const model::SliceSpec slice = model::local_slice(spec, mc, tp_rank, tp);
        float* out = (*t.sink)(spec, slice);
        DAPO_CHECK(out != nullptr, "checkpoint load: nowhere to put ", ds);
        const Hyperslab slab = slab_of(spec, slice);
        reader.read_tensor(ds, slab, out);
        // A model to run or train: NaN/Inf would only surface later, as
        // non-finite logits far from the cause. resume = auto falls back
        // past such a checkpoint like past a damaged one.
        if (const int64_t bad = count_non_finite(out, slab.numel()); bad > 0)
          throw UserError(cat("non-finite values in tensor ", ds, " of ", reader.path(), " (", bad, " NaN or Inf of ",
                              slab.numel(), " values read): the model cannot run; use an earlier checkpoint or "
                              "re-import the weights"));
        if (verify && writes_slice(spec, mc, place)) parts.back() = slab_digest(spec.shape, slab, out);
      } catch (const UserError& e) {
        error = e.what();
      }
    }
  }
  agree_on_error(comm, error);
  if (!verify) return;
  sum_digests(comm, parts);
  for (size_t i = 0; i < names.size() && error.empty(); ++i) {
    uint64_t stored = 0;
    if (reader.stored_digest(names[i], &stored) && stored != parts[i])
      error = cat(reader.path(), ": tensor ", names[i], " does not match its stored digest (the file is damaged)");
  }
  agree_on_error(comm, error);
}

}  // namespace

CheckpointInfo load_model_checkpoint(const std::string& path, const parallel::Comm& comm, int64_t tp_rank, int64_t tp,
                                     const SliceSink& sink) {
  CheckpointReader reader(path, comm);
  load_targets(reader, comm, tp_rank, tp, {{&model_dataset, &sink}});
  reader.close();
  return reader.info();
}

CheckpointInfo load_training_checkpoint(const std::string& path, const parallel::Comm& comm, int64_t tp_rank,
                                        int64_t tp, const SliceSink& params, const SliceSink& exp_avg,
                                        const SliceSink& exp_avg_sq) {
  CheckpointReader reader(path, comm);
  std::string error;
  if (!reader.info().training)
    error = cat(path, ": a model-only checkpoint (no /optimizer): give it as model.path to start a new run from "
                      "its weights, not as a checkpoint to resume");
  agree_on_error(comm, error);
  load_targets(reader, comm, tp_rank, tp,
               {{&model_dataset, &params}, {&exp_avg_dataset, &exp_avg}, {&exp_avg_sq_dataset, &exp_avg_sq}});
  reader.close();
  return reader.info();
}

void check_layer_count(const model::Qwen2Config& config, const std::vector<std::string>& names,
                       const std::string& origin) {
  static constexpr std::string_view kPrefix = "model.layers.";
  const int64_t want = config.num_hidden_layers;
  std::vector<bool> present(std::min(size_t(want), names.size()), false);  // no layer without a tensor
  for (const std::string& name : names) {
    if (name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    int64_t l = 0;
    size_t i = kPrefix.size();
    for (; i < name.size() && i < kPrefix.size() + 12 && name[i] >= '0' && name[i] <= '9'; ++i) l = l * 10 + (name[i] - '0');
    if (i > kPrefix.size() && i < name.size() && name[i] == '.' && l < int64_t(present.size())) present[size_t(l)] = true;
  }
  const auto missing = std::find(present.begin(), present.end(), false);
  if (int64_t(present.size()) < want || missing != present.end())
    throw UserError(cat(origin, ": num_hidden_layers = ", want, " but there are no tensors of layer ",
                        missing != present.end() ? int64_t(missing - present.begin()) : int64_t(present.size()),
                        " (model.layers.N.*; ", names.size(),
                        " tensors in all): a damaged or mismatched model configuration"));
}

}  // namespace dapo::io
