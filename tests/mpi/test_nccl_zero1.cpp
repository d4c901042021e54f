// The optimizer sharded over dp (ZeRO-1) on GPUs (mpirun -np 2/4, one GPU
// per rank; skipped without them, as in CI): tp 1 x dp 2 on 2 GPUs, and
// tp 1 x dp 4 and tp 2 x dp 2 on 4. Three UpdateRunner steps with the
// sharded optimizer - gradients reduce-scattered in 1 MiB buckets on the
// communication stream during the backward, fp32 master and moments only
// for the shard, the bf16 compute copy all-gathered - against the same
// steps unsharded (all-reduce buckets, whole master) on the same GPUs:
//  - the grad norm to 1e-6 (the same local gradients; the sums of squares
//    differ only in their float partials), the same on every rank;
//  - with dp = 2, fp32 master and moments (gathered over dp) and the bf16
//    compute copy bit for bit (no clipping: the same local gradients, the
//    same two-term sums, the same update kernel); with dp = 4 (NCCL may sum 4 terms in
//    another order) within the bounds NcclModel uses; on every rank the
//    compute copy is exactly bf16(master), so the all-gather brought every
//    other rank's updates;
//  - a training checkpoint of the sharded GPU state (gathered per tensor to
//    dp rank 0) resumed by an unsharded GPU optimizer: master and moments
//    bit for bit.
// Before that, the collectives alone: the reduce-scatter buckets fed a
// backward's frontier, and the bucket all-gathers, give exact sums and
// every rank's parts. Named Nccl* so that the GPU ctest entries pick these up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dapo/core/error.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/optim/adamw.h"
#include "dapo/optim/grad_buckets.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/checkpointing.h"
#include "dapo/trainer/update_step.h"
#include "mpi/mpi_test_util.h"

