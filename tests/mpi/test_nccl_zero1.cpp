// The optimizer sharded over dp (ZeRO-1) on GPUs (mpirun -np 2/4, one GPU
// per rank; skipped without them, as in CI): tp 1 x dp 2 on 2 GPUs, and
// tp 1 x dp 4 and tp 2 x dp 2 on 4. Three UpdateRunner steps with the
// sharded optimizer - gradients reduce-scattered in 1 MiB buckets on the
// communication stream during the backward, fp32 master and moments only
// for the shard, the bf16 compute copy all-gathered - against the same
// steps unsharded (all-reduce buckets, whole master) on the same GPUs,
// each step from the same state, and both against each rank's own
// gradients summed on the host (ShardedStepsMatchUnshardedOnGpus says
// what is compared and why); then a training checkpoint of the sharded
// state resumed without sharding.
// Before that, the collectives alone: the reduce-scatter buckets fed a
// backward's frontier, and the bucket all-gathers, give exact sums and
// every rank's parts. Named Nccl* so that the GPU ctest entries pick these up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
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
#include "model/model_test_util.h"
#include "mpi/mpi_test_util.h"

namespace dapo::parallel {
namespace {

constexpr size_t kBucketBytes = size_t(1) << 20;

model::Qwen2Config config() { return test::mid_config(2, 2048); }

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
  std::vector<float> master, m, v;  // every tensor's tp slice, in HF order
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

// One form of the optimizer on this rank: its own store, model, optimizer
// and runner (members in construction order; destroyed in reverse).
struct Form {
  std::unique_ptr<model::ParamStore> store;
  std::unique_ptr<model::Qwen2Model> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<trainer::UpdateRunner> runner;
};

Form make_form(const Grid& grid, const ops::CudaDevice& gpu, bool shard) {
  Form f;
  f.store = std::make_unique<model::ParamStore>(config(), grid.tp_rank, grid.tp_size, Device::cuda,
                                                gpu.ctx(nullptr).stream);
  f.store->init_random(init());
  f.model = std::make_unique<model::Qwen2Model>(*f.store, grid.tp);
  f.opt = std::make_unique<optim::AdamW>(*f.store, options(),
                                         optim::ShardOptions{shard ? &grid.dp : nullptr, kBucketBytes});
  f.runner = std::make_unique<trainer::UpdateRunner>(*f.model, f.opt.get(), grid, &gpu);
  if (!shard && grid.dp_size > 1) f.runner->set_dp_bucket_bytes(kBucketBytes);
  return f;
}

// Master (and moments) of every tensor from `s` (HF order, as read_state).
void load_state(const State& s, Form& f, bool moments) {
  size_t at = 0;
  for (const model::ParamEntry& e : f.store->entries()) {
    const int64_t n = e.param.numel();
    f.store->load_local(e.spec.name, s.master.data() + at, n);
    if (moments) f.opt->load_local(e.spec.name, s.m.data() + at, s.v.data() + at, n);
    at += size_t(n);
  }
}

std::vector<float> host_gradients(const ops::CudaDevice& gpu, const model::ParamStore& store) {
  std::vector<float> g(static_cast<size_t>(store.buffer_elements()));
  gpu.copy_to_host(tensor_f32(g.data(), {store.buffer_elements()}), store.gradients());
  return g;
}

std::vector<bf16> host_compute(const ops::CudaDevice& gpu, const model::ParamStore& store) {
  const Tensor compute = store.compute_parameters();
  std::vector<bf16> out(static_cast<size_t>(compute.numel()));
  gpu.copy_to_host(Tensor(out.data(), DType::bf16, {compute.numel()}), compute);
  return out;
}

// Each step starts every form from the same state (the unsharded one's
// after the previous step), so that the comparison is of one step. With
// dp > 2 NCCL's reduce-scatter and all-reduce add the ranks' gradients in
// different orders (on 4 H100s over a quarter of the elements differ
// in the last bits), and where a gradient's sum is near Adam's eps (|g| ~
// 1e-8) or within that rounding of zero, the step moves the fp32 master
// differently (75 elements by up to 6e-7 at the first step). The next
// forward reads only the bf16 compute copy, so a free run of three steps,
// whose grad norms differed by 1.5e-5 and 5e-5 at steps 1 and 2, had
// such a difference round the copy the other way: from there the two
// forms train different models. So, per step:
//  - both forms' dp sums against each rank's own gradients (a third form
//    without dp, gathered) summed on the host: within the error bound of
//    a P-term float sum in any order, (P-1) u sum|g_r|, on every element
//    of the unsharded buffer and of this rank's shard (a bucket reduced
//    before the backward finished it, or a span missed or summed twice,
//    would be far outside);
//  - both grad norms against that host sum's (1e-5: float partials) and
//    each other (1e-6), the same on every rank;
//  - with dp = 2, master and moments bit for bit (two summands: the same
//    sums, the same update kernel); with dp > 2 the moments within what
//    the sums' bound allows, the master within 2.2 lr (a sign flip) and
//    off by more than rounding in at most 1e-3 of the elements;
//  - on every rank the compute copy is exactly bf16(master): the
//    all-gather brought every other rank's updates.
// Then a training checkpoint of the sharded GPU state (gathered per tensor
// to dp rank 0) resumed by an unsharded GPU optimizer: master and moments
// bit for bit.
TEST(NcclZero1, ShardedStepsMatchUnshardedOnGpus) {
  const Comm world = Comm::world();
  const int gpus = ops::cuda_device_count();
  if (world.all_reduce_i64(gpus >= world.size() ? 0 : 1, ReduceOp::max))
    GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
  const ops::CudaDevice gpu(world.rank());
  const test::SharedDir dir(world);
  const model::Qwen2Config c = config();
  const double u = std::ldexp(1.0, -24);
  const optim::AdamWOptions o = options();
  for (int tp = 1; tp <= 2; ++tp) {
    if (world.size() % tp != 0 || world.size() / tp < 2) continue;
    const Grid grid = make_grid(world, tp);
    SCOPED_TRACE(cat("tp ", tp, " x dp ", grid.dp_size));
    // This rank's tp group without dp: its own gradients.
    const Comm alone = world.split(grid.dp_rank, grid.tp_rank);
    const Grid local_grid = make_grid(alone, tp);
    ASSERT_EQ(local_grid.dp_size, 1);
    Form un = make_form(grid, gpu, false), sh = make_form(grid, gpu, true), lo = make_form(local_grid, gpu, false);
    EXPECT_FALSE(un.opt->sharded());
    EXPECT_TRUE(sh.opt->sharded());
    EXPECT_TRUE(sh.store->master_sharded());
    EXPECT_GT(sh.opt->layout().buckets().size(), size_t(8));
    const int P = grid.dp_size;
    const int64_t N = un.store->buffer_elements();
    const std::vector<model::ShardRange>& mine = sh.opt->layout().ranges();
    // HF-order element j of a State is flat element flat[j].
    std::vector<int64_t> flat;
    std::vector<char> primary(static_cast<size_t>(N), 0);
    for (const model::ParamEntry& e : un.store->entries())
      for (int64_t k = 0; k < e.param.numel(); ++k) {
        flat.push_back(e.offset + k);
        primary[size_t(e.offset + k)] = e.primary;
      }
    State s;
    read_state(*un.store, *un.opt, s);
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(cat("step ", step));
      load_state(s, un, true);
      load_state(s, sh, true);
      load_state(s, lo, false);
      const std::vector<trainer::MicroBatch> mb = batches(grid.dp_rank, P, c.vocab_size, step);
      lo.runner->step(mb, weighted(), 1e-3);
      const double norm_un = un.runner->step(mb, weighted(), 1e-3).grad_norm;
      const double norm_sh = sh.runner->step(mb, weighted(), 1e-3).grad_norm;
      for (const Form* f : {&un, &sh}) {
        // Most buckets went out while the backward still ran (the overlap).
        EXPECT_GT(f->runner->dp_buckets()->buckets_launched_early(), f->runner->dp_buckets()->buckets_launched() / 2);
        EXPECT_EQ(f->runner->dp_buckets()->scatters(), f == &sh);
      }

      // The host's sums of every rank's own gradients.
      std::vector<float> own = host_gradients(gpu, *lo.store);
      std::vector<float> local(size_t(P) * size_t(N));
      grid.dp.all_gather(tensor_f32(local.data(), {int64_t(P) * N}), tensor_f32(own.data(), {N}));
      std::vector<double> exact(static_cast<size_t>(N)), bound(exact.size());
      double squares = 0;
      for (int64_t i = 0; i < N; ++i) {
        double sum = 0, abs = 0;
        for (int q = 0; q < P; ++q) {
          const double x = local[size_t(q) * size_t(N) + size_t(i)];
          sum += x;
          abs += std::fabs(x);
        }
        exact[size_t(i)] = sum;
        // 1e-37: a GPU may flush subnormal partial sums to zero.
        bound[size_t(i)] = double(P - 1) * u * abs * (1 + 1e-6) + 1e-37;
        if (primary[size_t(i)]) squares += sum * sum;
      }
      if (tp > 1) squares = grid.tp.all_reduce_f64(squares, ReduceOp::sum);
      const double norm_exact = std::sqrt(squares);

      const std::vector<float> g_un = host_gradients(gpu, *un.store), g_sh = host_gradients(gpu, *sh.store);
      int64_t bad_un = 0, bad_sh = 0, differ = 0, flips = 0;
      double worst_un = 0, worst_sh = 0;  // error / bound
      auto check = [&](const std::vector<float>& g, int64_t i, int64_t& bad, double& worst, const char* form) {
        const double err = std::fabs(double(g[size_t(i)]) - exact[size_t(i)]), b = bound[size_t(i)];
        worst = std::max(worst, err == 0 ? 0.0 : b == 0 ? 1e300 : err / b);
        if (err > b && bad++ < 5)
          ADD_FAILURE() << form << " gradient element " << i << ": " << g[size_t(i)] << ", host sum " << exact[size_t(i)]
                        << " +- " << b;
      };
      for (int64_t i = 0; i < N; ++i) check(g_un, i, bad_un, worst_un, "unsharded");
      for (const model::ShardRange& r : mine)
        for (int64_t i = r.begin; i < r.end; ++i) {
          check(g_sh, i, bad_sh, worst_sh, "sharded");
          differ += g_sh[size_t(i)] != g_un[size_t(i)];
          flips += double(g_sh[size_t(i)]) * double(g_un[size_t(i)]) < 0;
        }
      EXPECT_EQ(bad_un, 0);
      EXPECT_EQ(bad_sh, 0);
      EXPECT_NEAR(norm_un, norm_exact, 1e-5 * norm_exact);
      EXPECT_NEAR(norm_sh, norm_exact, 1e-5 * norm_exact);
      EXPECT_NEAR(norm_sh, norm_un, 1e-6 * norm_un);
      EXPECT_EQ(world.all_reduce_f64(norm_sh, ReduceOp::max), world.all_reduce_f64(norm_sh, ReduceOp::min));
      if (P == 2) EXPECT_EQ(differ, 0);

      State a, b;
      read_state(*un.store, *un.opt, a);
      read_state(*sh.store, *sh.opt, b);
      ASSERT_EQ(b.master.size(), a.master.size());
      ASSERT_EQ(a.master.size(), flat.size());
      // The compute copies are exactly bf16(master): the sharded one's
      // all-gather brought every other rank's updates.
      const std::vector<bf16> c_un = host_compute(gpu, *un.store), c_sh = host_compute(gpu, *sh.store);
      for (size_t j = 0; j < flat.size(); ++j) {
        ASSERT_EQ(to_f32(c_sh[size_t(flat[j])]), to_f32(to_bf16(b.master[j])))
            << "element " << flat[j] << ": the all-gathered compute copy is not bf16(master)";
        ASSERT_EQ(to_f32(c_un[size_t(flat[j])]), to_f32(to_bf16(a.master[j]))) << "element " << flat[j];
      }
      int64_t moved = 0, moved_flippable = 0, bad_m = 0, bad_v = 0;
      double worst_m = 0, worst_v = 0;
      if (P == 2) {
        // Two summands: the reduce-scatter and the all-reduce give the same
        // sums, the update of each element is the same kernel: the same bits.
        EXPECT_EQ(b.master, a.master);
        EXPECT_EQ(b.m, a.m);
        EXPECT_EQ(b.v, a.v);
      } else {
        for (size_t j = 0; j < flat.size(); ++j) {
          const size_t i = size_t(flat[j]);
          // Both sums within bound[i] of the host's: they differ by at most
          // twice that; each moment's own rounding adds an ulp on each side.
          const double dg = 2 * bound[i], g = std::fabs(exact[i]) + bound[i];
          const double slack_m = std::ldexp(std::max(std::fabs(a.m[j]), std::fabs(b.m[j])), -22) + 1e-38;
          const double slack_v = std::ldexp(std::max(std::fabs(a.v[j]), std::fabs(b.v[j])), -22) + 1e-38;
          const double tol_m = (1 - o.beta1) * dg + slack_m, tol_v = (1 - o.beta2) * dg * 2 * g + slack_v;
          const double em = std::fabs(double(b.m[j]) - a.m[j]), ev = std::fabs(double(b.v[j]) - a.v[j]);
          worst_m = std::max(worst_m, em / tol_m);
          worst_v = std::max(worst_v, ev / tol_v);
          if (em > tol_m && bad_m++ < 5)
            ADD_FAILURE() << "exp_avg of element " << i << ": " << b.m[j] << " vs " << a.m[j] << " (+- " << tol_m << ")";
          if (ev > tol_v && bad_v++ < 5)
            ADD_FAILURE() << "exp_avg_sq of element " << i << ": " << b.v[j] << " vs " << a.v[j] << " (+- " << tol_v
                          << ")";
          const float dw = std::fabs(b.master[j] - a.master[j]);
          ASSERT_LE(dw, 2.2f * float(1e-3)) << "master element " << i;
          if (dw > 1e-7 + 1e-6 * std::fabs(a.master[j])) {
            const bool flippable = std::fabs(exact[i]) <= bound[i];
            moved_flippable += flippable;
            if (moved++ < 3 && world.rank() == 0)
              std::printf("  rank %d step %d: master element %zu moved %.3g: host sum %.9g +- %.3g, unsharded %.9g%s\n",
                          world.rank(), step, i, double(dw), exact[i], bound[i], double(g_un[i]),
                          flippable ? " (sign within rounding)" : "");
          }
        }
        EXPECT_EQ(bad_m, 0);
        EXPECT_EQ(bad_v, 0);
        EXPECT_LE(double(moved), 1e-3 * double(flat.size())) << "master elements off by more than rounding";
      }
      std::printf(
          "rank %d tp %d dp %d step %d: norm host %.12g unsharded %.12g (%.2g) sharded %.12g (%.2g); "
          "sum error / bound: unsharded %.3g sharded %.3g; shard elements differing %lld, opposite signs %lld; "
          "moments error / bound %.3g %.3g; master moved %lld (sign within rounding: %lld)\n",
          world.rank(), tp, P, step, norm_exact, norm_un, (norm_un - norm_exact) / norm_exact, norm_sh,
          (norm_sh - norm_exact) / norm_exact, worst_un, worst_sh, (long long)differ, (long long)flips, worst_m,
          worst_v, (long long)moved, (long long)moved_flippable);
      std::fflush(stdout);
      s = std::move(a);
    }

    // The sharded state's checkpoint, resumed without sharding.
    State got;
    read_state(*sh.store, *sh.opt, got);
    Config save;
    save.checkpoint.dir = dir.file("tp" + std::to_string(tp));
    const std::string path =
        trainer::save_training_state(save, grid, *sh.store, *sh.opt, data::PromptOrder(50, 3), 3);
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
