// The optimizer across ranks (mpirun -np 2 and 4):
//  - the global grad norm of a tp-split model (tp = 2, and tp = 4 with
//    replicated KV heads) equals the tp = 1 norm of the same gradients;
//  - the whole update - model forward/backward over micro-batches, the DAPO
//    loss normalised by the GLOBAL token (or sequence) count, the dp
//    gradient sum, clipping by the global norm, AdamW - gives on every
//    tp x dp layout the same gradients and weights as one rank that
//    processes the whole mini-batch, over two steps. This is the DAPO
//    property that data parallelism and gradient accumulation change
//    nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dapo/optim/adamw.h"
#include "dapo/optim/grad_norm.h"
#include "dapo/parallel/grid.h"
#include "dapo/rl/policy_loss.h"
#include "dapo/rl/response_tokens.h"
#include "model/model_test_util.h"
#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

using model::ParamEntry;
using model::ParamStore;
using model::Qwen2Model;
using parallel::Comm;
using test::HostBatch;

Comm self_comm(const Comm& world) { return world.split(world.rank(), 0); }

// A full tensor's worth of gradient values for entry number k.
std::vector<float> full_values(const ParamEntry& e, int k) {
  int64_t n = 1;
  for (int64_t d : e.spec.shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(std::sin(0.37 * double(i) + 1.3 * k) * (1 + k % 3));
  return v;
}

TEST(OptimTp, GradNormOfSlicesEqualsTheFullNorm) {
  const Comm world = Comm::world();
  for (int tp : test::tp_choices(world.size())) {
    if (tp == 1) continue;
    SCOPED_TRACE("tp " + std::to_string(tp));
    const parallel::Grid grid = parallel::make_grid(world, tp);
    const model::Qwen2Config config = test::tiny_config(false, 2);
    ParamStore full(config, 0, 1), part(config, grid.tp_rank, tp);
    int k = 0;
    for (const ParamEntry& e : full.entries()) {
      const std::vector<float> v = full_values(e, k++);
      std::copy(v.begin(), v.end(), e.grad.ptr<float>());
      const ParamEntry& p = part.entry(e.spec.name);
      model::extract_slice(p.slice, p.spec.shape, v.data(), p.grad.ptr<float>());
    }
    const double want = optim::global_grad_norm(ops::Ctx{}, full, nullptr);
    const double got = optim::global_grad_norm(ops::Ctx{}, part, &grid.tp);
    EXPECT_NEAR(got, want, 1e-6 * want);
    // Counting every slice, replicas included, would be larger.
    const double all_local = world.all_reduce_f64(
        [&] {
          double s = 0;
          for (const ParamEntry& e : part.entries())
            for (int64_t i = 0; i < e.grad.numel(); ++i) s += double(e.grad.ptr<float>()[i]) * e.grad.ptr<float>()[i];
          return s;
        }(),
        parallel::ReduceOp::sum) / grid.dp_size;
    EXPECT_GT(std::sqrt(all_local), want * (1 + 1e-4));
    // The same value on every rank.
    const double hi = world.all_reduce_f64(got, parallel::ReduceOp::max);
    const double lo = world.all_reduce_f64(got, parallel::ReduceOp::min);
    EXPECT_EQ(hi, lo);
  }
}

// The global mini-batch: 8 packed sequences (prompt + response) with the
// loss mask on response positions (one response overlong-filtered), the
// advantage of each response on its tokens, and old log-probs near the
// initial model's.
struct MiniBatch {
  HostBatch all;
  std::vector<uint8_t> mask;
  std::vector<float> adv, old;
};

const std::vector<int64_t> kPrompt{3, 2, 4, 2, 5, 3, 2, 4}, kResponse{5, 0, 6, 3, 4, 7, 2, 1};

MiniBatch make_mini_batch(Qwen2Model& reference, test::Workspace& ws) {
  MiniBatch b;
  std::vector<int64_t> lengths;
  for (size_t s = 0; s < kPrompt.size(); ++s) lengths.push_back(kPrompt[s] + kResponse[s]);
  b.all = HostBatch(lengths, 64, 77);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t s = 0; s < kPrompt.size(); ++s) {
    std::vector<uint8_t> m(size_t(lengths[s]));
    rl::fill_response_mask(kPrompt[s], kResponse[s], s != 5, m);
    b.mask.insert(b.mask.end(), m.begin(), m.end());
    std::vector<float> a(size_t(lengths[s]));
    rl::fill_response_values(kPrompt[s], kResponse[s], 1.5f * u(gen), a);
    b.adv.insert(b.adv.end(), a.begin(), a.end());
  }
  const int64_t T = b.all.T();
  std::vector<float> lp(static_cast<size_t>(T)), ent(static_cast<size_t>(T));
  reference.forward_logprob(ws.ctx, ws.act, b.all.view(), 1.0f, tensor_f32(lp.data(), {T}),
                            tensor_f32(ent.data(), {T}));
  for (int64_t t = 0; t < T; ++t) b.old.push_back(lp[size_t(t)] + 0.4f * u(gen));
  return b;
}

