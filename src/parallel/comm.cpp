// Comm over MPI (host buffers); see comm.h. Messages longer than max_chunk
// elements are split into several MPI calls because MPI counts are int.
#include "dapo/parallel/comm.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm_impl.h"
#include "dapo/parallel/mpi_check.h"

namespace dapo::parallel {

namespace {

bool mpi_live() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return MPI_UINT16_T;  // moved as raw bits; reduced by the ops below
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  DAPO_FAIL("bad dtype ", int(t));
}

// bf16 reductions: combine in f32, round once per combination.
template <class F>
void bf16_combine(void* in, void* inout, int* len, F f) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(f(to_f32(a[i]), to_f32(b[i])));
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_combine(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_combine(in, inout, len, [](float x, float y) { return x > y ? x : y; });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_combine(in, inout, len, [](float x, float y) { return x < y ? x : y; });
}

struct Bf16Ops {
  MPI_Op sum, max, min;
};
// Made on first use (MPI must be up); MPI_Finalize releases them.
const Bf16Ops& bf16_ops() {
  static const Bf16Ops ops = [] {
    Bf16Ops o{};
    DAPO_MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &o.sum));
    DAPO_MPI_CHECK(MPI_Op_create(&bf16_max, 1, &o.max));
    DAPO_MPI_CHECK(MPI_Op_create(&bf16_min, 1, &o.min));
    return o;
  }();
  return ops;
}

MPI_Op mpi_op(ReduceOp op, bool is_bf16) {
  if (is_bf16) {
    const Bf16Ops& b = bf16_ops();
    switch (op) {
      case ReduceOp::sum: return b.sum;
      case ReduceOp::max: return b.max;
      case ReduceOp::min: return b.min;
    }
  }
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  DAPO_FAIL("bad reduce op ", int(op));
}

// Same dtype, same dims except dim 0, where a has `factor` times b's rows.
bool rows_times(const Tensor& a, const Tensor& b, int64_t factor) {
  if (a.ndim != b.ndim || a.ndim < 1 || a.shape[0] != factor * b.shape[0]) return false;
  for (int i = 1; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

char* at(void* p, int64_t elements, size_t es) { return static_cast<char*>(p) + size_t(elements) * es; }

// Chunked primitives on raw buffers of n elements of `type` (es bytes each).

void all_reduce_raw(MPI_Comm comm, void* buf, int64_t n, MPI_Datatype type, size_t es, MPI_Op op,
                    int64_t chunk) {
  for (int64_t off = 0; off < n; off += chunk) {
    const int len = int(std::min(chunk, n - off));
    DAPO_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, at(buf, off, es), len, type, op, comm));
  }
}

// out: size*n elements, rank-major; in_place: this rank's block is already there.
void all_gather_raw(MPI_Comm comm, void* out, const void* in, int64_t n, MPI_Datatype type,
                    size_t es, bool in_place, int64_t chunk) {
  if (n <= chunk) {
    DAPO_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in, int(n), type, out, int(n), type, comm));
    return;
  }
  // One gather per chunk: rank r's piece lands at r*n + off, so the receive
  // type is `len` elements stretched to an extent of n elements.
  for (int64_t off = 0; off < n; off += chunk) {
    const int len = int(std::min(chunk, n - off));
    MPI_Datatype piece, block;
    DAPO_MPI_CHECK(MPI_Type_contiguous(len, type, &piece));
    DAPO_MPI_CHECK(MPI_Type_create_resized(piece, 0, MPI_Aint(n) * MPI_Aint(es), &block));
    DAPO_MPI_CHECK(MPI_Type_commit(&block));
    const void* send = in_place ? MPI_IN_PLACE : static_cast<const char*>(in) + size_t(off) * es;
    DAPO_MPI_CHECK(MPI_Allgather(send, len, type, at(out, off, es), 1, block, comm));
    DAPO_MPI_CHECK(MPI_Type_free(&block));
    DAPO_MPI_CHECK(MPI_Type_free(&piece));
  }
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

// ---- lifetime -------------------------------------------------------------------

Comm::Comm() = default;

