// H5File over parallel HDF5 (MPI-IO); see hdf5_file.h for the collective rules.
#include "dapo/io/hdf5_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>

#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"
#include "dapo/parallel/mpi_handle.h"
#include "hdf5_check.h"

namespace dapo::io {

using detail::h5_error_stack;
using detail::h5_or_throw;
using detail::H5Id;

// ---- error stack ----------------------------------------------------------------

namespace detail {

void h5_quiet() { DAPO_H5_CHECK(H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr)); }

namespace {
herr_t collect(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (!out->empty()) *out += "; ";
  *out += cat(e->func_name ? e->func_name : "?", ": ", e->desc ? e->desc : "?");
  return 0;
}
}  // namespace

std::string h5_error_stack() {
  std::string out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, &collect, &out);
  H5Eclear2(H5E_DEFAULT);
  return out.empty() ? std::string("(no HDF5 error details)") : out;
}

}  // namespace detail

// ---- Hyperslab ------------------------------------------------------------------

Hyperslab Hyperslab::whole(const std::vector<int64_t>& shape) {
  return Hyperslab{std::vector<int64_t>(shape.size(), 0), shape};
}

bool Hyperslab::selects_nothing() const { return numel() == 0; }

int64_t Hyperslab::numel() const {
  if (count.empty()) return 0;
  int64_t n = 1;
  for (const int64_t c : count) n *= c;
  return n;
}

// ---- helpers --------------------------------------------------------------------

namespace {

hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::i64: return H5T_STD_I64LE;
    case DType::bf16: break;
  }
  DAPO_FAIL("HDF5 datasets have no bf16 type: convert to f32 first");
}

hid_t memory_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::i64: return H5T_NATIVE_INT64;
    case DType::bf16: break;
  }
  DAPO_FAIL("HDF5 datasets have no bf16 type: convert to f32 first");
}

H5T_class_t type_class(DType t) { return t == DType::f32 ? H5T_FLOAT : H5T_INTEGER; }

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& v) { return std::vector<hsize_t>(v.begin(), v.end()); }

std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Chunk dims of about `target_bytes`: whole trailing dimensions as long as
// they fit, then a part of the next one.
std::vector<hsize_t> chunk_dims(const std::vector<int64_t>& shape, size_t esize, int64_t target_bytes) {
  std::vector<hsize_t> chunk(shape.size(), 1);
  int64_t room = std::max<int64_t>(1, target_bytes / int64_t(esize));
  for (size_t i = shape.size(); i-- > 0;) {
    const int64_t c = std::clamp<int64_t>(room, 1, shape[i]);
    chunk[i] = hsize_t(c);
    room /= c;
  }
  return chunk;
}

H5Id file_access(const parallel::Comm& comm, bool writing) {
  H5Id fapl(DAPO_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  DAPO_H5_CHECK(H5Pset_fapl_mpio(fapl, parallel::mpi_comm_of(comm), MPI_INFO_NULL));
  // Metadata writes are collective anyway (HDF5's rule); doing them as one
  // collective write is faster and keeps the file consistent. Metadata
  // reads stay independent on purpose (see hdf5_file.h).
  if (writing) DAPO_H5_CHECK(H5Pset_coll_metadata_write(fapl, true));
  return fapl;
}

}  // namespace

// ---- lifetime -------------------------------------------------------------------

H5File H5File::create(const std::string& path, const parallel::Comm& comm) {
  detail::h5_quiet();
  const H5Id fapl = file_access(comm, true);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (id < 0) throw UserError(cat(path, ": cannot create the HDF5 file: ", h5_error_stack()));
  H5File f;
  f.id_ = id;
  f.path_ = path;
  f.writable_ = true;
  f.comm_ = &comm;
  return f;
}