// Sequences [first, last) of the mini-batch and their per-token arrays.
struct Piece {
  HostBatch batch;
  std::vector<uint8_t> mask;
  std::vector<float> adv, old;
};
Piece piece(const MiniBatch& b, size_t first, size_t last) {
  Piece p;
  p.batch = b.all.sub(first, last);
  const size_t t0 = size_t(b.all.cu_seqlens[first]), t1 = size_t(b.all.cu_seqlens[last]);
  p.mask.assign(b.mask.begin() + long(t0), b.mask.begin() + long(t1));
  p.adv.assign(b.adv.begin() + long(t0), b.adv.begin() + long(t1));
  p.old.assign(b.old.begin() + long(t0), b.old.begin() + long(t1));
  return p;
}

// Forward, loss with the given global normaliser, backward (accumulates).
rl::PolicyLossMetrics train_piece(Qwen2Model& m, test::Workspace& ws, Piece& p, const rl::PolicyLossOptions& o,
                                  const rl::LossCounts& norm) {
  const int64_t T = p.batch.T();
  std::vector<float> lp(static_cast<size_t>(T)), ent(static_cast<size_t>(T)), dlp(static_cast<size_t>(T)), dent(static_cast<size_t>(T));
  model::Activations saved;
  m.forward_train(ws.ctx, ws.act, p.batch.view(), 1.0f, tensor_f32(lp.data(), {T}), tensor_f32(ent.data(), {T}),
                  saved);
  rl::PolicyLossInputs in;
  in.logprob = lp;
  in.old_logprob = p.old;
  in.advantages = p.adv;
  in.mask = p.mask;
  in.seq_offsets = p.batch.cu_seqlens;
  in.entropy = ent;
  const rl::PolicyLossMetrics metrics = rl::policy_loss(o, in, norm, dlp, dent);
  m.backward(ws.ctx, ws.act, saved, tensor_f32(dlp.data(), {T}), tensor_f32(dent.data(), {T}));
  return metrics;
}

// The sequences of dp rank r of d (uneven on purpose), cut into micro-batches
// of at most 3 sequences.
std::vector<std::pair<size_t, size_t>> micro_batches_of(int r, int d) {
  const size_t G = kPrompt.size();
  std::vector<size_t> bounds{0};
  if (d == 1) bounds.push_back(G);
  if (d == 2) bounds.insert(bounds.end(), {3, G});
  if (d == 4) bounds.insert(bounds.end(), {1, 3, 6, G});
  EXPECT_EQ(bounds.size(), size_t(d) + 1) << "test has no split for dp " << d;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t s = bounds[size_t(r)]; s < bounds[size_t(r) + 1]; s += 3) out.push_back({s, std::min(s + 3, bounds[size_t(r) + 1])});
  return out;
}

void expect_slices(const ParamStore& part, const ParamStore& full, bool grads, double atol, double rtol,
                   const std::string& what) {
  for (const ParamEntry& e : part.entries()) {
    const ParamEntry& f = full.entry(e.spec.name);
    const std::vector<float> whole = test::host_copy(grads ? f.grad : f.param);
    std::vector<float> want(size_t(e.param.numel()));
    model::extract_slice(e.slice, e.spec.shape, whole.data(), want.data());
    const std::vector<float> got = test::host_copy(grads ? e.grad : e.param);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " " << e.spec.name << " element " << i;
  }
}

