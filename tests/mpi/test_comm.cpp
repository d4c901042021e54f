// Comm collectives against values every rank can compute alone: each rank
// contributes value_of(dtype, rank, index), so the expected result of any
// collective is a fold over ranks written here. Run with the default chunk
// and with tiny ones (3, 1 elements), which force the split-message paths.
#include "dapo/parallel/comm.h"

#include <algorithm>
#include <string>

#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

using parallel::Comm;
using parallel::ReduceOp;
using test::Buf;
using test::value_of;

constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};

double fold(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::sum: return a + b;
    case ReduceOp::max: return std::max(a, b);
    case ReduceOp::min: return std::min(a, b);
  }
  return 0;
}

// Reduction over ranks of value_of(t, r, i).
double reduced(DType t, ReduceOp op, int nranks, int64_t i) {
  double acc = value_of(t, 0, i);
  for (int r = 1; r < nranks; ++r) acc = fold(op, acc, value_of(t, r, i));
  return acc;
}

std::string chunk_name(const testing::TestParamInfo<int64_t>& info) {
  return info.param == Comm::kDefaultMaxChunk ? std::string("DefaultChunk")
                                              : "Chunk" + std::to_string(info.param);
}

class CommTest : public testing::TestWithParam<int64_t> {
 protected:
  Comm comm = Comm::world(GetParam());
  const int rank = comm.rank();
  const int size = comm.size();
};

TEST_P(CommTest, AllReduceEveryDtypeAndOp) {
  for (DType t : test::kAllDtypes) {
    for (ReduceOp op : kAllOps) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + parallel::reduce_op_name(op));
      Buf buf(t, 15);
      for (int64_t i = 0; i < 15; ++i) buf.set(i, value_of(t, rank, i));
      comm.all_reduce(buf.view({3, 5}), op);
      for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(buf.get(i), reduced(t, op, size, i)) << "index " << i;
    }
  }
  Buf empty(DType::f32, 0);
  comm.all_reduce(empty.view({0, 4}), ReduceOp::sum);
}

TEST_P(CommTest, AllGatherEveryDtype) {
  const int64_t rows = 3, cols = 2, n = rows * cols;
  for (DType t : test::kAllDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Buf in(t, n), out(t, size * n);
    for (int64_t i = 0; i < n; ++i) in.set(i, value_of(t, rank, i));
    comm.all_gather(out.view({size * rows, cols}), in.view({rows, cols}));
    for (int r = 0; r < size; ++r)
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out.get(r * n + i), value_of(t, r, i)) << "rank " << r;
  }
  Buf e_in(DType::i64, 0), e_out(DType::i64, 0);
  comm.all_gather(e_out.view({0, 7}), e_in.view({0, 7}));
}

TEST_P(CommTest, AllGatherInPlace) {
  const int64_t rows = 5, n = rows;
  Buf out(DType::f32, size * n);
  for (int64_t k = 0; k < size * n; ++k) out.set(k, -99);
  for (int64_t i = 0; i < n; ++i) out.set(rank * n + i, value_of(DType::f32, rank, i));
  Tensor all = out.view({size * rows});
  comm.all_gather(all, all.slice_rows(rank * rows, (rank + 1) * rows));
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out.get(r * n + i), value_of(DType::f32, r, i));
}

TEST_P(CommTest, ReduceScatterEveryDtypeAndOp) {
  const int64_t rows = 3, cols = 3, m = rows * cols;  // per-rank block of m elements
  for (DType t : test::kAllDtypes) {
    for (ReduceOp op : kAllOps) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + parallel::reduce_op_name(op));
      Buf in(t, size * m), out(t, m);
      for (int64_t k = 0; k < size * m; ++k) in.set(k, value_of(t, rank, k));
      comm.reduce_scatter(out.view({rows, cols}), in.view({size * rows, cols}), op);
      for (int64_t i = 0; i < m; ++i)
        EXPECT_EQ(out.get(i), reduced(t, op, size, rank * m + i)) << "index " << i;
    }
  }
  Buf e_in(DType::bf16, 0), e_out(DType::bf16, 0);
  comm.reduce_scatter(e_out.view({0}), e_in.view({0}), ReduceOp::sum);
}

// out = this rank's own block of in (the sharded optimizer's gradient
// buckets): the block gets the reduction, the other blocks keep this
// rank's input.
TEST_P(CommTest, ReduceScatterInPlace) {
  const int64_t m = 5;
  Buf in(DType::f32, size * m);
  for (int64_t k = 0; k < size * m; ++k) in.set(k, value_of(DType::f32, rank, k));
  Tensor all = in.view({size * m});
  comm.reduce_scatter(all.slice_rows(rank * m, (rank + 1) * m), all, ReduceOp::sum);
  for (int64_t k = 0; k < size * m; ++k)
    EXPECT_EQ(in.get(k), k / m == rank ? reduced(DType::f32, ReduceOp::sum, size, k) : value_of(DType::f32, rank, k))
        << "index " << k;
}