H5File H5File::create_fresh(const std::string& path, const parallel::Comm& comm) {
  std::string error;
  if (comm.rank() == 0) {
    try {
      const int fd = create_temporary(path, "HDF5 file");
      if (::close(fd) != 0) throw UserError(cat(path, ": cannot create the HDF5 file: ", std::strerror(errno)));
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  agree_on_error(comm, error);  // also: the file exists before any rank opens it
  return create(path, comm);
}

namespace {

// A UserError unless `path` is an existing HDF5 file.
void check_hdf5_file(const std::string& path) {
  detail::h5_quiet();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw UserError(cat(path, ": no such file"));
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_hdf5 <= 0) {
    h5_error_stack();  // clear it
    throw UserError(cat(path, ": not an HDF5 file"));
  }
}

}  // namespace

H5File H5File::open(const std::string& path, const parallel::Comm& comm, H5Access access) {
  check_hdf5_file(path);
  const bool writing = access == H5Access::read_write;
  const H5Id fapl = file_access(comm, writing);
  const hid_t id = H5Fopen(path.c_str(), writing ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
  if (id < 0) throw UserError(cat(path, ": cannot open the HDF5 file: ", h5_error_stack()));
  H5File f;
  f.id_ = id;
  f.path_ = path;
  f.writable_ = writing;
  f.comm_ = &comm;
  return f;
}

namespace {
// Closes `id`, ignoring a failure: a file abandoned while an error unwinds
// (its temporary is removed next), or one that was only read.
void close_quietly(int64_t& id) {
  if (id < 0) return;
  if (H5Fclose(hid_t(std::exchange(id, -1))) < 0) h5_error_stack();  // clears it
}

}  // namespace

namespace detail {
std::string write_failure(int64_t rc, int err) {
  if (rc >= 0) return {};
  // The innermost entry names the cause ("H5FD__mpio_write: file write
  // failed"); the twenty above it only say who called whom.
  std::string stack = h5_error_stack();
  if (const size_t last = stack.rfind("; "); last != std::string::npos) stack = stack.substr(last + 2);
  return err != 0 ? cat(std::strerror(err), " (HDF5: ", stack, ")") : cat("HDF5: ", stack);
}
}  // namespace detail

H5File::~H5File() { release(); }

void H5File::release() {
  if (refused_)
    abandon();
  else
    close_quietly(id_);
}

// A file whose writes the system refused must not be closed while its
// close would fail too: HDF5 1.10 frees a file whose close fails but keeps
// its identifier, and the library's shutdown in MPI_Finalize then closes
// it again - a segfault after the clean error. So its data is dropped first
// (truncated to nothing: a full disk gets back the blocks it held, and the
// caller removes the file anyway), then the metadata is flushed; only if
// the flush succeeds is it closed. Otherwise it stays open, to be closed
// once, at shutdown. One rank only: with more, a refused write ends the job
// (check_write).
void H5File::abandon() {
  if (id_ < 0) return;
  // A failure (the file gone already) leaves the decision to the flush.
  [[maybe_unused]] const int rc = ::truncate(path_.c_str(), 0);
  if (H5Fflush(hid_t(id_), H5F_SCOPE_LOCAL) >= 0) {
    close_quietly(id_);
    return;
  }
  h5_error_stack();  // clears it
  id_ = -1;          // left open, see above
}

H5File::H5File(H5File&& o) noexcept
    : id_(std::exchange(o.id_, -1)),
      path_(std::move(o.path_)),
      writable_(o.writable_),
      refused_(std::exchange(o.refused_, false)),
      comm_(o.comm_) {}

H5File& H5File::operator=(H5File&& o) noexcept {
  if (this != &o) {
    release();
    id_ = std::exchange(o.id_, -1);
    path_ = std::move(o.path_);
    writable_ = o.writable_;
    refused_ = std::exchange(o.refused_, false);
    comm_ = o.comm_;
  }
  return *this;
}

void H5File::close() {
  if (id_ < 0) return;
  if (!writable_) {
    DAPO_H5_CHECK(H5Fclose(hid_t(std::exchange(id_, -1))));
    return;
  }
  // Flushed first, so that a full disk fails the flush (after which the
  // file is abandoned, see abandon) rather than the close itself.
  errno = 0;
  herr_t rc = H5Fflush(hid_t(id_), H5F_SCOPE_LOCAL);
  check_write(detail::write_failure(rc, errno), cat(path_, ": writing the file's metadata"));
  errno = 0;
  rc = H5Fclose(hid_t(std::exchange(id_, -1)));
  check_write(detail::write_failure(rc, errno), cat(path_, ": closing the file"));
}

void H5File::check_write(const std::string& cause, const std::string& what) {
  std::string error;
  if (!cause.empty()) {
    // MPI-IO rarely passes errno on: the free space tells a full disk from
    // a quota, a file-size limit or a file system gone read-only.
    error = cat(what, " failed: ", cause, free_space_note(path_));
  }
  // With several ranks the others may be inside HDF5's own collective
  // calls (a barrier in chunk allocation, measured on a full tmpfs), which
  // this rank left early: no agreement can reach them, and the job would
  // hang until the watchdog. The file is dropped and the job ends, exit 2.
  if (!error.empty() && comm_ != nullptr && comm_->size() > 1) {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    abort_job(2, cat(error, "; the unfinished file was removed (files written before it are whole), and the job "
                            "ends here, since the other ranks wait inside HDF5's collective calls"));
  }
  if (!error.empty()) {
    refused_ = true;
    throw UserError(error);
  }
}

std::string H5File::where(const std::string& object) const { return cat(path_, ": ", object); }

// ---- attributes -----------------------------------------------------------------

void H5File::set_attr(const std::string& object, const std::string& name, const std::string& value) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  H5Id type(DAPO_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  DAPO_H5_CHECK(H5Tset_size(type, H5T_VARIABLE));
  DAPO_H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8));
  H5Id space(DAPO_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  if (DAPO_H5_CHECK(H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT)) > 0)
    DAPO_H5_CHECK(H5Adelete_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT));
  H5Id attr(DAPO_H5_CHECK(H5Acreate_by_name(id_, object.c_str(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT,
                                            H5P_DEFAULT)),
            H5Aclose);
  const char* p = value.c_str();
  DAPO_H5_CHECK(H5Awrite(attr, type, &p));
}

