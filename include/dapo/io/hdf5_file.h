// An HDF5 file opened by every rank of a Comm through MPI-IO (parallel HDF5):
// datasets in full logical shape, each rank writing or reading only its own
// hyperslab. The primitives under checkpoints (and, later, rollout dumps).
//
// Collective rules (parallel HDF5's, made explicit):
//  - create/open/close and every call that changes the file's structure or
//    metadata (create_dataset, set_attr) are collective over the Comm: every
//    rank calls them in the same order with the same arguments and values.
//    Metadata is written collectively (H5Pset_coll_metadata_write).
//  - write() is collective (H5FD_MPIO_COLLECTIVE): every rank calls it for
//    the same dataset, each with its own hyperslab; a rank with nothing to
//    write passes Hyperslab::none(). Selections of different ranks must not
//    overlap (who writes what is the caller's decision: dp replicas must not
//    write twice). Collective transfer is also what parallel HDF5 1.10
//    requires for filtered (Fletcher-32) datasets.
//  - reads of metadata (attributes, shapes, listings) and data are
//    independent: a rank may read what it needs, and a rank that finds a bad
//    file can stop without leaving the others inside a collective. Only
//    close() must still be reached by all ranks.
//
// Errors: creating datasets, writing data and closing a file being written
// fail for reasons outside the program (a full disk, a quota, a file-size
// limit, a file system gone read-only): "FILE: writing DATASET failed:
// CAUSE; the file system has N bytes free". On one rank that is a
// UserError, and the caller removes its temporary file. With several ranks
// the others may be waiting in HDF5's internal collectives, which the
// failing rank left: it removes the file and ends the job (abort_job, exit
// code 2) rather than hang it. Any other HDF5 call that fails
// on a file we create or write is a bug, fatal (DAPO_FAIL with file:line,
// rank, host and HDF5's own error stack as text; HDF5's automatic printing
// is switched off). Opening a missing, unreadable
// or non-HDF5 file, reading a missing attribute or dataset, or data of an
// unexpected type is a UserError naming the file and the object.
//
// Types: datasets are f32, i32 or i64 (little-endian in the file; u8 and
// f64 through the byte and double calls below); dapo's
// bf16 is not an HDF5 type (convert to f32 first). Not thread-safe: one
// thread per rank uses an H5File.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/core/tensor.h"
#include "dapo/parallel/comm.h"

namespace dapo::io {

// A block of a dataset: per dimension, start and count. A Hyperslab of
// rank 0 (none()) or with a zero count selects nothing.
struct Hyperslab {
  std::vector<int64_t> start, count;

  static Hyperslab none() { return {}; }
  static Hyperslab whole(const std::vector<int64_t>& shape);
  bool selects_nothing() const;
  int64_t numel() const;  // elements selected (0 for none)
};

struct DatasetOptions {
  // Chunks of about this many bytes (whole trailing dimensions first, then
  // rows): a chunked layout is what checksums and later compression need.
  int64_t chunk_bytes = int64_t(1) << 20;
  // Fletcher-32 checksum per chunk, verified by HDF5 on every read (a
  // damaged chunk fails the read). Parallel HDF5 writes filtered datasets
  // since 1.10.2, collectively only (which write() always is). Checked on
  // Debian 12's 1.10.8 (tests/mpi/test_hdf5.cpp, 2 and 4 ranks): chunks
  // shared by several ranks' blocks, ranks with empty selections, and
  // independent reads all work. Cost on one core (bench_io): saves about
  // 25% slower, page-cache reads about 2x slower. Off by default until the
  // checkpoint issue (#6) turns verification on.
  bool fletcher32 = false;
};

enum class H5Access { read, read_write };

class H5File {
 public:
  // Creates (truncating) `path`. Collective. UserError if it cannot be created.
  static H5File create(const std::string& path, const parallel::Comm& comm);
  // Creates `path` fresh, for temporary files (`.partial`): rank 0 removes
  // a stale file or symlink there (the link itself, never its target) and
  // creates an empty file exclusively (O_EXCL | O_NOFOLLOW), then every
  // rank opens it as a new HDF5 file. Nothing is written through a symlink.
  // Collective; UserError on every rank alike.
  static H5File create_fresh(const std::string& path, const parallel::Comm& comm);
  // Opens an existing file. Collective. UserError if it is missing or not HDF5.
  static H5File open(const std::string& path, const parallel::Comm& comm, H5Access access = H5Access::read);

  H5File() = default;  // closed
  ~H5File();           // closes, ignoring a failure (call close() to see it)
  H5File(H5File&&) noexcept;
  H5File& operator=(H5File&&) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  // Flushes and closes (collective); idempotent. A file being written that
  // cannot be flushed is a UserError on every rank (see Errors above).
  void close();
  bool is_open() const { return id_ >= 0; }
  const std::string& path() const { return path_; }

  // ---- attributes of an object: "/" (the root), a group or a dataset ----------
  // Written as a variable-length UTF-8 string / a 64-bit integer (both read by
  // h5py as str / int); an existing attribute of that name is replaced.
  void set_attr(const std::string& object, const std::string& name, const std::string& value);
  void set_attr(const std::string& object, const std::string& name, int64_t value);
  bool has_attr(const std::string& object, const std::string& name) const;
  // Variable- or fixed-length strings / any integer type. UserError if the
  // object or attribute is missing or of another type.
  std::string attr_string(const std::string& object, const std::string& name) const;
  int64_t attr_int(const std::string& object, const std::string& name) const;

