// The tp x dp rank grid; see grid.h.
#include "dapo/parallel/grid.h"

#include "dapo/parallel/mpi_check.h"
#include "dapo/parallel/mpi_handle.h"

namespace dapo::parallel {

Grid make_grid(const Comm& world, int tp) {
  DAPO_CHECK(world.valid(), "make_grid on an empty Comm");
  const int n = world.size();
  if (tp < 1 || n % tp != 0)
    throw UserError(cat("parallel.tp = ", tp, " does not divide the world size ", n,
                        " (world = tp x dp; tp must be >= 1 and a divisor of ", n, ")"));
  Grid g;
  g.tp_size = tp;
  g.dp_size = n / tp;
  g.tp_rank = world.rank() % tp;
  g.dp_rank = world.rank() / tp;
  g.world = world.dup();
  // The rank among the ranks sharing this node's memory: which GPU it takes.
  MPI_Comm local;
  DAPO_MPI_CHECK(MPI_Comm_split_type(mpi_comm_of(g.world), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &local));
  DAPO_MPI_CHECK(MPI_Comm_rank(local, &g.local_rank));
  DAPO_MPI_CHECK(MPI_Comm_free(&local));
  // Keys are world ranks, so ranks inside each group keep world order.
  g.tp = g.world.split(g.dp_rank, world.rank());
  g.dp = g.world.split(g.tp_rank, world.rank());
  DAPO_CHECK(g.tp.size() == g.tp_size && g.tp.rank() == g.tp_rank, "tp group: rank ", g.tp.rank(),
             " of ", g.tp.size(), ", expected ", g.tp_rank, " of ", g.tp_size);
  DAPO_CHECK(g.dp.size() == g.dp_size && g.dp.rank() == g.dp_rank, "dp group: rank ", g.dp.rank(),
             " of ", g.dp.size(), ", expected ", g.dp_rank, " of ", g.dp_size);
  return g;
}

Grid make_grid(int tp) { return make_grid(Comm::world(), tp); }

void init_device_comms(const Grid& grid) {
  grid.world.init_nccl();
  grid.tp.init_nccl();
  grid.dp.init_nccl();
}

}  // namespace dapo::parallel