void H5File::set_attr(const std::string& object, const std::string& name, int64_t value) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  H5Id space(DAPO_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  if (DAPO_H5_CHECK(H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT)) > 0)
    DAPO_H5_CHECK(H5Adelete_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT));
  H5Id attr(DAPO_H5_CHECK(H5Acreate_by_name(id_, object.c_str(), name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT,
                                            H5P_DEFAULT, H5P_DEFAULT)),
            H5Aclose);
  DAPO_H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT64, &value));
}

bool H5File::has_attr(const std::string& object, const std::string& name) const {
  if (!exists(object)) return false;
  return h5_or_throw(H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT),
                     cat(where(object), ": attribute '", name, "'")) > 0;
}

namespace {
// An open scalar (one-element) attribute, or UserError.
H5Id open_attr(hid_t file, const std::string& where, const std::string& object, const std::string& name) {
  H5Id attr(h5_or_throw(H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                        cat(where, ": cannot open attribute '", name, "'")),
            H5Aclose);
  H5Id space(h5_or_throw(H5Aget_space(attr), where), H5Sclose);
  if (h5_or_throw(H5Sget_simple_extent_npoints(space), where) != 1)
    throw UserError(cat(where, ": attribute '", name, "' is not a single value"));
  return attr;
}
}  // namespace