TEST_P(CommTest, BroadcastEveryDtypeFromEveryRoot) {
  for (DType t : test::kAllDtypes) {
    for (int root = 0; root < size; ++root) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " root " + std::to_string(root));
      Buf buf(t, 7);
      for (int64_t i = 0; i < 7; ++i) buf.set(i, value_of(t, rank, i));
      comm.broadcast(buf.view({7}), root);
      for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(buf.get(i), value_of(t, root, i)) << "index " << i;
    }
  }
}

std::byte payload_byte(int from, int to, int64_t k) { return std::byte((from * 31 + to * 7 + k * 13) & 0xff); }

// Sends len(from, to) bytes from every rank to every rank and checks what arrived.
template <class Len>
void check_all_to_all_v(const Comm& comm, Len len) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<std::vector<std::byte>> send(size);
  for (int d = 0; d < size; ++d)
    for (int64_t k = 0; k < len(rank, d); ++k) send[d].push_back(payload_byte(rank, d, k));
  std::vector<int64_t> sizes;
  const std::vector<std::byte> got = comm.all_to_all_v(send, &sizes);
  ASSERT_EQ(int(sizes.size()), size);
  int64_t off = 0;
  for (int s = 0; s < size; ++s) {
    EXPECT_EQ(sizes[s], len(s, rank)) << "from rank " << s;
    for (int64_t k = 0; k < len(s, rank) && off + k < int64_t(got.size()); ++k)
      EXPECT_EQ(got[off + k], payload_byte(s, rank, k)) << "from rank " << s << " byte " << k;
    off += len(s, rank);
  }
  EXPECT_EQ(int64_t(got.size()), off);
}

TEST_P(CommTest, AllToAllVUnevenAndEmptyPayloads) {
  // Uneven, with empty entries (including this rank's own for some ranks).
  check_all_to_all_v(comm, [](int s, int d) -> int64_t { return (s * 3 + d * 5) % 7 + ((s + d) % 2) * 11; });
  // Only one pair talks; everyone else sends nothing.
  const int last = size - 1;
  check_all_to_all_v(comm, [last](int s, int d) -> int64_t { return s == 0 && d == last ? 10 : 0; });
  // Nothing at all.
  check_all_to_all_v(comm, [](int, int) -> int64_t { return 0; });
  // received_sizes is optional.
  std::vector<std::vector<std::byte>> send(size, std::vector<std::byte>(2, std::byte{7}));
  EXPECT_EQ(int64_t(comm.all_to_all_v(send).size()), 2 * size);
}

TEST_P(CommTest, ControlPlaneScalars) {
  const int64_t big = int64_t(1) << 40;  // beyond int32
  EXPECT_EQ(comm.all_reduce_i64(big * (rank + 1), ReduceOp::sum), big * size * (size + 1) / 2);
  EXPECT_EQ(comm.all_reduce_i64(rank == 0 ? 5 : -rank, ReduceOp::max), 5);
  EXPECT_EQ(comm.all_reduce_i64(rank == 0 ? 5 : -rank, ReduceOp::min), size == 1 ? 5 : -(size - 1));
  EXPECT_EQ(comm.all_reduce_f64(0.5 * (rank + 1), ReduceOp::sum), 0.25 * size * (size + 1));
  EXPECT_EQ(comm.all_reduce_f64(rank == 1 ? 2.5 : -0.5 * rank, ReduceOp::max), size > 1 ? 2.5 : 0.0);
  EXPECT_EQ(comm.all_reduce_f64(-1.25 * rank, ReduceOp::min), -1.25 * (size - 1));

  std::vector<int64_t> v = {rank, -rank, 2 * rank + 1, big + rank, 3};
  comm.all_reduce_i64(v, ReduceOp::sum);
  const int64_t s = int64_t(size) * (size - 1) / 2;
  EXPECT_EQ(v, (std::vector<int64_t>{s, -s, 2 * s + size, big * size + s, 3 * size}));
  std::vector<double> d = {0.5 * rank, -0.5 * rank, 1.0};
  comm.all_reduce_f64(d, ReduceOp::max);
  EXPECT_EQ(d, (std::vector<double>{0.5 * (size - 1), 0.0, 1.0}));
  comm.all_reduce_f64(std::span<double>(), ReduceOp::min);

  // (No ASSERTs before a collective: a rank that returned early would leave the others waiting.)
  std::vector<int64_t> want_g, want_gv;
  for (int r = 0; r < size; ++r) {
    want_g.push_back(int64_t(r) * r + 3);
    for (int64_t x : {int64_t(r), 100 + int64_t(r), big + r, -int64_t(r), int64_t(9)}) want_gv.push_back(x);
  }
  EXPECT_EQ(comm.all_gather_i64(int64_t(rank) * rank + 3), want_g);
  EXPECT_EQ(comm.all_gather_i64(std::vector<int64_t>{rank, 100 + rank, big + rank, -rank, 9}), want_gv);
  EXPECT_TRUE(comm.all_gather_i64(std::vector<int64_t>{}).empty());
  comm.barrier();
}

