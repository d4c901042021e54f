// Comm: one communicator (world, tp or dp group) and the collectives dapo
// uses on it. Data-plane collectives take Tensor views (the gradient
// all-reduce, tensor-parallel activations); control-plane helpers move
// counts and metrics as plain scalars; all_to_all_v moves serialised
// rollout groups between dp ranks.
//
// Backends. Host tensors go through MPI (the CPU backend; also how CI tests
// tensor and data parallelism with `mpirun -np 4`). Device tensors go
// through an NCCL communicator kept inside the same Comm, made on the first
// device collective from an id that rank 0 creates and broadcasts over the
// Comm's MPI group (every rank must have bound its GPU first, e.g. with
// ops::CudaDevice). Device collectives are enqueued on `stream`
// (cudaStream_t; nullptr: the legacy default stream) and return before they
// complete, as NCCL's do. A build without CUDA fails a device tensor with a
// message. This header includes neither mpi.h nor nccl.h: only the parallel
// module's sources do.
//
// Every method is collective over the ranks of the Comm (including
// construction by split/dup and destruction): all ranks call it in the same
// order with matching dtypes and element counts, as in MPI. Argument errors
// on one rank (shape or dtype mismatch between out and in, a cuda tensor)
// are DAPO_CHECK failures, which end the whole job. Only the main thread
// may call (MPI_THREAD_FUNNELED).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dapo/core/tensor.h"

namespace dapo::parallel {

enum class ReduceOp : uint8_t { sum, max, min };
const char* reduce_op_name(ReduceOp op);

class Comm {
 public:
  // MPI counts are int: a message of more elements than this is split into
  // several calls of at most this many elements each. The default keeps
  // every single MPI message at or under 1 GiB (i64), below the 2 GiB where
  // several MPI libraries have had large-message bugs. Tests set it tiny
  // to exercise the split path.
  static constexpr int64_t kDefaultMaxChunk = int64_t(1) << 27;

  // An empty Comm (also what a moved-from Comm is); only valid() works on it.
  Comm();
  // A dup of MPI_COMM_WORLD. The parallel::Runtime must exist.
  static Comm world(int64_t max_chunk = kDefaultMaxChunk);

  ~Comm();  // frees the MPI communicator (collective), unless MPI is already finalized
  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Ranks with the same color (>= 0) form a new Comm, ordered by key, then
  // by rank in this Comm. The new Comm inherits max_chunk.
  Comm split(int color, int key) const;
  Comm dup() const;

  bool valid() const { return impl_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Elements per MPI call, in [1, INT_MAX]. Local setting; all ranks of the
  // Comm must use the same value (it decides how many calls a message takes).
  void set_max_chunk(int64_t elements);
  int64_t max_chunk() const { return max_chunk_; }

  // ---- data plane: Tensor views; dtypes f32, bf16, i32, i64 ---------------
  // Reductions of f32/i32/i64 are MPI's. bf16 has no MPI type: every
  // pairwise combination is done in f32 and rounded to bf16 (nearest even),
  // as NCCL does for bf16, so a sum over P ranks is rounded up to P-1 times
  // in an order MPI picks. Reduce gradients in f32 when that matters.

  // All tensors of one call are on the same device; `stream` is used for
  // device tensors only.
  // buf (any shape): overwritten on every rank with the reduction over ranks.
  void all_reduce(Tensor buf, ReduceOp op, void* stream = nullptr) const;
  // in (n, ...), out (size*n, ...): out[r*n : (r+1)*n] = in of rank r.
  // in may be this rank's own block of out (in-place gather); any other
  // overlap is an error.
  void all_gather(Tensor out, Tensor in, void* stream = nullptr) const;
  // in (size*m, ...), out (m, ...): out = reduction over ranks of rows
  // [rank*m, (rank+1)*m) of in. out may be this rank's own block of in
  // (in-place scatter: the other blocks keep this rank's input); any other
  // overlap is an error.
  void reduce_scatter(Tensor out, Tensor in, ReduceOp op, void* stream = nullptr) const;
  // buf (any shape): overwritten on every rank but root with root's values.
  void broadcast(Tensor buf, int root, void* stream = nullptr) const;

  // An asynchronous error of this Comm's NCCL communicator (a peer died, a
  // network failure), as text; "" when there is none or no NCCL
  // communicator was made yet. Thread-safe: the watchdog thread polls it
  // while the main thread may be blocked inside a collective. Not collective.
  std::string nccl_async_error() const;
  // Makes this Comm's NCCL communicator now (collective over the Comm; the
  // rank's GPU must be bound). A run calls it at start-up for the world,
  // tp and dp Comms (init_device_comms in grid.h), so that the first
  // collective of the hot path does not pay for it and a broken fabric shows
  // up before any work. Device collectives still make it on first use
  // when nobody did. Idempotent.
  void init_nccl() const;

  // Variable-sized byte payloads: to_each_rank[r] (size() entries) goes to
  // rank r (an entry may be empty; the one for this rank is copied locally).
  // Returns the concatenation, in rank order, of what every rank sent to
  // this one; received_sizes (optional) gets size() byte counts. Sizes are
  // exchanged first, then payloads move point-to-point in pieces of at
  // most max_chunk bytes, so neither counts nor offsets overflow int.
  std::vector<std::byte> all_to_all_v(const std::vector<std::vector<std::byte>>& to_each_rank,
                                      std::vector<int64_t>* received_sizes = nullptr) const;

  void barrier() const;

  // ---- control plane: counts and metrics ---------------------------------
  int64_t all_reduce_i64(int64_t value, ReduceOp op) const;
  double all_reduce_f64(double value, ReduceOp op) const;
  // In place, element-wise over ranks: one call for a whole set of metrics.
  void all_reduce_i64(std::span<int64_t> values, ReduceOp op) const;
  void all_reduce_f64(std::span<double> values, ReduceOp op) const;
  // Returns (size) values: entry r is rank r's value.
  std::vector<int64_t> all_gather_i64(int64_t value) const;
  // values: the same length L on every rank (checked). Returns (size*L)
  // values, rank-major: entries [r*L, (r+1)*L) are rank r's.
  std::vector<int64_t> all_gather_i64(const std::vector<int64_t>& values) const;

 private:
  struct Impl;  // the MPI and NCCL communicators; src/parallel/comm_impl.h
  friend struct CommNative;  // mpi_handle.cpp: the MPI_Comm for parallel HDF5 (mpi_handle.h)
  friend struct NcclPath;    // nccl_path.cpp: the device collectives
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 0;
  int64_t max_chunk_ = kDefaultMaxChunk;

  explicit Comm(std::unique_ptr<Impl> impl, int64_t max_chunk);
  void check_valid(const char* what) const;
};

}  // namespace dapo::parallel