Comm::Comm(std::unique_ptr<Impl> impl, int64_t max_chunk) : impl_(std::move(impl)) {
  // Errors come back as codes so that DAPO_MPI_CHECK reports them with a location.
  DAPO_MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
  DAPO_MPI_CHECK(MPI_Comm_rank(impl_->comm, &rank_));
  DAPO_MPI_CHECK(MPI_Comm_size(impl_->comm, &size_));
  set_max_chunk(max_chunk);
}

Comm Comm::world(int64_t max_chunk) {
  DAPO_CHECK(mpi_live(), "Comm::world: MPI is not running (create the parallel::Runtime first)");
  auto impl = std::make_unique<Impl>();
  DAPO_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm));
  return Comm(std::move(impl), max_chunk);
}

Comm::~Comm() {
  if (impl_) NcclPath::destroy(*impl_);
  // After MPI_Finalize the handle is gone with MPI; freeing it would be an error.
  if (impl_ && impl_->comm != MPI_COMM_NULL && mpi_live()) DAPO_MPI_CHECK(MPI_Comm_free(&impl_->comm));
}

std::string Comm::nccl_async_error() const { return impl_ ? NcclPath::async_error(*this) : std::string(); }

void Comm::init_nccl() const {
  check_valid("init_nccl");
  NcclPath::init(*this);
}

Comm::Comm(Comm&& o) noexcept
    : impl_(std::move(o.impl_)), rank_(o.rank_), size_(o.size_), max_chunk_(o.max_chunk_) {
  o.rank_ = 0;
  o.size_ = 0;
}

Comm& Comm::operator=(Comm&& o) noexcept {
  if (this != &o) {
    Comm old(std::move(*this));  // frees our communicator at the end of this scope
    impl_ = std::move(o.impl_);
    rank_ = o.rank_;
    size_ = o.size_;
    max_chunk_ = o.max_chunk_;
    o.rank_ = 0;
    o.size_ = 0;
  }
  return *this;
}

void Comm::check_valid(const char* what) const {
  DAPO_CHECK(impl_ != nullptr, "Comm::", what, " on an empty (default-constructed or moved-from) Comm");
}

Comm Comm::split(int color, int key) const {
  check_valid("split");
  DAPO_CHECK(color >= 0, "Comm::split: color ", color, " (must be >= 0)");
  auto impl = std::make_unique<Impl>();
  DAPO_MPI_CHECK(MPI_Comm_split(impl_->comm, color, key, &impl->comm));
  return Comm(std::move(impl), max_chunk_);
}

Comm Comm::dup() const {
  check_valid("dup");
  auto impl = std::make_unique<Impl>();
  DAPO_MPI_CHECK(MPI_Comm_dup(impl_->comm, &impl->comm));
  return Comm(std::move(impl), max_chunk_);
}

void Comm::set_max_chunk(int64_t elements) {
  DAPO_CHECK(elements >= 1 && elements <= INT_MAX, "Comm max_chunk ", elements,
             " (must be in [1, INT_MAX])");
  max_chunk_ = elements;
}

// ---- data plane ---------------------------------------------------------------

void Comm::all_reduce(Tensor buf, ReduceOp op, void* stream) const {
  check_valid("all_reduce");
  if (buf.device == Device::cuda) return NcclPath::all_reduce(*this, buf, op, stream);
  check_buffer(buf, Device::cpu, "all_reduce");
  all_reduce_raw(impl_->comm, buf.data, buf.numel(), mpi_type(buf.dtype), dtype_size(buf.dtype),
                 mpi_op(op, buf.dtype == DType::bf16), max_chunk_);
}

void Comm::all_gather(Tensor out, Tensor in, void* stream) const {
  check_valid("all_gather");
  DAPO_CHECK(out.device == in.device, "Comm::all_gather: out and in on different devices");
  DAPO_CHECK(out.dtype == in.dtype, "Comm::all_gather: out is ", dtype_name(out.dtype), ", in is ",
             dtype_name(in.dtype));
  DAPO_CHECK(rows_times(out, in, size_), "Comm::all_gather: out ", out.shape_string(), " must be in ",
             in.shape_string(), " with ", size_, "x the rows");
  if (in.device == Device::cuda) return NcclPath::all_gather(*this, out, in, stream);
  check_buffer(out, Device::cpu, "all_gather");
  check_buffer(in, Device::cpu, "all_gather");
  const size_t es = dtype_size(in.dtype);
  const int64_t n = in.numel();
  const void* own_block = at(out.data, int64_t(rank_) * n, es);
  const bool in_place = n > 0 && in.data == own_block;
  DAPO_CHECK(in_place || !overlaps(out, in),
             "Comm::all_gather: in overlaps out but is not this rank's block of it");
  all_gather_raw(impl_->comm, out.data, in.data, n, mpi_type(in.dtype), es, in_place, max_chunk_);
}

