// Rollout dumps under mpirun -np 2 / 4: every rank writes its own groups
// (uneven counts, some ranks with none at all, as tp ranks > 0 are), the
// file holds every rank's rows in rank order, and every rank reading it
// back alone gets exactly what was written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "dapo/dump/inspect.h"
#include "dapo/dump/rollout_dump.h"
#include "dump/dump_test_util.h"

namespace dapo::dump {
namespace {

namespace fs = std::filesystem;
using parallel::Comm;

// A directory every rank sees (same host), made and removed by rank 0.
class SharedDumpDir {
 public:
  explicit SharedDumpDir(const Comm& comm) : comm_(comm) {
    const int64_t pid = comm.all_gather_i64(int64_t(::getpid()))[0];
    path_ = fs::temp_directory_path() / ("dapo_mpi_dump_" + std::to_string(pid));
    if (comm.rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    comm.barrier();
  }
  ~SharedDumpDir() {
    comm_.barrier();
    std::error_code ec;
    if (comm_.rank() == 0) fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  const Comm& comm_;
  fs::path path_;
};

// Rank r's groups: uneven, and rank 1 (and rank 3 of 4) hold nothing.
struct RankGroups {
  std::vector<rl::GroupData> trained, dropped;
  std::vector<rl::GroupOutcome> trained_outcomes, dropped_outcomes;
};

RankGroups groups_of(int rank) {
  RankGroups g;
  if (rank % 2 == 1) return g;
  const int trained = rank == 0 ? 3 : 1, dropped = rank == 0 ? 1 : 4;
  for (int i = 0; i < trained; ++i) {
    g.trained.push_back(test::make_dump_group(rank * 10 + i, true));
    g.trained_outcomes.push_back(rl::GroupOutcome::mixed);
  }
  for (int i = 0; i < dropped; ++i) {
    g.dropped.push_back(test::make_dump_group(rank * 10 + 5 + i, false));
    g.dropped_outcomes.push_back(test::outcome_of(g.dropped.back()));
  }
  return g;
}

void expect_file_holds_every_rank(const RolloutDump& d, int world_size) {
  EXPECT_EQ(d.world_size, world_size);
  size_t at = 0;
  for (int r = 0; r < world_size; ++r) {
    const RankGroups want = groups_of(r);
    for (size_t i = 0; i < want.trained.size() + want.dropped.size(); ++i, ++at) {
      ASSERT_LT(at, d.groups.size());
      const bool trained = i < want.trained.size();
      const size_t j = trained ? i : i - want.trained.size();
      test::expect_group_eq(d.groups[at].group, trained ? want.trained[j] : want.dropped[j],
                            "rank " + std::to_string(r) + " group " + std::to_string(i));
      EXPECT_EQ(d.groups[at].trained, trained);
      EXPECT_EQ(d.groups[at].outcome, trained ? want.trained_outcomes[j] : want.dropped_outcomes[j]);
    }
  }
  EXPECT_EQ(at, d.groups.size());
}

TEST(DumpMpi, EveryRankWritesItsGroupsAndEveryRankReadsThemAllBack) {
  const Comm world = Comm::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const SharedDumpDir dir(world);
  const RankGroups mine = groups_of(world.rank());
  DumpInfo info;
  info.step = 40;
  info.config_ini = "[dump]\nevery = 20\n";
  info.n = 4;
  info.max_response_length = 5;
  const std::string path = dir.file("step_00000040.h5");
  write_rollout_dump(path, world, mine.trained, mine.trained_outcomes, mine.dropped, mine.dropped_outcomes, info);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
  const RolloutDump d = read_rollout_dump(path);  // every rank alone, at once
  EXPECT_EQ(d.info.step, 40);
  EXPECT_EQ(d.info.config_ini, info.config_ini);
  expect_file_holds_every_rank(d, world.size());
  // The summary does not depend on which rank reads it.
  const std::string summary = dump_summary(d);
  const std::vector<int64_t> lengths = world.all_gather_i64(int64_t(summary.size()));
  for (const int64_t n : lengths) EXPECT_EQ(n, int64_t(summary.size()));
  world.barrier();  // nobody removes the directory while another rank reads
}

TEST(DumpMpi, TinyChunksSharedBetweenRanks) {
  const Comm world = Comm::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const SharedDumpDir dir(world);
  const RankGroups mine = groups_of(world.rank());
  std::vector<DumpGroup> rows;
  for (size_t i = 0; i < mine.trained.size(); ++i) rows.push_back({&mine.trained[i], mine.trained_outcomes[i], true});
  for (size_t i = 0; i < mine.dropped.size(); ++i) rows.push_back({&mine.dropped[i], mine.dropped_outcomes[i], false});
  io::DatasetOptions tiny;
  tiny.chunk_bytes = 16;  // chunks straddle the ranks' blocks
  tiny.fletcher32 = true;
  const std::string path = dir.file("tiny.h5");
  write_rollout_dump(path, world, rows, DumpInfo{}, tiny);
  expect_file_holds_every_rank(read_rollout_dump(path), world.size());
  world.barrier();
}

TEST(DumpMpi, NoRankHoldsAnything) {
  const Comm world = Comm::world();
  const SharedDumpDir dir(world);
  const std::string path = dir.file("empty.h5");
  write_rollout_dump(path, world, std::span<const DumpGroup>(), DumpInfo{});
  const RolloutDump d = read_rollout_dump(path);
  EXPECT_TRUE(d.groups.empty());
  EXPECT_EQ(d.world_size, world.size());
  world.barrier();
}

}  // namespace
}  // namespace dapo::dump