std::string H5File::attr_string(const std::string& object, const std::string& name) const {
  if (!has_attr(object, name)) throw UserError(cat(where(object), ": no attribute '", name, "'"));
  const std::string ctx = cat(where(object), ": attribute '", name, "'");
  const H5Id attr = open_attr(id_, where(object), object, name);
  H5Id type(h5_or_throw(H5Aget_type(attr), ctx), H5Tclose);
  if (h5_or_throw(H5Tget_class(type), ctx) != H5T_STRING) throw UserError(cat(ctx, " is not a string"));
  H5Id mem(DAPO_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  DAPO_H5_CHECK(H5Tset_cset(mem, h5_or_throw(H5Tget_cset(type), ctx)));
  if (h5_or_throw(H5Tis_variable_str(type), ctx) > 0) {
    DAPO_H5_CHECK(H5Tset_size(mem, H5T_VARIABLE));
    char* p = nullptr;
    h5_or_throw(H5Aread(attr, mem, &p), cat(ctx, ": cannot read"));
    std::string s = p ? p : "";
    DAPO_H5_CHECK(H5free_memory(p));
    return s;
  }
  const size_t n = H5Tget_size(type);
  if (n == 0) throw UserError(cat(ctx, ": ", h5_error_stack()));
  DAPO_H5_CHECK(H5Tset_size(mem, n));
  DAPO_H5_CHECK(H5Tset_strpad(mem, H5T_STR_NULLPAD));
  std::string s(n, '\0');
  h5_or_throw(H5Aread(attr, mem, s.data()), cat(ctx, ": cannot read"));
  s.resize(std::min(s.find('\0'), s.size()));
  return s;
}

int64_t H5File::attr_int(const std::string& object, const std::string& name) const {
  if (!has_attr(object, name)) throw UserError(cat(where(object), ": no attribute '", name, "'"));
  const std::string ctx = cat(where(object), ": attribute '", name, "'");
  const H5Id attr = open_attr(id_, where(object), object, name);
  H5Id type(h5_or_throw(H5Aget_type(attr), ctx), H5Tclose);
  if (h5_or_throw(H5Tget_class(type), ctx) != H5T_INTEGER) throw UserError(cat(ctx, " is not an integer"));
  int64_t v = 0;
  h5_or_throw(H5Aread(attr, H5T_NATIVE_INT64, &v), cat(ctx, ": cannot read"));
  return v;
}

// ---- objects --------------------------------------------------------------------

bool H5File::exists(const std::string& path) const {
  DAPO_CHECK(id_ >= 0, "H5File: not open");
  if (path.empty() || path == "/") return true;
  // H5Lexists fails (rather than saying no) when a parent is missing, so
  // walk the path one link at a time.
  std::string prefix;
  size_t at = path[0] == '/' ? 1 : 0;
  while (at <= path.size()) {
    const size_t slash = std::min(path.find('/', at), path.size());
    prefix = path.substr(0, slash);
    if (slash > at) {
      if (h5_or_throw(H5Lexists(id_, prefix.c_str(), H5P_DEFAULT), where(prefix)) <= 0) return false;
    }
    at = slash + 1;
  }
  return h5_or_throw(H5Oexists_by_name(id_, path.c_str(), H5P_DEFAULT), where(path)) > 0;
}

namespace {
H5I_type_t object_type(hid_t file, const std::string& path, const std::string& where) {
  H5Id obj(h5_or_throw(H5Oopen(file, path.c_str(), H5P_DEFAULT), where), H5Oclose);
  return h5_or_throw(H5Iget_type(obj), where);
}
}  // namespace

bool H5File::is_dataset(const std::string& path) const {
  return exists(path) && object_type(id_, path, where(path)) == H5I_DATASET;
}

namespace {

// A chunked dataset (Fletcher-32 if asked, else no fill values: every
// element gets written by someone, and HDF5 refuses "never" with filters) of
// file type `ftype`, `esize` bytes per element; missing parent groups made.
// Returns why H5Dcreate2 failed (empty: it did not), for the caller to
// agree on: with Fletcher-32 the chunks are allocated and filled at
// creation, a write that a full disk refuses.
std::string create_typed(hid_t file, const std::string& path, hid_t ftype, size_t esize, const std::vector<int64_t>& shape,
                  const DatasetOptions& options) {
  DAPO_CHECK(!shape.empty(), "H5File::create_dataset ", path, ": datasets have at least one dimension");
  int64_t numel = 1;
  for (const int64_t d : shape) {
    DAPO_CHECK(d >= 0, "H5File::create_dataset ", path, ": shape ", shape_string(shape));
    numel *= d;
  }
  const std::vector<hsize_t> dims = to_hsize(shape);
  H5Id space(DAPO_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)), H5Sclose);
  H5Id lcpl(DAPO_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  DAPO_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  H5Id dcpl(DAPO_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  if (numel > 0) {  // HDF5 cannot chunk an empty extent
    const std::vector<hsize_t> chunk = chunk_dims(shape, esize, options.chunk_bytes);
    DAPO_H5_CHECK(H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()));
    if (options.fletcher32) DAPO_H5_CHECK(H5Pset_fletcher32(dcpl));
    else DAPO_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  }
  errno = 0;
  const hid_t d = H5Dcreate2(file, path.c_str(), ftype, space, lcpl, dcpl, H5P_DEFAULT);
  const std::string failure = detail::write_failure(d, errno);  // before the closes below clear HDF5's error stack
  if (d >= 0) DAPO_H5_CHECK(H5Dclose(d));
  return failure;
}

}  // namespace