void Comm::reduce_scatter(Tensor out, Tensor in, ReduceOp op, void* stream) const {
  check_valid("reduce_scatter");
  DAPO_CHECK(out.device == in.device, "Comm::reduce_scatter: out and in on different devices");
  DAPO_CHECK(out.dtype == in.dtype, "Comm::reduce_scatter: out is ", dtype_name(out.dtype),
             ", in is ", dtype_name(in.dtype));
  DAPO_CHECK(rows_times(in, out, size_), "Comm::reduce_scatter: in ", in.shape_string(),
             " must be out ", out.shape_string(), " with ", size_, "x the rows");
  const size_t es = dtype_size(in.dtype);
  const int64_t n = out.numel();
  const bool in_place = n > 0 && out.data == at(in.data, int64_t(rank_) * n, es);
  DAPO_CHECK(in_place || !overlaps(out, in), "Comm::reduce_scatter: out and in overlap (other than out being this "
             "rank's block of in)");
  // NCCL takes out == this rank's block of in as its in-place form.
  if (in.device == Device::cuda) return NcclPath::reduce_scatter(*this, out, in, op, stream);
  check_buffer(out, Device::cpu, "reduce_scatter");
  check_buffer(in, Device::cpu, "reduce_scatter");
  if (in_place) {
    // MPI's in-place reduce-scatter puts the result at the start of the
    // buffer, over rank 0's input: reduce into a copy instead.
    std::vector<std::byte> tmp(size_t(n) * es);
    Tensor t = out;
    t.data = tmp.data();
    reduce_scatter(t, in, op, stream);
    std::memcpy(out.data, tmp.data(), tmp.size());
    return;
  }
  const MPI_Datatype type = mpi_type(in.dtype);
  const MPI_Op mop = mpi_op(op, in.dtype == DType::bf16);
  if (n <= max_chunk_) {
    if (n > 0)
      DAPO_MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, int(n), type, mop, impl_->comm));
    return;
  }
  // Rank r's block is strided by n in `in`; reduce each chunk of it to r.
  for (int64_t off = 0; off < n; off += max_chunk_) {
    const int len = int(std::min(max_chunk_, n - off));
    for (int r = 0; r < size_; ++r)
      DAPO_MPI_CHECK(MPI_Reduce(at(in.data, int64_t(r) * n + off, es), at(out.data, off, es), len,
                                type, mop, r, impl_->comm));
  }
}

void Comm::broadcast(Tensor buf, int root, void* stream) const {
  check_valid("broadcast");
  DAPO_CHECK(root >= 0 && root < size_, "Comm::broadcast: root ", root, " of ", size_, " ranks");
  if (buf.device == Device::cuda) return NcclPath::broadcast(*this, buf, root, stream);
  check_buffer(buf, Device::cpu, "broadcast");
  const size_t es = dtype_size(buf.dtype);
  const int64_t n = buf.numel();
  for (int64_t off = 0; off < n; off += max_chunk_) {
    const int len = int(std::min(max_chunk_, n - off));
    DAPO_MPI_CHECK(MPI_Bcast(at(buf.data, off, es), len, mpi_type(buf.dtype), root, impl_->comm));
  }
}