INSTANTIATE_TEST_SUITE_P(Chunks, CommTest, testing::Values(Comm::kDefaultMaxChunk, int64_t(3), int64_t(1)),
                         chunk_name);

TEST(Comm, WorldRanksAreDistinctAndComplete) {
  const Comm world = Comm::world();
  EXPECT_TRUE(world.valid());
  std::vector<int64_t> all(world.size());
  for (int r = 0; r < world.size(); ++r) all[r] = r;
  EXPECT_EQ(world.all_gather_i64(world.rank()), all);
  EXPECT_EQ(world.max_chunk(), Comm::kDefaultMaxChunk);
}

TEST(Comm, SplitGroupsByColorAndOrdersByKey) {
  Comm world = Comm::world();
  world.set_max_chunk(2);
  const int w = world.rank(), n = world.size();
  const Comm parity = world.split(w % 2, w);
  EXPECT_EQ(parity.max_chunk(), 2);  // inherited
  EXPECT_EQ(parity.size(), (n - w % 2 + 1) / 2);
  EXPECT_EQ(parity.rank(), w / 2);
  const std::vector<int64_t> members = parity.all_gather_i64(w);
  for (int j = 0; j < parity.size(); ++j) EXPECT_EQ(members[j], w % 2 + 2 * j);
  EXPECT_EQ(parity.all_reduce_i64(w, ReduceOp::sum), [&] {
    int64_t s = 0;
    for (int j = w % 2; j < n; j += 2) s += j;
    return s;
  }());

  const Comm reversed = world.split(0, -w);
  EXPECT_EQ(reversed.size(), n);
  EXPECT_EQ(reversed.rank(), n - 1 - w);

  const Comm copy = parity.dup();
  EXPECT_EQ(copy.rank(), parity.rank());
  EXPECT_EQ(copy.size(), parity.size());
  EXPECT_EQ(copy.all_gather_i64(w), members);
}

TEST(Comm, MoveKeepsTheCommunicator) {
  const Comm world = Comm::world();
  Comm a = world.dup();
  Comm b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.rank(), world.rank());
  Comm c = world.split(0, world.rank());
  c = std::move(b);  // frees c's own communicator
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(c.all_reduce_i64(1, ReduceOp::sum), world.size());
  Comm empty;
  EXPECT_FALSE(empty.valid());
}

// bf16 sums are combined in f32 and rounded to nearest even once per pair:
// 1 + 3*2^-8 lies halfway between bf16 neighbours 1+2^-7 and 1+2^-6 and
// rounds to the even one, 1+2^-6; truncation would give 1+2^-7.
TEST(Comm, Bf16SumRoundsToNearestEven) {
  const Comm world = Comm::world();
  const Comm pair = world.split(world.rank() / 2, world.rank());
  if (pair.size() != 2) GTEST_SKIP() << "odd rank without a partner";
  bf16 x = to_bf16(pair.rank() == 0 ? 1.0f : 3.0f / 256.0f);
  pair.all_reduce(tensor_bf16(&x, {1}), ReduceOp::sum);
  EXPECT_EQ(to_f32(x), 1.0f + 1.0f / 64.0f);
}

// Argument errors end the job. Checked on rank 0 only (they involve no
// other rank, and each forked child makes gtest warn about MPI's threads),
// in a forked child with the MPI_Abort hook removed: no MPI call happens
// before the check, so the child just exits.
TEST(CommDeathTest, ArgumentErrorsAreFatal) {
  const Comm world = Comm::world();
  if (world.rank() != 0) return;
  const int n = world.size();
  std::vector<float> a(64), b(64);
  std::vector<int32_t> ia(64);
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([&] { world.all_gather(tensor_f32(a.data(), {n * 2 + 1, 2}), tensor_f32(b.data(), {2, 2})); }),
               "all_gather: out .* must be in");
  EXPECT_DEATH(die([&] { world.all_gather(tensor_f32(a.data(), {n * 2, 2}), tensor_i32(ia.data(), {2, 2})); }),
               "out is f32, in is i32");
  EXPECT_DEATH(die([&] { world.reduce_scatter(tensor_f32(a.data() + 1, {2}), tensor_f32(a.data(), {2 * n}), ReduceOp::sum); }),
               "overlap");
  // (A device tensor goes to NCCL, which a forked child must not start:
  // only the check before it is exercised here.)
  EXPECT_DEATH(die([&] {
                 world.all_gather(Tensor(a.data(), DType::f32, {n * 2, 2}, Device::cuda), tensor_f32(b.data(), {2, 2}));
               }),
               "out and in on different devices");
}

}  // namespace
}  // namespace dapo