void H5File::create_dataset(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                            const DatasetOptions& options) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  check_write(create_typed(id_, path, file_type(dtype), dtype_size(dtype), shape, options),
                 cat(where(path), ": creating"));
}

std::vector<int64_t> H5File::dataset_shape(const std::string& path) const {
  if (!is_dataset(path)) throw UserError(cat(where(path), ": no such dataset"));
  H5Id d(h5_or_throw(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), where(path)), H5Dclose);
  H5Id space(h5_or_throw(H5Dget_space(d), where(path)), H5Sclose);
  const int n = h5_or_throw(H5Sget_simple_extent_ndims(space), where(path));
  std::vector<hsize_t> dims(size_t(std::max(n, 0)));
  h5_or_throw(H5Sget_simple_extent_dims(space, dims.data(), nullptr), where(path));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

namespace {
struct ListState {
  std::vector<std::string> names;
  std::string error;
};
herr_t list_one(hid_t group, const char* name, const H5L_info_t*, void* data) {
  auto* st = static_cast<ListState*>(data);
  const hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) {
    st->error = cat("cannot open '", name, "': ", h5_error_stack());
    return -1;
  }
  const H5I_type_t type = H5Iget_type(obj);
  if (type == H5I_DATASET) st->names.emplace_back(name);
  if (H5Oclose(obj) < 0 || type == H5I_BADID) {
    st->error = cat("cannot inspect '", name, "': ", h5_error_stack());
    return -1;
  }
  return 0;
}
}  // namespace

std::vector<std::string> H5File::list_datasets(const std::string& group) const {
  if (!exists(group) || object_type(id_, group, where(group)) != H5I_GROUP)
    throw UserError(cat(where(group), ": no such group"));
  H5Id g(h5_or_throw(H5Gopen2(id_, group.c_str(), H5P_DEFAULT), where(group)), H5Gclose);
  ListState st;
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, &list_one, &st) < 0)
    throw UserError(cat(where(group), ": cannot list: ", st.error.empty() ? h5_error_stack() : st.error));
  std::sort(st.names.begin(), st.names.end());
  return st.names;
}

// ---- data -----------------------------------------------------------------------

namespace {
// Selects `slab` in the dataset's file space and makes the matching memory
// space; a rank selecting nothing gets "none" in both.
void select(const std::string& where, hid_t fspace, const Hyperslab& slab, H5Id* mspace) {
  const int ndims = DAPO_H5_CHECK(H5Sget_simple_extent_ndims(fspace));
  std::vector<hsize_t> dims(static_cast<size_t>(ndims));
  DAPO_H5_CHECK(H5Sget_simple_extent_dims(fspace, dims.data(), nullptr));
  if (slab.selects_nothing()) {
    DAPO_H5_CHECK(H5Sselect_none(fspace));
    const hsize_t one = 1;
    *mspace = H5Id(DAPO_H5_CHECK(H5Screate_simple(1, &one, nullptr)), H5Sclose);
    DAPO_H5_CHECK(H5Sselect_none(*mspace));
    return;
  }
  DAPO_CHECK(slab.start.size() == dims.size() && slab.count.size() == dims.size(), where, ": a rank-",
             slab.count.size(), " hyperslab of a rank-", dims.size(), " dataset");
  for (size_t i = 0; i < dims.size(); ++i)
    DAPO_CHECK(slab.start[i] >= 0 && slab.count[i] >= 0 && hsize_t(slab.start[i] + slab.count[i]) <= dims[i], where,
               ": hyperslab dim ", i, " [", slab.start[i], ", ", slab.start[i] + slab.count[i], ") of ", dims[i]);
  const std::vector<hsize_t> start = to_hsize(slab.start), count = to_hsize(slab.count);
  DAPO_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
  // The memory space has the slab's own shape: with a flat (1-D) one, HDF5
  // maps chunks element by element (about 10x slower for whole tensors).
  *mspace = H5Id(DAPO_H5_CHECK(H5Screate_simple(int(count.size()), count.data(), nullptr)), H5Sclose);
}
}  // namespace

