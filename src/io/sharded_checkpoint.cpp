// Format-3 training checkpoints: a folder of rank files and an index
// (sharded_checkpoint.h).
#include "dapo/io/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/io/file_sync.h"
#include "dapo/io/tensor_digest.h"

namespace dapo::io {

namespace fs = std::filesystem;

namespace {
constexpr const char* kRngDataset = "/rng/seed";
constexpr const char* kDataDataset = "/data/position";
constexpr const char* kPiecesDataset = "/index/pieces";
constexpr const char* kDigestsDataset = "/index/digests";
constexpr const char* kDataName = "/data";
constexpr int64_t kPieceFields = 6;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// Removes a stale <path>.partial folder left by a crash; anything in it
// that dapo does not write is a UserError (not dapo's to delete).
void remove_stale_partial_folder(const std::string& partial) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(partial, ec);
  if (ec || !fs::exists(st)) return;
  if (!fs::is_directory(st)) {
    remove_stale_temporary(partial);  // a file or symlink: the link itself goes
    return;
  }
  const ShardFolderScan scan = scan_shard_folder(partial);
  if (!scan.foreign.empty())
    throw UserError(cat(partial, ": a folder holding ", scan.foreign,
                        ", which dapo does not write: it is in the way of the checkpoint being saved; move it "
                        "away"));
  fs::remove_all(partial, ec);
  if (ec) throw UserError(cat(partial, ": cannot remove the stale temporary folder: ", ec.message()));
}

// The slab of the full tensor that tp rank `tp_rank` of `tp` holds.
Hyperslab slice_slab(const model::ParamSpec& spec, const model::Qwen2Config& config, int64_t tp_rank, int64_t tp) {
  return slab_of(spec, model::local_slice(spec, config, tp_rank, tp));
}

}  // namespace

bool is_shard_folder_entry(const std::string& name) {
  static const std::regex re(R"((index\.h5|rank_\d+\.h5))");
  return std::regex_match(name, re);
}

ShardFolderScan scan_shard_folder(const std::string& dir) {
  ShardFolderScan scan;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code fec;
    if (!is_shard_folder_entry(name) || e.is_symlink(fec) || !e.is_regular_file(fec)) {
      scan.foreign = name;
      return scan;
    }
    const uintmax_t size = e.file_size(fec);
    if (!fec) scan.bytes += uint64_t(size);
  }
  if (ec) scan.foreign = cat("(unreadable: ", ec.message(), ")");
  return scan;
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kShardedIndexName, ec);
}

std::string shard_file_name(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05lld.h5", (long long)rank);
  return name;
}

ShardedSavePlan plan_sharded_save(const model::Qwen2Config& config, const ShardPlace& place, int64_t rank,
                                  const std::vector<int64_t>& offsets, const std::vector<model::ShardRange>& mine,
                                  bool training) {
  const std::vector<model::ParamSpec> specs = model::qwen2_param_specs(config);
  DAPO_CHECK(offsets.size() == specs.size(), "plan_sharded_save: ", offsets.size(), " offsets for ", specs.size(),
             " parameters");
  ShardedSavePlan plan;
  const int families = training ? 3 : 1;
  for (const auto& s : specs) plan.tensors.push_back(model_dataset(s.name));
  if (training) {
    for (const auto& s : specs) plan.tensors.push_back(exp_avg_dataset(s.name));
    for (const auto& s : specs) plan.tensors.push_back(exp_avg_sq_dataset(s.name));
  }
  for (int family = 0; family < families; ++family) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!writes_slice(specs[i], config, ShardPlace{place.tp_rank, place.tp, 0})) continue;
      const int64_t n = numel(model::local_slice(specs[i], config, place.tp_rank, place.tp).local_shape);
      const int64_t lo = offsets[i];
      for (const model::ShardRange& r : model::overlaps_of(mine, lo, lo + n)) {
        plan.pieces.push_back({int64_t(family) * int64_t(specs.size()) + int64_t(i), rank, plan.elements,
                               place.tp_rank, r.begin - lo, r.end - lo});
        plan.flat_begin.push_back(r.begin);
        plan.elements += r.end - r.begin;
      }
    }
    if (family == 0) plan.model_elements = plan.elements;
  }
  return plan;
}