std::vector<std::byte> Comm::all_to_all_v(const std::vector<std::vector<std::byte>>& to_each_rank,
                                          std::vector<int64_t>* received_sizes) const {
  check_valid("all_to_all_v");
  DAPO_CHECK(int64_t(to_each_rank.size()) == size_, "Comm::all_to_all_v: ", to_each_rank.size(),
             " payloads for ", size_, " ranks");
  std::vector<int64_t> send_sizes(size_), recv_sizes(size_);
  for (int r = 0; r < size_; ++r) send_sizes[r] = int64_t(to_each_rank[r].size());
  DAPO_MPI_CHECK(MPI_Alltoall(send_sizes.data(), 1, MPI_INT64_T, recv_sizes.data(), 1, MPI_INT64_T,
                              impl_->comm));
  std::vector<int64_t> offset(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) offset[r + 1] = offset[r] + recv_sizes[r];
  std::vector<std::byte> out(size_t(offset[size_]));
  if (recv_sizes[rank_] > 0)
    std::memcpy(out.data() + offset[rank_], to_each_rank[rank_].data(), size_t(recv_sizes[rank_]));

  // Pieces between one pair of ranks keep their order (MPI's non-overtaking
  // rule for the same source, tag and communicator), so one tag suffices;
  // collectives on this Comm never match point-to-point messages.
  constexpr int kTag = 0;
  std::vector<MPI_Request> requests;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    for (int64_t off = 0; off < recv_sizes[r]; off += max_chunk_) {
      const int len = int(std::min(max_chunk_, recv_sizes[r] - off));
      requests.emplace_back();
      DAPO_MPI_CHECK(MPI_Irecv(out.data() + offset[r] + off, len, MPI_BYTE, r, kTag, impl_->comm,
                               &requests.back()));
    }
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    for (int64_t off = 0; off < send_sizes[r]; off += max_chunk_) {
      const int len = int(std::min(max_chunk_, send_sizes[r] - off));
      requests.emplace_back();
      DAPO_MPI_CHECK(MPI_Isend(to_each_rank[r].data() + off, len, MPI_BYTE, r, kTag, impl_->comm,
                               &requests.back()));
    }
  }
  if (!requests.empty())
    DAPO_MPI_CHECK(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  if (received_sizes) *received_sizes = std::move(recv_sizes);
  return out;
}

void Comm::barrier() const {
  check_valid("barrier");
  DAPO_MPI_CHECK(MPI_Barrier(impl_->comm));
}

// ---- control plane ------------------------------------------------------------

int64_t Comm::all_reduce_i64(int64_t value, ReduceOp op) const {
  all_reduce_i64(std::span<int64_t>(&value, 1), op);
  return value;
}

double Comm::all_reduce_f64(double value, ReduceOp op) const {
  all_reduce_f64(std::span<double>(&value, 1), op);
  return value;
}

void Comm::all_reduce_i64(std::span<int64_t> values, ReduceOp op) const {
  check_valid("all_reduce_i64");
  all_reduce_raw(impl_->comm, values.data(), int64_t(values.size()), MPI_INT64_T, sizeof(int64_t),
                 mpi_op(op, false), max_chunk_);
}

void Comm::all_reduce_f64(std::span<double> values, ReduceOp op) const {
  check_valid("all_reduce_f64");
  all_reduce_raw(impl_->comm, values.data(), int64_t(values.size()), MPI_DOUBLE, sizeof(double),
                 mpi_op(op, false), max_chunk_);
}

std::vector<int64_t> Comm::all_gather_i64(int64_t value) const {
  check_valid("all_gather_i64");
  std::vector<int64_t> out(size_);
  DAPO_MPI_CHECK(MPI_Allgather(&value, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, impl_->comm));
  return out;
}

std::vector<int64_t> Comm::all_gather_i64(const std::vector<int64_t>& values) const {
  check_valid("all_gather_i64");
  const int64_t len = int64_t(values.size());
  // A length that differs between ranks would make MPI read past buffers:
  // check it first, on every rank, so all of them report it.
  int64_t bounds[2] = {len, -len};  // max of len, -min of len
  all_reduce_raw(impl_->comm, bounds, 2, MPI_INT64_T, sizeof(int64_t), MPI_MAX, max_chunk_);
  DAPO_CHECK(bounds[0] == -bounds[1], "Comm::all_gather_i64: vector lengths differ across ranks (",
             -bounds[1], " to ", bounds[0], "); this rank has ", len);
  std::vector<int64_t> out(size_t(size_) * size_t(len));
  all_gather_raw(impl_->comm, out.data(), values.data(), len, MPI_INT64_T, sizeof(int64_t), false,
                 max_chunk_);
  return out;
}

}  // namespace dapo::parallel