void H5File::write_raw(const std::string& dataset, const Hyperslab& slab, DType dtype, const void* data) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  H5Id d(DAPO_H5_CHECK(H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT)), H5Dclose);
  {
    H5Id type(DAPO_H5_CHECK(H5Dget_type(d)), H5Tclose);
    DAPO_CHECK(DAPO_H5_CHECK(H5Tget_class(type)) == type_class(dtype), where(dataset), ": writing ", dtype_name(dtype),
               " into a dataset of another type class");
  }
  H5Id fspace(DAPO_H5_CHECK(H5Dget_space(d)), H5Sclose);
  // An empty dataset has no storage to write to; every rank sees the same
  // extent, so every rank skips this collective alike.
  if (DAPO_H5_CHECK(H5Sget_simple_extent_npoints(fspace)) == 0) return;
  H5Id mspace;
  select(where(dataset), fspace, slab, &mspace);
  H5Id dxpl(DAPO_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  DAPO_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  // Collective for HDF5 (filtered datasets require it; chunk ownership and
  // metadata stay agreed), but each rank's chunks go out as independent
  // MPI-IO writes: MPI-IO's collective buffering would copy every byte
  // through aggregator ranks' buffers, for data already laid out by rank
  // (tp slices). bench_io, one rank, CI-like machine: save 130-134 -> 161-182
  // MB/s against a plain write() + fsync of 246-270.
  DAPO_H5_CHECK(H5Pset_dxpl_mpio_collective_opt(dxpl, H5FD_MPIO_INDIVIDUAL_IO));
  const int64_t dummy = 0;  // HDF5 wants a buffer even for an empty selection
  DAPO_CHECK(data != nullptr || slab.selects_nothing(), where(dataset), ": no data to write");
  errno = 0;
  const herr_t rc = H5Dwrite(d, memory_type(dtype), mspace, fspace, dxpl, data ? data : &dummy);
  check_write(detail::write_failure(rc, errno), cat(where(dataset), ": writing"));
}

void H5File::read_raw(const std::string& dataset, const Hyperslab& slab, DType dtype, void* out) const {
  DAPO_CHECK(id_ >= 0, "H5File: not open");
  if (!is_dataset(dataset)) throw UserError(cat(where(dataset), ": no such dataset"));
  H5Id d(h5_or_throw(H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), where(dataset)), H5Dclose);
  {
    H5Id type(h5_or_throw(H5Dget_type(d), where(dataset)), H5Tclose);
    if (h5_or_throw(H5Tget_class(type), where(dataset)) != type_class(dtype))
      throw UserError(cat(where(dataset), ": is not ", dtype == DType::f32 ? "floating-point" : "integer", " data"));
  }
  if (slab.selects_nothing()) return;
  H5Id fspace(h5_or_throw(H5Dget_space(d), where(dataset)), H5Sclose);
  H5Id mspace;
  select(where(dataset), fspace, slab, &mspace);
  h5_or_throw(H5Dread(d, memory_type(dtype), mspace, fspace, H5P_DEFAULT, out), cat(where(dataset), ": cannot read"));
}

void H5File::write(const std::string& ds, const Hyperslab& s, const float* p) { write_raw(ds, s, DType::f32, p); }
void H5File::write(const std::string& ds, const Hyperslab& s, const int32_t* p) { write_raw(ds, s, DType::i32, p); }
void H5File::write(const std::string& ds, const Hyperslab& s, const int64_t* p) { write_raw(ds, s, DType::i64, p); }
void H5File::read(const std::string& ds, const Hyperslab& s, float* p) const { read_raw(ds, s, DType::f32, p); }
void H5File::read(const std::string& ds, const Hyperslab& s, int32_t* p) const { read_raw(ds, s, DType::i32, p); }
void H5File::read(const std::string& ds, const Hyperslab& s, int64_t* p) const { read_raw(ds, s, DType::i64, p); }

}  // namespace dapo::io

// ---- bytes and doubles (rollout dumps) --------------------------------------------