class OptimDp : public testing::TestWithParam<LossAggMode> {};

TEST_P(OptimDp, UpdateEqualsOneRankOnTheWholeMiniBatch) {
  const Comm world = Comm::world();
  const Comm self = self_comm(world);
  const model::Qwen2Config config = test::tiny_config(false, 2);
  rl::PolicyLossOptions lo;
  lo.agg = GetParam();
  lo.entropy_coeff = 0.01;
  optim::AdamWOptions ao;
  ao.weight_decay = 0.1;
  ao.grad_clip = 1e-3;
  // eps well above the gradients' rounding noise keeps the update a smooth
  // function of the gradient, so layouts that sum in another order agree
  // to ~1e-9 instead of flipping the sign of near-zero elements.
  ao.eps = 1e-3;
  const double lrs[] = {1e-2, 2e-2};

  // One rank, the whole mini-batch in micro-batches of 3 sequences.
  ParamStore full(config, 0, 1);
  full.init_random(test::tiny_init(3));
  Qwen2Model ref_model(full, self);
  test::Workspace ref_ws;
  MiniBatch mb = make_mini_batch(ref_model, ref_ws);
  const rl::LossCounts norm_all = rl::count_loss_tokens(mb.mask, mb.all.cu_seqlens);

  for (int tp : test::tp_choices(world.size())) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const parallel::Grid grid = parallel::make_grid(world, tp);
    // Restart the reference from the same initial weights for each layout.
    full.init_random(test::tiny_init(3));
    optim::AdamW fresh_ref(full, ao);
    ParamStore part(config, grid.tp_rank, tp);
    part.init_random(test::tiny_init(3));
    Qwen2Model model(part, grid.tp);
    test::Workspace ws;
    optim::AdamW opt(part, ao);
    const auto mine = micro_batches_of(grid.dp_rank, grid.dp_size);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      // Reference step (the same on every rank).
      full.zero_grad();
      for (const auto& [a, b] : micro_batches_of(0, 1)) {
        Piece p = piece(mb, a, b);
        train_piece(ref_model, ref_ws, p, lo, norm_all);
      }
      const optim::StepReport want = fresh_ref.step(ref_ws.ctx, {}, lrs[step]);
      ASSERT_LT(want.clip_coef, 1.0) << "the test should clip";

      // Distributed step: local counts, all-reduced over dp, then the pieces.
      std::vector<Piece> pieces;
      rl::LossCounts local;
      for (const auto& [a, b] : mine) {
        pieces.push_back(piece(mb, a, b));
        local += rl::count_loss_tokens(pieces.back().mask, pieces.back().batch.cu_seqlens);
      }
      std::vector<int64_t> counts{local.tokens, local.sequences};
      grid.dp.all_reduce_i64(counts, parallel::ReduceOp::sum);
      const rl::LossCounts norm{counts[0], counts[1]};
      EXPECT_EQ(norm.tokens, norm_all.tokens);
      EXPECT_EQ(norm.sequences, norm_all.sequences);
      part.zero_grad();
      for (Piece& p : pieces) train_piece(model, ws, p, lo, norm);
      const optim::StepReport got = opt.step(ws.ctx, {&grid.dp, &grid.tp}, lrs[step]);
      EXPECT_FALSE(got.skipped);
      EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-5 * want.grad_norm);
      EXPECT_NEAR(got.clip_coef, want.clip_coef, 1e-5 * want.clip_coef);
      EXPECT_EQ(got.steps_taken, step + 1);
      // dp-summed gradients equal the whole mini-batch's; then the weights.
      const double gscale = want.grad_norm / std::sqrt(double(full.num_local_parameters()));
      expect_slices(part, full, true, 1e-4 * gscale, 1e-4, "gradient");
      expect_slices(part, full, false, 1e-7, 1e-6, "weight");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, OptimDp,
                         testing::Values(LossAggMode::token_mean, LossAggMode::seq_mean_token_mean,
                                         LossAggMode::seq_mean_token_sum),
                         [](const testing::TestParamInfo<LossAggMode>& info) {
                           std::string s = to_string(info.param);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace dapo
