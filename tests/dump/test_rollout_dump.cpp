// Rollout dumps on one rank: every field of trained and not-trained groups
// round-trips, the file has the documented layout (what h5py sees), the
// write is atomic, and bad files are UserErrors naming the file and the
// attribute or dataset. The multi-rank write is in tests/mpi/test_dump_mpi.cpp.
#include "dapo/dump/rollout_dump.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "dapo/parallel/runtime.h"
#include "dump/dump_test_util.h"
#include "io/io_test_util.h"

namespace dapo::dump {
namespace {

namespace fs = std::filesystem;
using io::H5File;
using io::Hyperslab;
using test::error_of;
using test::TempDir;

// H5File takes a Comm, a Comm needs MPI: a one-rank runtime around all tests.
class MpiEnvironment : public testing::Environment {
 public:
  void SetUp() override { runtime_ = std::make_unique<parallel::Runtime>(nullptr, nullptr); }
  void TearDown() override { runtime_.reset(); }

 private:
  std::unique_ptr<parallel::Runtime> runtime_;
};
[[maybe_unused]] testing::Environment* const kMpi = testing::AddGlobalTestEnvironment(new MpiEnvironment);

DumpInfo test_info() {
  DumpInfo info;
  info.step = 12;
  info.config_ini = "[rollout]\nn = 4\n# ü\n";
  info.n = 4;
  info.max_response_length = 5;
  return info;
}

template <class T>
std::vector<T> read_all(const H5File& f, const std::string& name) {
  const std::vector<int64_t> shape = f.dataset_shape(name);
  std::vector<T> v(size_t(shape.at(0)));
  const Hyperslab s = v.empty() ? Hyperslab::none() : Hyperslab::whole(shape);
  if constexpr (std::is_same_v<T, uint8_t>) f.read_bytes(name, s, v.data());
  else if constexpr (std::is_same_v<T, double>) f.read_f64(name, s, v.data());
  else f.read(name, s, v.data());
  return v;
}

TEST(RolloutDump, EveryFieldRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("step_00000012.h5");
  const parallel::Comm world = parallel::Comm::world();
  std::vector<rl::GroupData> trained = {test::make_dump_group(1, true), test::make_dump_group(6, true)};
  std::vector<rl::GroupData> dropped = {test::make_dump_group(3, false), test::make_dump_group(4, false),
                                        test::make_dump_group(7, false)};
  const std::vector<rl::GroupOutcome> trained_outcomes = {rl::GroupOutcome::mixed, rl::GroupOutcome::mixed};
  const std::vector<rl::GroupOutcome> dropped_outcomes = {rl::GroupOutcome::all_correct, rl::GroupOutcome::mixed,
                                                          rl::GroupOutcome::uniform_other};
  // The cases the helper is meant to cover are really there.
  ASSERT_LT(dropped[2].uid, 0);  // a uint64 uid above INT64_MAX
  ASSERT_EQ(dropped[0].num_responses(), 4);
  ASSERT_EQ(dropped[0].response_length(0), 0);  // an empty response
  write_rollout_dump(path, world, trained, trained_outcomes, dropped, dropped_outcomes, test_info());
  EXPECT_FALSE(fs::exists(path + ".partial"));

  const RolloutDump d = read_rollout_dump(path);
  EXPECT_EQ(d.path, path);
  EXPECT_EQ(d.format_version, 2);
  EXPECT_EQ(d.info.step, 12);
  EXPECT_EQ(d.info.config_ini, test_info().config_ini);
  EXPECT_EQ(d.info.n, 4);
  EXPECT_EQ(d.info.max_response_length, 5);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.finish_reason_names, (std::vector<std::string>{"eos", "length"}));
  EXPECT_EQ(d.finish_reason_name(1), "length");
  EXPECT_EQ(d.finish_reason_name(7), "7");
  ASSERT_EQ(d.groups.size(), 5u);
  int64_t responses = 0;
  for (size_t i = 0; i < 5; ++i) {
    const bool is_trained = i < 2;
    const rl::GroupData& want = is_trained ? trained[i] : dropped[i - 2];
    test::expect_group_eq(d.groups[i].group, want, "group " + std::to_string(i));
    EXPECT_EQ(d.groups[i].trained, is_trained) << i;
    EXPECT_EQ(d.groups[i].outcome, is_trained ? trained_outcomes[i] : dropped_outcomes[i - 2]) << i;
    responses += want.num_responses();
  }
  EXPECT_EQ(d.num_responses(), responses);
}

TEST(RolloutDump, FileLayoutIsWhatH5pyReads) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const parallel::Comm world = parallel::Comm::world();
  const rl::GroupData a = test::make_dump_group(2, true);   // 3 responses
  const rl::GroupData b = test::make_dump_group(5, false);  // 2 responses
  const std::vector<DumpGroup> groups = {{&a, rl::GroupOutcome::mixed, true},
                                         {&b, rl::GroupOutcome::all_wrong, false}};
  write_rollout_dump(path, world, groups, test_info());