namespace dapo::io {

namespace {

// write_raw for a memory type outside DType.
// Returns why H5Dwrite failed (empty: it did not), for the caller to agree on.
std::string write_typed(hid_t file, const std::string& where, const std::string& dataset, const Hyperslab& slab,
                   hid_t mtype, H5T_class_t cls, const void* data) {
  H5Id d(DAPO_H5_CHECK(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT)), H5Dclose);
  {
    H5Id type(DAPO_H5_CHECK(H5Dget_type(d)), H5Tclose);
    DAPO_CHECK(DAPO_H5_CHECK(H5Tget_class(type)) == cls, where, ": writing into a dataset of another type class");
  }
  H5Id fspace(DAPO_H5_CHECK(H5Dget_space(d)), H5Sclose);
  if (DAPO_H5_CHECK(H5Sget_simple_extent_npoints(fspace)) == 0) return {};  // every rank alike, as in write_raw
  H5Id mspace;
  select(where, fspace, slab, &mspace);
  H5Id dxpl(DAPO_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  DAPO_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  const int64_t dummy = 0;
  DAPO_CHECK(data != nullptr || slab.selects_nothing(), where, ": no data to write");
  errno = 0;
  const herr_t rc = H5Dwrite(d, mtype, mspace, fspace, dxpl, data ? data : &dummy);
  return detail::write_failure(rc, errno);  // before the closes below clear HDF5's error stack
}

// read_raw for a memory type outside DType.
void read_typed(hid_t file, const std::string& where, const std::string& dataset, const Hyperslab& slab,
                hid_t mtype, H5T_class_t cls, const char* what, void* out) {
  H5Id d(h5_or_throw(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT), where), H5Dclose);
  {
    H5Id type(h5_or_throw(H5Dget_type(d), where), H5Tclose);
    if (h5_or_throw(H5Tget_class(type), where) != cls) throw UserError(cat(where, ": is not ", what, " data"));
  }
  if (slab.selects_nothing()) return;
  H5Id fspace(h5_or_throw(H5Dget_space(d), where), H5Sclose);
  H5Id mspace;
  select(where, fspace, slab, &mspace);
  h5_or_throw(H5Dread(d, mtype, mspace, fspace, H5P_DEFAULT, out), cat(where, ": cannot read"));
}

}  // namespace

void H5File::create_bytes_dataset(const std::string& path, const std::vector<int64_t>& shape,
                                  const DatasetOptions& options) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  check_write(create_typed(id_, path, H5T_STD_U8LE, 1, shape, options), cat(where(path), ": creating"));
}

void H5File::create_f64_dataset(const std::string& path, const std::vector<int64_t>& shape,
                                const DatasetOptions& options) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  check_write(create_typed(id_, path, H5T_IEEE_F64LE, 8, shape, options), cat(where(path), ": creating"));
}

void H5File::write_bytes(const std::string& dataset, const Hyperslab& slab, const uint8_t* data) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  check_write(write_typed(id_, where(dataset), dataset, slab, H5T_NATIVE_UINT8, H5T_INTEGER, data),
                 cat(where(dataset), ": writing"));
}

void H5File::write_f64(const std::string& dataset, const Hyperslab& slab, const double* data) {
  DAPO_CHECK(writable_, path_, " is not open for writing");
  check_write(write_typed(id_, where(dataset), dataset, slab, H5T_NATIVE_DOUBLE, H5T_FLOAT, data),
                 cat(where(dataset), ": writing"));
}

void H5File::read_bytes(const std::string& dataset, const Hyperslab& slab, uint8_t* out) const {
  DAPO_CHECK(id_ >= 0, "H5File: not open");
  if (!is_dataset(dataset)) throw UserError(cat(where(dataset), ": no such dataset"));
  read_typed(id_, where(dataset), dataset, slab, H5T_NATIVE_UINT8, H5T_INTEGER, "integer", out);
}

void H5File::read_f64(const std::string& dataset, const Hyperslab& slab, double* out) const {
  DAPO_CHECK(id_ >= 0, "H5File: not open");
  if (!is_dataset(dataset)) throw UserError(cat(where(dataset), ": no such dataset"));
  read_typed(id_, where(dataset), dataset, slab, H5T_NATIVE_DOUBLE, H5T_FLOAT, "floating-point", out);
}

