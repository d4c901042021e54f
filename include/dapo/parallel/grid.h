// The rank grid: world = tp x dp with tp innermost, so the tp ranks of a
// group are neighbours (one node, NVLink) and dp spans nodes. World rank w
// has tp_rank = w % tp and dp_rank = w / tp; its tp group is the ranks with
// the same dp_rank, its dp group the ranks with the same tp_rank.
#pragma once

#include "dapo/parallel/comm.h"

namespace dapo::parallel {

struct Grid {
  Comm world;  // all ranks (a dup: the grid's traffic never mixes with other users of MPI_COMM_WORLD)
  Comm tp;     // tp_size ranks, rank in it == tp_rank
  Comm dp;     // dp_size ranks, rank in it == dp_rank
  int tp_size = 1;
  int dp_size = 1;
  int tp_rank = 0;
  int dp_rank = 0;
  int local_rank = 0;  // among the ranks of this node (the GPU it drives)

  int world_rank() const { return world.rank(); }
  int world_size() const { return world.size(); }
};

// Splits `world` (collective over it) into the tp x dp grid. tp < 1 or a
// world size that tp does not divide throws UserError naming `parallel.tp`
// (on every rank alike, so no rank is left waiting in a split).
Grid make_grid(const Comm& world, int tp);
// The same on a dup of MPI_COMM_WORLD.
Grid make_grid(int tp);
// The NCCL communicators of world, tp and dp, made now (collective over the
// world; every rank's GPU bound): the CUDA backend's start-up.
void init_device_comms(const Grid& grid);

}  // namespace dapo::parallel