  const H5File f = H5File::open_local(path);
  EXPECT_EQ(f.attr_string("/", "format"), "dapo-rollout-dump");
  EXPECT_EQ(f.attr_int("/", "format_version"), 2);
  EXPECT_EQ(f.attr_int("/", "step"), 12);
  EXPECT_EQ(f.attr_string("/", "config"), test_info().config_ini);
  EXPECT_EQ(f.attr_int("/", "world_size"), 1);
  EXPECT_EQ(f.attr_string("/prompts/outcome", "names"), "mixed,all_correct,all_wrong,uniform_other");
  EXPECT_EQ(f.attr_string("/responses/finish_reason", "names"), "eos,length");

  EXPECT_EQ(read_all<int64_t>(f, "/prompts/uid"), (std::vector<int64_t>{a.uid, b.uid}));
  EXPECT_EQ(read_all<int64_t>(f, "/prompts/round"), (std::vector<int64_t>{a.round, b.round}));
  EXPECT_EQ(read_all<int64_t>(f, "/prompts/position"), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(read_all<uint8_t>(f, "/prompts/trained"), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(read_all<uint8_t>(f, "/prompts/outcome"), (std::vector<uint8_t>{0, 2}));
  EXPECT_EQ(read_all<int64_t>(f, "/prompts/response_rows"), (std::vector<int64_t>{0, 3, 5}));
  std::vector<int32_t> prompt_tokens = a.prompt_ids;
  prompt_tokens.insert(prompt_tokens.end(), b.prompt_ids.begin(), b.prompt_ids.end());
  EXPECT_EQ(read_all<int32_t>(f, "/prompts/tokens"), prompt_tokens);
  EXPECT_EQ(read_all<int64_t>(f, "/prompts/tokens_offsets"),
            (std::vector<int64_t>{0, int64_t(a.prompt_ids.size()), int64_t(prompt_tokens.size())}));
  const std::vector<uint8_t> text = read_all<uint8_t>(f, "/prompts/text");
  EXPECT_EQ(std::string(text.begin(), text.end()), a.prompt_text + b.prompt_text);
  EXPECT_EQ(read_all<int64_t>(f, "/prompts/text_offsets"),
            (std::vector<int64_t>{0, int64_t(a.prompt_text.size()), int64_t(text.size())}));
  const std::vector<uint8_t> gt = read_all<uint8_t>(f, "/prompts/ground_truth");
  EXPECT_EQ(std::string(gt.begin(), gt.end()), "1435");
  const std::vector<uint8_t> ds = read_all<uint8_t>(f, "/prompts/data_source");
  EXPECT_EQ(std::string(ds.begin(), ds.end()), "arith_日本math");

  EXPECT_EQ(read_all<int64_t>(f, "/responses/prompt_index"), (std::vector<int64_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(read_all<int64_t>(f, "/responses/sample_index"), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  std::vector<int32_t> tokens = a.response_ids;
  tokens.insert(tokens.end(), b.response_ids.begin(), b.response_ids.end());
  EXPECT_EQ(read_all<int32_t>(f, "/responses/tokens"), tokens);
  std::vector<int64_t> offsets = a.response_offsets;
  for (size_t i = 1; i < b.response_offsets.size(); ++i) offsets.push_back(a.response_ids.size() + b.response_offsets[i]);
  EXPECT_EQ(read_all<int64_t>(f, "/responses/tokens_offsets"), offsets);
  std::vector<int64_t> lengths;
  for (size_t i = 1; i < offsets.size(); ++i) lengths.push_back(offsets[i] - offsets[i - 1]);
  EXPECT_EQ(read_all<int64_t>(f, "/responses/length"), lengths);
  // Old log-probs and advantages: the trained group's, NaN for the other.
  const std::vector<float> lp = read_all<float>(f, "/responses/old_logprob");
  ASSERT_EQ(lp.size(), tokens.size());
  for (size_t t = 0; t < lp.size(); ++t) {
    if (t < a.old_logprobs.size()) EXPECT_EQ(lp[t], a.old_logprobs[t]) << t;
    else EXPECT_TRUE(std::isnan(lp[t])) << t;
  }
  const std::vector<double> adv = read_all<double>(f, "/responses/advantage");
  ASSERT_EQ(adv.size(), 5u);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(adv[r], a.advantage[r]);
  EXPECT_TRUE(std::isnan(adv[3]) && std::isnan(adv[4]));
  std::vector<double> score = a.score, reward = a.reward, acc = a.acc;
  score.insert(score.end(), b.score.begin(), b.score.end());
  reward.insert(reward.end(), b.reward.begin(), b.reward.end());
  acc.insert(acc.end(), b.acc.begin(), b.acc.end());
  EXPECT_EQ(read_all<double>(f, "/responses/score"), score);
  EXPECT_EQ(read_all<double>(f, "/responses/reward"), reward);  // float64: exact
  EXPECT_EQ(read_all<double>(f, "/responses/acc"), acc);
  std::vector<uint8_t> finish = a.finish_reason, in_loss = a.in_loss;
  finish.insert(finish.end(), b.finish_reason.begin(), b.finish_reason.end());
  in_loss.insert(in_loss.end(), b.in_loss.begin(), b.in_loss.end());
  EXPECT_EQ(read_all<uint8_t>(f, "/responses/finish_reason"), finish);
  EXPECT_EQ(read_all<uint8_t>(f, "/responses/in_loss"), in_loss);
  std::string all_text, all_pred;
  for (const auto* g : {&a, &b}) {
    for (const auto& s : g->response_text) all_text += s;
    for (const auto& s : g->pred) all_pred += s;
  }
  const std::vector<uint8_t> rt = read_all<uint8_t>(f, "/responses/text");
  EXPECT_EQ(std::string(rt.begin(), rt.end()), all_text);  // bytes as given, cut characters included
  const std::vector<uint8_t> rp = read_all<uint8_t>(f, "/responses/pred");
  EXPECT_EQ(std::string(rp.begin(), rp.end()), all_pred);
  EXPECT_EQ(read_all<int64_t>(f, "/responses/text_offsets").size(), 6u);
  EXPECT_EQ(read_all<int64_t>(f, "/responses/pred_offsets").size(), 6u);
}

TEST(RolloutDump, NoGroupsIsAValidDump) {
  TempDir dir;
  const std::string path = dir.file("empty.h5");
  const parallel::Comm world = parallel::Comm::world();
  write_rollout_dump(path, world, std::span<const DumpGroup>(), test_info());
  const RolloutDump d = read_rollout_dump(path);
  EXPECT_TRUE(d.groups.empty());
  EXPECT_EQ(d.num_responses(), 0);
  EXPECT_EQ(d.info.step, 12);
}

TEST(RolloutDump, RewritingReplacesTheFileAndLeavesNoPartial) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const parallel::Comm world = parallel::Comm::world();
  const rl::GroupData a = test::make_dump_group(1, true), b = test::make_dump_group(2, false);
  test::write_text(path + ".partial", "left over from a crash");
  write_rollout_dump(path, world, std::vector<DumpGroup>{{&a, rl::GroupOutcome::mixed, true}}, test_info());
  write_rollout_dump(path, world, std::vector<DumpGroup>{{&b, rl::GroupOutcome::all_wrong, false}}, test_info());
  EXPECT_FALSE(fs::exists(path + ".partial"));
  const RolloutDump d = read_rollout_dump(path);
  ASSERT_EQ(d.groups.size(), 1u);
  test::expect_group_eq(d.groups[0].group, b, "rewritten");
  // A directory that does not exist: a UserError naming the file.
  const std::string missing = dir.file("no/such/dir/d.h5");
  EXPECT_NE(error_of([&] { write_rollout_dump(missing, world, std::span<const DumpGroup>(), test_info()); })
                .find(missing + ".partial: cannot create"),
            std::string::npos);
}

// A stale d.h5.partial that is a symlink is removed, and the file it
// points to is left alone (never written through).
TEST(RolloutDump, APartialSymlinkIsNeverWrittenThrough) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const parallel::Comm world = parallel::Comm::world();
  test::write_text(dir.file("victim.txt"), "precious\n");
  fs::create_symlink(dir.file("victim.txt"), path + ".partial");
  write_rollout_dump(path, world, std::span<const DumpGroup>(), test_info());
  EXPECT_EQ(test::read_text(dir.file("victim.txt")), "precious\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".partial")));
  EXPECT_EQ(read_rollout_dump(path).info.step, 12);
}

// A byte of a response's text changed on disk: the chunk's Fletcher-32
// fails the read with the file named, instead of showing altered text.
TEST(RolloutDump, DamagedBytesFailTheChecksum) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  rl::GroupData a = test::make_dump_group(1, true);
  const std::string marker = "a response no other dataset holds: 0123456789";
  a.response_text[0] = marker;
  write_rollout_dump(path, parallel::Comm::world(), std::vector<DumpGroup>{{&a, rl::GroupOutcome::mixed, true}},
                     test_info());
  std::string bytes = test::read_text(path);
  const size_t at = bytes.find(marker);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] = 'X';
  test::write_text(path, bytes);
  const std::string err = error_of([&] { read_rollout_dump(path); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
}

// ---- bad input -----------------------------------------------------------------

// A valid one-group dump to damage.
std::string valid_dump(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  const parallel::Comm world = parallel::Comm::world();
  const rl::GroupData a = test::make_dump_group(2, true);
  write_rollout_dump(path, world, std::vector<DumpGroup>{{&a, rl::GroupOutcome::mixed, true}}, test_info());
  return path;
}

TEST(RolloutDump, BadFilesNameTheFileAndWhatIsWrong) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const std::string none = dir.file("none.h5");
  EXPECT_EQ(error_of([&] { read_rollout_dump(none); }), none + ": no such file");
  const std::string text = dir.file("text.h5");
  test::write_text(text, "not hdf5 at all\n");
  EXPECT_EQ(error_of([&] { read_rollout_dump(text); }), text + ": not an HDF5 file");

  const std::string ckpt = dir.file("ckpt.h5");
  {
    H5File f = H5File::create(ckpt, world);
    f.set_attr("/", "format", std::string("dapo-checkpoint"));
  }
  EXPECT_EQ(error_of([&] { read_rollout_dump(ckpt); }),
            ckpt + ": not a dapo rollout dump (format 'dapo-checkpoint', expected 'dapo-rollout-dump')");
  const std::string bare = dir.file("bare.h5");
  H5File::create(bare, world).close();
  EXPECT_EQ(error_of([&] { read_rollout_dump(bare); }), bare + ": not a dapo rollout dump (no 'format' attribute)");

  const std::string newer = valid_dump(dir, "newer.h5");
  {
    H5File f = H5File::open(newer, world, io::H5Access::read_write);
    f.set_attr("/", "format_version", int64_t(3));
  }
  EXPECT_EQ(error_of([&] { read_rollout_dump(newer); }),
            newer + ": format_version 3 is newer than this dapo reads (up to 2): use a newer dapo");
  // Format 1 (no /responses/sampling_logprob) still reads, without the
  // sampler's log-probs.
  const std::string older = valid_dump(dir, "older.h5");
  {
    H5File f = H5File::open(older, world, io::H5Access::read_write);
    f.set_attr("/", "format_version", int64_t(1));
  }
  const RolloutDump v1 = read_rollout_dump(older);
  EXPECT_EQ(v1.format_version, 1);
  ASSERT_FALSE(v1.groups.empty());
  for (const DumpedGroup& g : v1.groups) EXPECT_TRUE(g.group.sampling_logprobs.empty());

  // The right attributes, a dataset of the wrong length.
  const std::string partial = dir.file("partial.h5");
  {
    H5File f = H5File::create(partial, world);
    f.set_attr("/", "format", std::string("dapo-rollout-dump"));
    f.set_attr("/", "format_version", int64_t(1));
    for (const char* a : {"step", "n", "max_response_length", "world_size"}) f.set_attr("/", a, int64_t(1));
    f.set_attr("/", "config", std::string());
    f.create_dataset("/prompts/uid", DType::i64, {2});
    f.write("/prompts/uid", Hyperslab::whole({2}), std::vector<int64_t>{1, 2}.data());
    f.create_dataset("/prompts/round", DType::i64, {3});
    f.write("/prompts/round", Hyperslab::whole({3}), std::vector<int64_t>{0, 0, 0}.data());
  }
  EXPECT_EQ(error_of([&] { read_rollout_dump(partial); }),
            partial + ": /prompts/round: has 3 entries, expected 2 (one per prompt, as /prompts/uid)");
  // The right attributes, a missing dataset.
  const std::string missing = dir.file("missing.h5");
  {
    H5File f = H5File::create(missing, world);
    f.set_attr("/", "format", std::string("dapo-rollout-dump"));
    f.set_attr("/", "format_version", int64_t(1));
    for (const char* a : {"step", "n", "max_response_length", "world_size"}) f.set_attr("/", a, int64_t(1));
    f.set_attr("/", "config", std::string());
    f.create_dataset("/prompts/uid", DType::i64, {0});
    f.create_dataset("/prompts/round", DType::i64, {0});
  }
  EXPECT_EQ(error_of([&] { read_rollout_dump(missing); }), missing + ": /prompts/position: no such dataset");
}

TEST(RolloutDump, InconsistentDatasetsAreNamed) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  // Offsets that do not end at the data's length.
  const std::string offsets = valid_dump(dir, "offsets.h5");
  {
    H5File f = H5File::open(offsets, world, io::H5Access::read_write);
    const int64_t n = f.dataset_shape("/responses/text_offsets")[0];
    const int64_t bad = 1000;
    f.write("/responses/text_offsets", Hyperslab{{n - 1}, {1}}, &bad);
  }
  EXPECT_NE(error_of([&] { read_rollout_dump(offsets); })
                .find(offsets + ": /responses/text_offsets: ends at 1000 but its data has "),
            std::string::npos);
  // An outcome code that does not exist.
  const std::string outcome = valid_dump(dir, "outcome.h5");
  {
    H5File f = H5File::open(outcome, world, io::H5Access::read_write);
    const uint8_t bad = 9;
    f.write_bytes("/prompts/outcome", Hyperslab{{0}, {1}}, &bad);
  }
  EXPECT_EQ(error_of([&] { read_rollout_dump(outcome); }),
            outcome + ": /prompts/outcome: entry 0 is 9, not a group outcome (0..3)");
  // A response row filed under the wrong prompt.
  const std::string index = valid_dump(dir, "index.h5");
  {
    H5File f = H5File::open(index, world, io::H5Access::read_write);
    const int64_t bad = 5;
    f.write("/responses/prompt_index", Hyperslab{{1}, {1}}, &bad);
  }
  EXPECT_EQ(error_of([&] { read_rollout_dump(index); }),
            index + ": /responses/prompt_index: row 1 says prompt 5 but /prompts/response_rows puts it under prompt 0");
  // Text stored as floats.
  const std::string type = dir.file("type.h5");
  {
    H5File f = H5File::create(type, world);
    f.create_dataset("/x", DType::f32, {1});
    f.write("/x", Hyperslab::whole({1}), std::vector<float>{1}.data());
  }
  const H5File f = H5File::open_local(type);
  uint8_t byte = 0;
  EXPECT_EQ(error_of([&] { f.read_bytes("/x", Hyperslab::whole({1}), &byte); }), type + ": /x: is not integer data");
}

}  // namespace
}  // namespace dapo::dump