uint64_t range_digest(const std::vector<int64_t>& full_shape, const Hyperslab& slab, int64_t begin, int64_t end,
                      const float* data) {
  if (end <= begin) return 0;
  if (full_shape.size() == 1) return slab_digest(full_shape, Hyperslab{{slab.start[0] + begin}, {end - begin}}, data);
  const int64_t cols = slab.count[1];
  uint64_t sum = 0;
  int64_t at = begin;
  // The partial first row, the whole rows, the partial last row.
  while (at < end) {
    const int64_t row = at / cols, col = at % cols;
    const int64_t rows = col == 0 ? std::max<int64_t>(1, (end - at) / cols) : 1;
    const int64_t width = rows > 1 || (col == 0 && end - at >= cols) ? cols : std::min(cols - col, end - at);
    const Hyperslab block{{slab.start[0] + row, slab.start[1] + col}, {rows, width}};
    sum += slab_digest(full_shape, block, data + (at - begin));
    at += rows * width;
  }
  return sum;
}

// ---- writing --------------------------------------------------------------------

ShardedCheckpointWriter::ShardedCheckpointWriter(std::string path, const parallel::Comm& comm,
                                                 const CheckpointInfo& info, ShardedSavePlan plan, uint64_t rng_key)
    : path_(std::move(path)),
      partial_(path_ + ".partial"),
      file_((fs::path(partial_) / shard_file_name(comm.rank())).string()),
      comm_(&comm),
      info_(info),
      plan_(std::move(plan)),
      rng_key_(rng_key) {
  DAPO_CHECK(info_.training, "ShardedCheckpointWriter: training checkpoints only");
  info_.format_version = kShardedFormatVersion;
  std::string error;
  if (comm.rank() == 0) {
    try {
      uint64_t bytes = uint64_t(1) << 20;  // the index, HDF5 metadata
      for (const auto& spec : model::qwen2_param_specs(info_.model)) bytes += 3 * sizeof(float) * uint64_t(numel(spec.shape));
      check_free_space(path_, bytes, "training checkpoint");
      remove_stale_partial_folder(partial_);
      std::error_code ec;
      if (!fs::create_directory(partial_, ec) || ec)
        throw UserError(cat(partial_, ": cannot create the checkpoint's temporary folder: ",
                            ec ? ec.message() : std::string("it exists")));
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  agree_on_error(comm, error);  // also: the folder exists before any rank writes into it
  try {
    data_offset_ = H5File::create_raw_f32(file_, kDataName, plan_.elements);
  } catch (const UserError& e) {
    error = e.what();
  }
  try {
    agree_on_error(comm, error);
  } catch (const UserError&) {
    discard();
    throw;
  }
  digests_.assign(plan_.tensors.size(), 0);
}

ShardedCheckpointWriter::~ShardedCheckpointWriter() {
  if (!committed_) discard();
}

void ShardedCheckpointWriter::discard() {
  if (comm_->rank() == 0) {
    std::error_code ec;
    fs::remove_all(partial_, ec);
  }
  comm_->barrier();  // a retry under the same name must not race with this removal
}

void ShardedCheckpointWriter::write(const float* data) {
  DAPO_CHECK(!written_, path_, ": written twice");
  written_ = true;
  const auto start = Clock::now();
  // The digests (a hash per element) run beside the writes: both only read `data`.
  const std::vector<model::ParamSpec> specs = model::qwen2_param_specs(info_.model);
  std::thread digester([&] {
    for (const ShardPiece& p : plan_.pieces) {
      const model::ParamSpec& spec = specs[size_t(p.tensor) % specs.size()];
      digests_[size_t(p.tensor)] += range_digest(spec.shape, slice_slab(spec, info_.model, p.src_tp_rank, info_.tp),
                                                 p.begin, p.end, data + p.offset);
    }
  });
  try {
    const int fd = ::open(file_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) throw UserError(cat(file_, ": cannot open to write: ", std::strerror(errno)));
    const auto* bytes = reinterpret_cast<const char*>(data);
    const int64_t total = plan_.elements * int64_t(sizeof(float));
    int64_t done = 0;
    std::string failure;
    while (done < total && failure.empty()) {
      const size_t chunk = size_t(std::min<int64_t>(total - done, int64_t(64) << 20));
      const ssize_t w = ::pwrite(fd, bytes + done, chunk, off_t(data_offset_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) failure = w < 0 ? std::strerror(errno) : "no progress";
      else done += w;
    }
    if (failure.empty() && ::fsync(fd) != 0) failure = cat("sync: ", std::strerror(errno));
    ::close(fd);
    if (!failure.empty())
      throw UserError(cat(file_, ": writing the checkpoint's data failed: ", failure, free_space_note(file_)));
  } catch (const UserError& e) {
    error_ = e.what();
  }
  digester.join();
  write_seconds_ = seconds_since(start);
}

void ShardedCheckpointWriter::commit() {
  DAPO_CHECK(!committed_, path_, ": committed twice");
  const parallel::Comm& comm = *comm_;
  std::string error = written_ ? error_ : cat(path_, ": commit before write");
  try {
    agree_on_error(comm, error);
    sum_digests(comm, digests_);
    const std::vector<int64_t> keys = comm.all_gather_i64(int64_t(rng_key_));
    // Every rank's piece table to rank 0, which writes the index.
    std::vector<std::vector<std::byte>> to_each(size_t(comm.size()));
    to_each[0].resize(plan_.pieces.size() * sizeof(ShardPiece));
    std::memcpy(to_each[0].data(), plan_.pieces.data(), to_each[0].size());
    const std::vector<std::byte> got = comm.all_to_all_v(to_each);
    std::vector<int64_t> table;
    if (comm.rank() == 0) {
      std::vector<ShardPiece> all(got.size() / sizeof(ShardPiece));
      std::memcpy(all.data(), got.data(), all.size() * sizeof(ShardPiece));
      for (const ShardPiece& p : all)
        table.insert(table.end(), {p.tensor, p.rank, p.offset, p.src_tp_rank, p.begin, p.end});
    }
    const int64_t pieces = comm.all_reduce_i64(int64_t(table.size()) / kPieceFields, parallel::ReduceOp::max);
    const std::string index_path = (fs::path(partial_) / kShardedIndexName).string();
    {
      H5File index = H5File::create_fresh(index_path, comm);
      write_root_attributes(index, info_, kShardedFormatVersion);
      index.set_attr("/", "layout", std::string("sharded"));
      index.set_attr("/", "optimizer_steps", info_.state.optimizer_steps);
      index.set_attr("/", "kv_cache_cap_bytes", info_.state.kv_cache_cap_bytes);
      index.create_dataset(kRngDataset, DType::i64, {int64_t(comm.size())});
      index.create_dataset(kDataDataset, DType::i64, {4});
      index.create_dataset(kPiecesDataset, DType::i64, {pieces, kPieceFields});
      index.create_dataset(kDigestsDataset, DType::i64, {int64_t(digests_.size())});
      std::string names;
      for (const auto& t : plan_.tensors) names += t + "\n";
      index.set_attr("/index", "tensors", names);
      const bool root = comm.rank() == 0;
      const TrainingState& st = info_.state;
      const int64_t pos[4] = {int64_t(st.data_seed), st.data_size, st.data_epoch, st.data_position};
      std::vector<int64_t> digests(digests_.begin(), digests_.end());
      index.write(kRngDataset, root ? Hyperslab::whole({int64_t(keys.size())}) : Hyperslab::none(), keys.data());
      index.write(kDataDataset, root ? Hyperslab::whole({4}) : Hyperslab::none(), pos);
      index.write(kPiecesDataset, root ? Hyperslab::whole({pieces, kPieceFields}) : Hyperslab::none(), table.data());
      index.write(kDigestsDataset, root ? Hyperslab::whole({int64_t(digests.size())}) : Hyperslab::none(),
                  digests.data());
      index.close();
    }
    error.clear();
    if (comm.rank() == 0) {
      try {
        sync_path(index_path, false);
        sync_path(partial_, true);
        // A checkpoint of this step already there (a run that resumed from
        // an earlier one overwrites later steps) is replaced: moved aside,
        // the new one renamed in, then the old one removed.
        const std::string aside = path_ + ".replaced";
        std::error_code ec;
        remove_stale_partial_folder(aside);
        const bool replacing = fs::exists(fs::symlink_status(path_, ec));
        if (replacing) {
          fs::rename(path_, aside, ec);
          if (ec) throw UserError(cat(path_, ": cannot move the older checkpoint of this step aside: ", ec.message()));
        }
        fs::rename(partial_, path_, ec);
        if (ec) throw UserError(cat(path_, ": cannot rename ", partial_, " to it: ", ec.message()));
        const fs::path parent = fs::path(path_).parent_path();
        sync_path(parent.empty() ? "." : parent.string(), true);
        if (replacing) fs::remove_all(aside, ec);
      } catch (const UserError& e) {
        error = e.what();
      }
    }
    agree_on_error(comm, error);
  } catch (const UserError&) {
    discard();
    committed_ = true;  // discarded: the destructor has nothing left to do
    throw;
  }
  committed_ = true;
}

// ---- reading --------------------------------------------------------------------

ShardedIndex::ShardedIndex(const std::string& dir, const H5File& index, const CheckpointInfo& info,
                           const std::vector<model::ParamSpec>& specs)
    : dir_(dir), info_(info), specs_(specs) {
  const std::string where = (fs::path(dir) / kShardedIndexName).string();
  for (const char* ds : {kPiecesDataset, kDigestsDataset})
    if (!index.is_dataset(ds)) throw UserError(cat(where, ": missing ", ds, " (not a complete checkpoint)"));
  std::string names = index.attr_string("/index", "tensors");
  for (size_t at = 0; at < names.size();) {
    const size_t nl = names.find('\n', at);
    tensors_.push_back(names.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    at = nl == std::string::npos ? names.size() : nl + 1;
  }
  const std::vector<int64_t> dshape = index.dataset_shape(kDigestsDataset);
  if (dshape != std::vector<int64_t>{int64_t(tensors_.size())})
    throw UserError(cat(where, ": ", kDigestsDataset, " does not hold one digest per tensor of /index's list"));
  std::vector<int64_t> digests(tensors_.size());
  index.read(kDigestsDataset, Hyperslab::whole(dshape), digests.data());
  digests_.assign(digests.begin(), digests.end());
  const std::vector<int64_t> pshape = index.dataset_shape(kPiecesDataset);
  if (pshape.size() != 2 || pshape[1] != kPieceFields)
    throw UserError(cat(where, ": ", kPiecesDataset, " must be (pieces, ", kPieceFields, ")"));
  std::vector<int64_t> table(size_t(pshape[0] * kPieceFields));
  index.read(kPiecesDataset, Hyperslab::whole(pshape), table.data());
  by_tensor_.resize(tensors_.size());
  file_elements_.assign(size_t(std::max<int64_t>(info.world_size, 1)), 0);
  offsets_.assign(file_elements_.size(), -1);
  // Which parameter each tensor name is (its shape, its slices).
  spec_index_.assign(tensors_.size(), -1);
  for (size_t t = 0; t < tensors_.size(); ++t)
    for (size_t i = 0; i < specs_.size(); ++i) {
      const std::string& n = specs_[i].name;
      if (tensors_[t] == model_dataset(n) || tensors_[t] == exp_avg_dataset(n) || tensors_[t] == exp_avg_sq_dataset(n))
        spec_index_[t] = int64_t(i);
    }
  auto spec_of = [&](size_t t) { return spec_index_[t] < 0 ? nullptr : &specs_[size_t(spec_index_[t])]; };
  std::vector<int64_t> covered(tensors_.size(), 0);
  for (int64_t i = 0; i < pshape[0]; ++i) {
    const int64_t* f = &table[size_t(i * kPieceFields)];
    const ShardPiece p{f[0], f[1], f[2], f[3], f[4], f[5]};
    const bool tensor_ok = p.tensor >= 0 && p.tensor < int64_t(tensors_.size());
    const bool rank_ok = p.rank >= 0 && p.rank < int64_t(file_elements_.size());
    const bool tp_ok = p.src_tp_rank >= 0 && p.src_tp_rank < info.tp;
    int64_t slice_n = -1;
    if (tensor_ok && tp_ok && spec_of(size_t(p.tensor)))
      slice_n = numel(model::local_slice(*spec_of(size_t(p.tensor)), info.model, p.src_tp_rank, info.tp).local_shape);
    if (!tensor_ok || !rank_ok || slice_n < 0 || p.begin < 0 || p.end <= p.begin || p.end > slice_n || p.offset < 0)
      throw UserError(cat(where, ": piece ", i, " of ", kPiecesDataset, " lies outside its tensor or the ranks (a "
                                                                        "damaged index)"));
    by_tensor_[size_t(p.tensor)].push_back(p);
    covered[size_t(p.tensor)] += p.end - p.begin;
    file_elements_[size_t(p.rank)] = std::max(file_elements_[size_t(p.rank)], p.offset + p.end - p.begin);
  }
  // Every tensor the model needs, covered once (with the digest check on
  // load, this finds a piece listed twice or missing).
  for (const auto& s : specs_) {
    for (const std::string& ds : {model_dataset(s.name), exp_avg_dataset(s.name), exp_avg_sq_dataset(s.name)}) {
      const auto it = std::find(tensors_.begin(), tensors_.end(), ds);
      if (it == tensors_.end()) throw UserError(cat(where, ": missing tensor ", ds));
      if (covered[size_t(it - tensors_.begin())] != numel(s.shape))
        throw UserError(cat(where, ": the pieces of tensor ", ds, " cover ", covered[size_t(it - tensors_.begin())],
                            " of its ", numel(s.shape), " elements (a damaged index)"));
    }
  }
}

bool ShardedIndex::has(const std::string& dataset) const {
  return std::find(tensors_.begin(), tensors_.end(), dataset) != tensors_.end();
}

bool ShardedIndex::digest(const std::string& dataset, uint64_t* out) const {
  const auto it = std::find(tensors_.begin(), tensors_.end(), dataset);
  if (it == tensors_.end()) return false;
  *out = digests_[size_t(it - tensors_.begin())];
  return true;
}

int64_t ShardedIndex::data_offset(int64_t rank) const {
  int64_t& cached = offsets_[size_t(rank)];
  if (cached >= 0) return cached;
  const std::string path = (fs::path(dir_) / shard_file_name(rank)).string();
  const H5File f = H5File::open_local(path);
  const std::vector<int64_t> shape = f.dataset_shape(kDataName);
  if (shape.size() != 1 || shape[0] < file_elements_[size_t(rank)])
    throw UserError(cat(path, ": ", kDataName, " holds fewer values than the index's pieces need (a damaged or "
                                                 "foreign rank file)"));
  const int64_t offset = f.data_offset(kDataName);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || int64_t(size) < offset + shape[0] * int64_t(sizeof(float)))
    throw UserError(cat(path, ": the file is shorter than its data (a truncated checkpoint)"));
  cached = offset;
  return cached;
}

void ShardedIndex::read(const std::string& dataset, const Hyperslab& slab, float* out) const {
  const auto it = std::find(tensors_.begin(), tensors_.end(), dataset);
  if (it == tensors_.end()) throw UserError(cat(dir_, ": no tensor ", dataset));
  if (slab.selects_nothing()) return;
  const size_t t = size_t(it - tensors_.begin());
  DAPO_CHECK(spec_index_[t] >= 0, dir_, ": no parameter for ", dataset);
  const model::ParamSpec* spec = &specs_[size_t(spec_index_[t])];
  const bool two_d = spec->shape.size() == 2;
  // Target block, as rows x cols of the full tensor (a vector is one row).
  const int64_t tr0 = two_d ? slab.start[0] : 0, tc0 = two_d ? slab.start[1] : slab.start[0];
  const int64_t trows = two_d ? slab.count[0] : 1, tcols = two_d ? slab.count[1] : slab.count[0];
  // Runs of elements contiguous both in a rank file and in `out`, read with one pread each.
  struct Run {
    int64_t rank = -1, file = 0, dest = 0, n = 0;
  } run;
  int fd = -1;
  int64_t fd_rank = -1;
  auto flush = [&] {
    if (run.n == 0) return;
    const std::string path = (fs::path(dir_) / shard_file_name(run.rank)).string();
    const int64_t base = data_offset(run.rank);  // also checks the file (HDF5, long enough)
    if (fd_rank != run.rank) {
      if (fd >= 0) ::close(fd);
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw UserError(cat(path, ": cannot open: ", std::strerror(errno)));
      fd_rank = run.rank;
    }
    auto* dst = reinterpret_cast<char*>(out + run.dest);
    int64_t left = run.n * int64_t(sizeof(float));
    int64_t pos = base + run.file * int64_t(sizeof(float));
    while (left > 0) {
      const ssize_t r = ::pread(fd, dst, size_t(left), off_t(pos));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw UserError(cat(path, ": cannot read: ", r < 0 ? std::strerror(errno) : "the file ends early"));
      dst += r;
      pos += r;
      left -= r;
    }
    run.n = 0;
  };
  auto add = [&](int64_t rank, int64_t file, int64_t dest, int64_t n) {
    if (run.n > 0 && run.rank == rank && run.file + run.n == file && run.dest + run.n == dest) {
      run.n += n;
      return;
    }
    flush();
    run = {rank, file, dest, n};
  };
  try {
    for (const ShardPiece& p : by_tensor_[t]) {
      const Hyperslab s = slice_slab(*spec, info_.model, p.src_tp_rank, info_.tp);
      const int64_t sr0 = two_d ? s.start[0] : 0, sc0 = two_d ? s.start[1] : s.start[0];
      const int64_t scols = two_d ? s.count[1] : s.count[0];
      for (int64_t lr = p.begin / scols; lr * scols < p.end; ++lr) {
        const int64_t row = sr0 + lr;
        if (row < tr0 || row >= tr0 + trows) continue;
        const int64_t lc_lo = std::max<int64_t>(0, p.begin - lr * scols);
        const int64_t lc_hi = std::min<int64_t>(scols, p.end - lr * scols);
        const int64_t c_lo = std::max(sc0 + lc_lo, tc0), c_hi = std::min(sc0 + lc_hi, tc0 + tcols);
        if (c_hi <= c_lo) continue;
        add(p.rank, p.offset + lr * scols + (c_lo - sc0) - p.begin, (row - tr0) * tcols + (c_lo - tc0), c_hi - c_lo);
      }
    }
    flush();
  } catch (const UserError&) {
    if (fd >= 0) ::close(fd);
    throw;
  }
  if (fd >= 0) ::close(fd);
}

}  // namespace dapo::io