int64_t H5File::create_raw_f32(const std::string& path, const std::string& dataset, int64_t n) {
  DAPO_CHECK(n >= 0, "H5File::create_raw_f32 ", path, ": ", n, " elements");
  // The file's length is claimed first, outside HDF5: a file-size limit
  // refuses it here, with a clean error, rather than in HDF5's flush at the
  // close (after which HDF5 1.10 keeps a half-closed file that crashes its
  // shutdown). HDF5 then truncates and lays the file out within that length.
  {
    const off_t length = off_t(n) * off_t(sizeof(float)) + (off_t(1) << 16);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    std::string cause;
    if (fd < 0)
      cause = std::strerror(errno);
    else if (::ftruncate(fd, length) != 0)
      cause = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    if (!cause.empty()) {
      std::error_code ec;
      std::filesystem::remove(path, ec);
      throw UserError(cat(path, ": claiming ", uint64_t(length), " bytes for the file failed: ", cause,
                          free_space_note(path)));
    }
  }
  detail::h5_quiet();
  H5File f;
  f.path_ = path;
  f.writable_ = true;
  errno = 0;
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw UserError(cat(path, ": cannot create the HDF5 file: ", detail::write_failure(id, errno)));
  f.id_ = id;
  const hsize_t dims[1] = {hsize_t(n)};
  H5Id space(DAPO_H5_CHECK(H5Screate_simple(1, dims, nullptr)), H5Sclose);
  H5Id dcpl(DAPO_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  DAPO_H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
  // Allocated now, so that its address is known; never filled, so that
  // creating it writes nothing (the owner writes every byte).
  DAPO_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  DAPO_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  errno = 0;
  const hid_t d = H5Dcreate2(id, dataset.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  f.check_write(detail::write_failure(d, errno), cat(path, ": creating ", dataset));
  int64_t offset = 0;
  if (n > 0) {
    const haddr_t at = H5Dget_offset(d);
    DAPO_CHECK(at != HADDR_UNDEF, path, ": ", dataset, " has no address after an early allocation");
    offset = int64_t(at);
  }
  DAPO_H5_CHECK(H5Dclose(d));
  f.close();
  return offset;
}

int64_t H5File::data_offset(const std::string& dataset) const {
  DAPO_CHECK(id_ >= 0, "H5File: not open");
  if (!is_dataset(dataset)) throw UserError(cat(where(dataset), ": no such dataset"));
  H5Id d(h5_or_throw(H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), where(dataset)), H5Dclose);
  {
    H5Id type(h5_or_throw(H5Dget_type(d), where(dataset)), H5Tclose);
    if (h5_or_throw(H5Tget_class(type), where(dataset)) != H5T_FLOAT || H5Tget_size(type) != sizeof(float))
      throw UserError(cat(where(dataset), ": is not f32 data"));
  }
  H5Id dcpl(h5_or_throw(H5Dget_create_plist(d), where(dataset)), H5Pclose);
  if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS) throw UserError(cat(where(dataset), ": is not stored contiguously"));
  H5Id space(h5_or_throw(H5Dget_space(d), where(dataset)), H5Sclose);
  if (h5_or_throw(H5Sget_simple_extent_npoints(space), where(dataset)) == 0) return 0;
  const haddr_t at = H5Dget_offset(d);
  if (at == HADDR_UNDEF) throw UserError(cat(where(dataset), ": has no data in the file"));
  return int64_t(at);
}

H5File H5File::open_local(const std::string& path) {
  check_hdf5_file(path);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw UserError(cat(path, ": cannot open the HDF5 file: ", h5_error_stack()));
  H5File f;
  f.id_ = id;
  f.path_ = path;
  f.writable_ = false;
  return f;
}

int64_t check_format(const H5File& file, const std::string& path, const std::string& expected, const char* what,
                     int64_t newest) {
  if (!file.has_attr("/", "format")) throw UserError(cat(path, ": not a ", what, " (no 'format' attribute)"));
  const std::string format = file.attr_string("/", "format");
  if (format != expected)
    throw UserError(cat(path, ": not a ", what, " (format '", format, "', expected '", expected, "')"));
  const int64_t version = file.attr_int("/", "format_version");
  if (version > newest)
    throw UserError(cat(path, ": format_version ", version, " is newer than this dapo reads (up to ", newest,
                        "): use a newer dapo"));
  if (version < 1) throw UserError(cat(path, ": invalid format_version ", version));
  return version;
}

}  // namespace dapo::io