namespace dapo::parallel {
namespace {

constexpr size_t kBucketBytes = size_t(1) << 20;

model::Qwen2Config config() {
  model::Qwen2Config c;
  c.vocab_size = 1000;
  c.hidden_size = 512;
  c.intermediate_size = 1376;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = false;
  return c;
}

model::RandomInit init() {
  model::RandomInit r;
  r.seed = 29;
  r.weight_scale = 0.06f;
  r.bias_scale = 0.1f;
  r.norm_scale = 0.2f;
  return r;
}

// Eight sequences per step; sequence s goes to dp rank s % dp. values[0]
// holds each token's loss weight.
std::vector<trainer::MicroBatch> batches(int dp_rank, int dp_size, int64_t vocab, int step) {
  const int64_t lengths[] = {300, 1, 77, 512, 64, 129, 33, 200};
  trainer::MicroBatch mb;
  mb.values.resize(1);
  mb.cu_seqlens.push_back(0);
  uint32_t x = 777u + 31u * uint32_t(step);
  auto next = [&] { return x = x * 1664525u + 1013904223u; };
  for (int s = 0; s < 8; ++s) {
    std::vector<int32_t> toks;
    for (int64_t p = 0; p < lengths[s]; ++p) toks.push_back(int32_t(next() % uint32_t(vocab)));
    if (s % dp_size != dp_rank) continue;
    for (int64_t p = 0; p < lengths[s]; ++p) {
      mb.tokens.push_back(toks[size_t(p)]);
      mb.positions.push_back(int32_t(p));
      mb.targets.push_back(toks[size_t((p + 1) % lengths[s])]);
      mb.mask.push_back(1);
      mb.values[0].push_back(std::sin(0.1f * float(p) + float(s) + float(step)) / 1000.0f);
    }
    mb.cu_seqlens.push_back(int32_t(mb.tokens.size()));
  }
  return {mb};
}

// No clipping: the clip factor would come from norms whose float partial
// sums differ in the last bits between the two forms.
optim::AdamWOptions options() {
  optim::AdamWOptions o;
  o.grad_clip = 0;
  return o;
}

trainer::TokenGradient weighted() {
  return [](const trainer::MicroBatch& mb, const trainer::ForwardOutputs&, std::span<float> dlogprob, std::span<float>) {
    for (size_t t = 0; t < mb.tokens.size(); ++t) dlogprob[t] = mb.values[0][t];
  };
}

struct State {
  std::vector<double> norms;
  std::vector<float> master, m, v;  // every tensor's tp slice, in HF order
  std::vector<bf16> compute;        // the whole flat compute buffer
};

// Master and moments read back per tensor (gathers over dp when sharded).
void read_state(const model::ParamStore& store, const optim::AdamW& opt, State& s) {
  for (const model::ParamEntry& e : store.entries()) {
    const int64_t n = e.param.numel();
    std::vector<float> w(static_cast<size_t>(n)), m(w.size()), v(w.size());
    store.read_local(e.spec.name, w.data(), n);
    opt.read_local(e.spec.name, m.data(), v.data(), n);
    s.master.insert(s.master.end(), w.begin(), w.end());
    s.m.insert(s.m.end(), m.begin(), m.end());
    s.v.insert(s.v.end(), v.begin(), v.end());
  }
}

State train(const Grid& grid, const ops::CudaDevice& gpu, bool shard, const Config* save, std::string* saved) {
  const model::Qwen2Config c = config();
  model::ParamStore store(c, grid.tp_rank, grid.tp_size, Device::cuda, gpu.ctx(nullptr).stream);
  store.init_random(init());
  model::Qwen2Model model(store, grid.tp);
  optim::AdamW opt(store, options(), optim::ShardOptions{shard ? &grid.dp : nullptr, kBucketBytes});
  EXPECT_EQ(opt.sharded(), shard);
  EXPECT_EQ(store.master_sharded(), shard);
  if (shard) EXPECT_GT(opt.layout().buckets().size(), size_t(8));
  trainer::UpdateRunner runner(model, &opt, grid, &gpu);
  if (!shard) runner.set_dp_bucket_bytes(kBucketBytes);
  State s;
  for (int step = 0; step < 3; ++step) {
    s.norms.push_back(runner.step(batches(grid.dp_rank, grid.dp_size, c.vocab_size, step), weighted(), 1e-3).grad_norm);
    // Most buckets went out while the backward still ran (the overlap).
    EXPECT_GT(runner.dp_buckets()->buckets_launched_early(), runner.dp_buckets()->buckets_launched() / 2);
    EXPECT_EQ(runner.dp_buckets()->scatters(), shard);
  }
  read_state(store, opt, s);
  const Tensor compute = store.compute_parameters();
  s.compute.resize(size_t(compute.numel()));
  gpu.copy_to_host(Tensor(s.compute.data(), DType::bf16, {compute.numel()}), compute);
  if (save) *saved = trainer::save_training_state(*save, grid, store, opt, data::PromptOrder(50, 3), 3);
  return s;
}

// Gradient element i on dp rank r: a multiple of 2^-8 in [-1/4, 1/4], so
// sums over ranks are exact whatever NCCL's order; the bf16 weights of
// rank r's parts: small integers (rounded to bf16 above 256).
float grad_value(int64_t i, int r) { return float(int((i * 7 + r * 13) % 129) - 64) / 256.0f; }

// The collectives alone: GradBuckets in its reduce-scatter form, fed the
// frontier as a backward would report it, leaves in each rank's shard the
// exact dp sum; all_gather_bucket on the communication stream gives every
// rank every rank's parts of a bf16 buffer.
TEST(NcclZero1, BucketsReduceScatterIntoTheShardsAndGatherBack) {
  const Comm world = Comm::world();
  const int gpus = ops::cuda_device_count();
  if (world.all_reduce_i64(gpus >= world.size() ? 0 : 1, ReduceOp::max))
    GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
  const ops::CudaDevice gpu(world.rank());
  const Grid grid = make_grid(world, 1);
  const int P = grid.dp_size, me = grid.dp_rank;
  model::ParamStore store(config(), 0, 1, Device::cuda, gpu.ctx(nullptr).stream);
  const int64_t n = store.buffer_elements();
  const optim::ShardLayout layout(n, P, me, size_t(64) << 10);
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[size_t(i)] = grad_value(i, me);
  gpu.copy_to_device(store.gradients(), tensor_f32(g.data(), {n}));
  optim::GradBuckets buckets(store, grid.dp, gpu, layout);
  buckets.begin();
  for (auto e = store.entries().rbegin(); e != store.entries().rend(); ++e) buckets.ready(e->offset);
  buckets.finish();
  EXPECT_EQ(buckets.buckets_launched(), int64_t(layout.buckets().size()));
  gpu.copy_to_host(tensor_f32(g.data(), {n}), store.gradients());
  for (const model::ShardRange& r : layout.ranges())
    for (int64_t i = r.begin; i < r.end; ++i) {
      float want = 0;
      for (int q = 0; q < P; ++q) want += grad_value(i, q);
      ASSERT_EQ(g[size_t(i)], want) << "element " << i;
    }

  const Tensor w = store.compute_parameters();
  std::vector<bf16> host(static_cast<size_t>(n), to_bf16(-1.0f));
  for (const model::ShardRange& r : layout.ranges())
    for (int64_t i = r.begin; i < r.end; ++i) host[size_t(i)] = to_bf16(float(me * 100 + i % 50));
  gpu.copy_to_device(w, Tensor(host.data(), DType::bf16, {n}));
  gpu.comm_waits_for_compute();
  for (const optim::Bucket& b : layout.buckets()) optim::all_gather_bucket(layout, grid.dp, w, b, gpu.comm_stream());
  gpu.compute_waits_for_comm();
  gpu.copy_to_host(Tensor(host.data(), DType::bf16, {n}), w);
  for (int q = 0; q < P; ++q)
    for (const model::ShardRange& r : layout.ranges(q))
      for (int64_t i = r.begin; i < r.end; ++i)
        ASSERT_EQ(to_f32(host[size_t(i)]), to_f32(to_bf16(float(q * 100 + i % 50))))
            << "element " << i << " of rank " << q;
}

TEST(NcclZero1, ShardedStepsMatchUnshardedOnGpus) {
  const Comm world = Comm::world();
  const int gpus = ops::cuda_device_count();
  if (world.all_reduce_i64(gpus >= world.size() ? 0 : 1, ReduceOp::max))
    GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
  const ops::CudaDevice gpu(world.rank());
  const test::SharedDir dir(world);
  for (int tp = 1; tp <= 2; ++tp) {
    if (world.size() % tp != 0 || world.size() / tp < 2) continue;
    const Grid grid = make_grid(world, tp);
    SCOPED_TRACE(cat("tp ", tp, " x dp ", grid.dp_size));
    Config save;
    save.checkpoint.dir = dir.file("tp" + std::to_string(tp));
    std::string path;
    const State want = train(grid, gpu, false, nullptr, nullptr);
    const State got = train(grid, gpu, true, &save, &path);
    for (size_t i = 0; i < want.norms.size(); ++i) {
      EXPECT_NEAR(got.norms[i], want.norms[i], 1e-6 * want.norms[i]) << "step " << i;
      EXPECT_EQ(world.all_reduce_f64(got.norms[i], ReduceOp::max), world.all_reduce_f64(got.norms[i], ReduceOp::min));
    }
    ASSERT_EQ(got.master.size(), want.master.size());
    if (grid.dp_size == 2) {
      // Two summands: the reduce-scatter and the all-reduce give the same
      // sums, the update of each element is the same kernel: the same bits.
      EXPECT_EQ(got.master, want.master);
      EXPECT_EQ(got.m, want.m);
      EXPECT_EQ(got.v, want.v);
      for (size_t i = 0; i < want.compute.size(); ++i)
        ASSERT_EQ(to_f32(got.compute[i]), to_f32(want.compute[i])) << "compute element " << i;
    } else {
      // More summands: NCCL may add them in another order in the two
      // collectives, so a gradient near zero may change sign and move its
      // weight by 2 lr per step the other way (as in NcclModel); the moments
      // differ by the gradients' rounding.
      double m_max = 0, v_max = 0;
      for (size_t i = 0; i < want.m.size(); ++i) {
        m_max = std::max(m_max, std::fabs(double(want.m[i])));
        v_max = std::max(v_max, std::fabs(double(want.v[i])));
      }
      int64_t moved = 0;
      for (size_t i = 0; i < want.master.size(); ++i) {
        ASSERT_LE(std::fabs(got.master[i] - want.master[i]), 6.5e-3f) << "master element " << i;
        moved += std::fabs(got.master[i] - want.master[i]) > 1e-7 + 1e-6 * std::fabs(want.master[i]);
        ASSERT_NEAR(got.m[i], want.m[i], 1e-5 * m_max) << "exp_avg element " << i;
        ASSERT_NEAR(got.v[i], want.v[i], 1e-5 * v_max) << "exp_avg_sq element " << i;
      }
      EXPECT_LE(double(moved), 1e-3 * double(want.master.size())) << "master elements off by more than rounding";
    }
    // The compute copy is exactly bf16 of the (gathered) master on every
    // rank: the all-gather brought every other rank's updates.
    ASSERT_EQ(got.compute.size(), want.compute.size());
    const model::ParamStore layout(config(), grid.tp_rank, grid.tp_size);  // offsets of the views (host)
    size_t at = 0;
    for (const model::ParamEntry& e : layout.entries())
      for (int64_t k = 0; k < e.param.numel(); ++k, ++at)
        ASSERT_EQ(to_f32(got.compute[size_t(e.offset + k)]), to_f32(to_bf16(got.master[at])))
            << e.spec.name << " element " << k << ": the all-gathered compute copy is not bf16(master)";

    // The sharded state's checkpoint, resumed without sharding.
    const model::Qwen2Config c = config();
    model::ParamStore back(c, grid.tp_rank, grid.tp_size, Device::cuda, gpu.ctx(nullptr).stream);
    optim::AdamW back_opt(back, options());
    Config resume = save;
    resume.checkpoint.resume = path;
    ASSERT_TRUE(trainer::resume_training(resume, grid, back, back_opt).has_value());
    State loaded;
    read_state(back, back_opt, loaded);
    EXPECT_EQ(loaded.master, got.master);
    EXPECT_EQ(loaded.m, got.m);
    EXPECT_EQ(loaded.v, got.v);
    EXPECT_EQ(back_opt.steps_taken(), 3);
  }
}

}  // namespace
}  // namespace dapo::parallel
