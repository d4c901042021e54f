// The tp x dp grid: rank assignment (tp innermost) and the membership of
// each group for every tp the world size allows, and the error on a tp
// that does not divide it.
#include "dapo/parallel/grid.h"

#include <string>

#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

using parallel::Comm;
using parallel::Grid;
using parallel::make_grid;

// Checks g against the layout w = dp_rank * tp + tp_rank on `world`.
void check_grid(const Grid& g, const Comm& world, int tp) {
  const int w = world.rank(), n = world.size();
  EXPECT_EQ(g.world_rank(), w);
  EXPECT_EQ(g.world_size(), n);
  EXPECT_EQ(g.tp_size, tp);
  EXPECT_EQ(g.dp_size, n / tp);
  EXPECT_EQ(g.tp_rank, w % tp);
  EXPECT_EQ(g.dp_rank, w / tp);
  EXPECT_EQ(g.tp.size(), tp);
  EXPECT_EQ(g.tp.rank(), g.tp_rank);
  EXPECT_EQ(g.dp.size(), n / tp);
  EXPECT_EQ(g.dp.rank(), g.dp_rank);
  // Members, in group-rank order, named by their rank in `world`.
  std::vector<int64_t> tp_members, dp_members;
  for (int j = 0; j < tp; ++j) tp_members.push_back(w / tp * tp + j);
  for (int j = 0; j < n / tp; ++j) dp_members.push_back(j * tp + w % tp);
  EXPECT_EQ(g.tp.all_gather_i64(w), tp_members);
  EXPECT_EQ(g.dp.all_gather_i64(w), dp_members);
  // The grid's world is its own communicator, in the same rank order.
  EXPECT_EQ(g.world.all_gather_i64(w), world.all_gather_i64(w));
}

TEST(Grid, RankAssignmentForEveryDividingTp) {
  const Comm world = Comm::world();
  for (int tp : {1, 2, 4, world.size()}) {
    if (world.size() % tp != 0) continue;
    SCOPED_TRACE("tp " + std::to_string(tp));
    check_grid(make_grid(tp), world, tp);
  }
}

TEST(Grid, OnASubCommunicator) {
  const Comm world = Comm::world();
  const Comm half = world.split(world.rank() < world.size() / 2 ? 0 : 1, world.rank());
  for (int tp : test::tp_choices(half.size())) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    check_grid(make_grid(half, tp), half, tp);
  }
}

TEST(Grid, TpThatDoesNotDivideTheWorldIsAUserError) {
  const Comm world = Comm::world();
  const int n = world.size();
  for (int tp : {0, -2, 3, n + 1, 2 * n}) {
    if (tp >= 1 && n % tp == 0) continue;
    SCOPED_TRACE("tp " + std::to_string(tp));
    try {
      make_grid(world, tp);
      ADD_FAILURE() << "make_grid accepted tp " << tp << " on " << n << " ranks";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("parallel.tp"), std::string::npos) << msg;
      EXPECT_NE(msg.find("world size " + std::to_string(n)), std::string::npos) << msg;
    }
  }
  // Nothing was left half-made: the world still works.
  EXPECT_EQ(world.all_reduce_i64(1, parallel::ReduceOp::sum), n);
}

}  // namespace
}  // namespace dapo
