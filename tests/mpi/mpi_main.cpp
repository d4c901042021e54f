// main() of test_mpi, run as `mpirun -np 2|4 test_mpi`: MPI up first, then
// GoogleTest on every rank. Rank 0 keeps the usual printer; the other ranks
// print only their failures, tagged with the rank, so a failure seen on one
// rank only is never hidden. Every rank exits with the worst result of all.
#include <gtest/gtest.h>

#include <cstdio>

#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  dapo::parallel::Runtime runtime(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  // The default death-test style re-executes this binary, which would start a
  // second MPI process with this rank's identity; forking (and never touching
  // MPI in the child) is safe.
  GTEST_FLAG_SET(death_test_style, "fast");
  const int rank = runtime.world_rank();
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  // Every test skipped on every rank (the NCCL tests without GPUs): exit
  // code 77, which CTest's SKIP_RETURN_CODE reports as skipped, not passed.
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  const bool all_skipped = u.successful_test_count() == 0 && u.failed_test_count() == 0 && u.skipped_test_count() > 0;
  int64_t worst = 0, skipped_everywhere = 0;
  {
    const auto world = dapo::parallel::Comm::world();
    worst = world.all_reduce_i64(rc, dapo::parallel::ReduceOp::max);
    skipped_everywhere = world.all_reduce_i64(all_skipped ? 1 : 0, dapo::parallel::ReduceOp::min);
  }
  if (rank == 0 && rc == 0 && worst != 0)
    std::fprintf(stderr, "test_mpi: tests failed on other ranks (see the [rank N] lines)\n");
  if (worst == 0 && skipped_everywhere) return 77;
  return int(worst);
}