  // ---- groups and datasets --------------------------------------------------
  // Whether an object exists at `path` ("/a/b"; missing parents: false).
  bool exists(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  // Creates a dataset (and missing parent groups) of a full logical shape.
  // Collective; the data is written afterwards with write().
  void create_dataset(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                      const DatasetOptions& options = {});
  // UserError if `path` is not a dataset.
  std::vector<int64_t> dataset_shape(const std::string& path) const;
  // Names (not paths) of the datasets directly in a group, sorted. UserError
  // if the group does not exist.
  std::vector<std::string> list_datasets(const std::string& group) const;

  // Writes this rank's hyperslab of a dataset from `data` (slab.numel()
  // elements, row-major over the slab). Collective, see above.
  void write(const std::string& dataset, const Hyperslab& slab, const float* data);
  void write(const std::string& dataset, const Hyperslab& slab, const int32_t* data);
  void write(const std::string& dataset, const Hyperslab& slab, const int64_t* data);
  // Reads a hyperslab into `out` (slab.numel() elements). Independent. A slab
  // outside the dataset is a caller bug (check dataset_shape first); a read
  // that fails (a damaged chunk, a failed checksum) is a UserError naming the
  // file and dataset. Float datasets read as float, integer ones as integers.
  void read(const std::string& dataset, const Hyperslab& slab, float* out) const;
  void read(const std::string& dataset, const Hyperslab& slab, int32_t* out) const;
  void read(const std::string& dataset, const Hyperslab& slab, int64_t* out) const;

  // ---- bytes and doubles (rollout dumps) -------------------------------------
  // Outside DType on purpose (they are not tensor types): uint8 datasets
  // (H5T_STD_U8LE; UTF-8 text stored as bytes + offsets, flags and small
  // codes; h5py reads numpy uint8) and float64 ones (H5T_IEEE_F64LE; scores,
  // rewards and advantages kept exactly). Same collective rules as
  // create_dataset / write / read above; chunking and options likewise.
  void create_bytes_dataset(const std::string& path, const std::vector<int64_t>& shape,
                            const DatasetOptions& options = {});
  void create_f64_dataset(const std::string& path, const std::vector<int64_t>& shape,
                          const DatasetOptions& options = {});
  void write_bytes(const std::string& dataset, const Hyperslab& slab, const uint8_t* data);
  void write_f64(const std::string& dataset, const Hyperslab& slab, const double* data);
  // Integer datasets read as bytes (values converted, out-of-range ones
  // clamped by HDF5), float datasets as doubles; another class is a UserError.
  void read_bytes(const std::string& dataset, const Hyperslab& slab, uint8_t* out) const;
  void read_f64(const std::string& dataset, const Hyperslab& slab, double* out) const;

  // Opens an existing file read-only in this process alone, through HDF5's
  // default POSIX driver: no Comm, no MPI, no collectives (a tool or one
  // rank reading a file by itself). UserError if missing or not HDF5.
  static H5File open_local(const std::string& path);

  // ---- raw data for another writer (format-3 checkpoints' rank files) ---------
  // Creates `path` in this process alone (no MPI; a file there is
  // truncated: give a fresh temporary name) holding one contiguous f32
  // dataset `dataset` of `n` elements, its space allocated at once and
  // never filled, and closes it. Returns the byte offset of the dataset's
  // values in the file: the caller writes them there itself (pwrite, from
  // any thread, with no HDF5 call), and HDF5 readers then see an ordinary
  // dataset. UserError (with the free space) when the system refuses.
  static int64_t create_raw_f32(const std::string& path, const std::string& dataset, int64_t n);
  // The byte offset of a contiguous dataset's values (0 for an empty one),
  // for direct reads. UserError if `dataset` is missing, not f32, chunked
  // or not allocated.
  int64_t data_offset(const std::string& dataset) const;

 private:
  void write_raw(const std::string& dataset, const Hyperslab& slab, DType dtype, const void* data);
  void read_raw(const std::string& dataset, const Hyperslab& slab, DType dtype, void* out) const;
  std::string where(const std::string& object) const;  // "file: object"
  // A write or close's failure `cause` (empty: none): a UserError "<what>
  // failed: <cause>" on one rank, the end of the job with more (see Errors).
  void check_write(const std::string& cause, const std::string& what);
  // Closes the file, ignoring a failure; one whose writes were refused by
  // abandon(), which closes it only if that is safe (see the .cpp).
  void release();
  void abandon();

  int64_t id_ = -1;  // hid_t (64-bit since HDF5 1.10)
  std::string path_;
  bool writable_ = false;
  bool refused_ = false;  // a write the system refused: never closed by us (see the destructor)
  const parallel::Comm* comm_ = nullptr;  // of create/open; none for open_local
};

// The `format` and `format_version` root attributes of a dapo file: the
// version, after checking that `format` is `expected` and the version is
// between 1 and `newest`. UserError "PATH: not a WHAT (...)", "...is newer
// than this dapo reads (up to N): use a newer dapo", "invalid format_version".
int64_t check_format(const H5File& file, const std::string& path, const std::string& expected, const char* what,
                     int64_t newest);

}  // namespace dapo::io
