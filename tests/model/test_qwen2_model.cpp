// Qwen2Model at tp = 1 on tiny random models: the forward against an
// independent double-precision reference, the backward against finite
// differences of sum(w*logprob + u*entropy) for elements of EVERY parameter
// tensor (Qwen2 with tied and untied embeddings, Qwen3 with and without
// biases; packed batches of 3 sequences),
// activation recomputation (bit-identical), gradient accumulation over
// micro-batches, memory plans, and fatal misuse.
#include "dapo/model/qwen2_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "dapo/parallel/comm.h"
#include "model/model_test_util.h"
#include "model/reference_qwen2.h"

namespace dapo::model {
namespace {

using test::HostBatch;
using test::Workspace;

const std::vector<int64_t> kLengths{6, 3, 8};  // a packed batch of 3 sequences of different lengths

class ModelTest : public testing::TestWithParam<test::TinyArch> {
 protected:
  parallel::Comm tp = parallel::Comm::world();  // test_model runs on one rank: tp = 1
};

TEST_P(ModelTest, ForwardMatchesNaiveReference) {
  const Qwen2Config c = test::tiny_arch_config(GetParam());
  ParamStore store(c, 0, 1);
  store.init_random(test::tiny_init());
  const Qwen2Model m(store, tp);
  HostBatch batch(kLengths, c.vocab_size, 11);
  const test::FullWeights full = test::full_random_weights(c, test::tiny_init());
  Workspace ws;
  const int64_t T = batch.T();

  std::vector<float> logits = test::zeros(T * c.vocab_size);
  m.forward_logits(ws.ctx, ws.act, batch.view(), tensor_f32(logits.data(), {T, c.vocab_size}));
  EXPECT_EQ(ws.act.used(), 0u);
  for (float inv_t : {1.0f, 1.0f / 0.7f}) {
    const test::ReferenceOutput ref =
        test::reference_forward(c, full, batch.tokens, batch.positions, batch.cu_seqlens, batch.targets, inv_t);
    double spread = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      ASSERT_NEAR(logits[i], ref.logits[i], 2e-5 + 2e-5 * std::fabs(ref.logits[i])) << "logit " << i;
      spread = std::max(spread, std::fabs(ref.logits[i]));
    }
    EXPECT_GT(spread, 1.0) << "test model too flat to test anything";
    std::vector<float> lp = test::zeros(T), ent = test::zeros(T), lp2 = test::zeros(T), ent2 = test::zeros(T);
    Activations saved;
    m.forward_train(ws.ctx, ws.act, batch.view(), inv_t, tensor_f32(lp.data(), {T}), tensor_f32(ent.data(), {T}),
                    saved);
    ws.act.reset(saved.arena_mark);
    m.forward_logprob(ws.ctx, ws.act, batch.view(), inv_t, tensor_f32(lp2.data(), {T}), tensor_f32(ent2.data(), {T}));
    EXPECT_EQ(ws.act.used(), 0u);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_NEAR(lp[size_t(t)], ref.logprob[size_t(t)], 3e-5) << t;
      EXPECT_NEAR(ent[size_t(t)], ref.entropy[size_t(t)], 3e-5) << t;
      // Scoring without gradients runs the same ops: the same bits.
      EXPECT_EQ(lp2[size_t(t)], lp[size_t(t)]) << t;
      EXPECT_EQ(ent2[size_t(t)], ent[size_t(t)]) << t;
    }
  }
}

// Elements of a tensor whose gradients are checked: the ends, the middle,
// and (for the embedding) an element of a row the batch actually uses.
std::vector<int64_t> probe_indices(const ParamEntry& e, const HostBatch& batch, int64_t C) {
  const int64_t n = e.param.numel();
  std::vector<int64_t> idx{0, n / 2 + 1, n - 1, (n * 3) / 7};
  if (e.spec.name == "model.embed_tokens.weight") idx.push_back(int64_t(batch.tokens[4]) * C + 5);
  return idx;
}

TEST_P(ModelTest, BackwardMatchesFiniteDifferencesOfEveryTensor) {
  const Qwen2Config c = test::tiny_arch_config(GetParam());
  const RandomInit init = test::tiny_init(5);
  ParamStore store(c, 0, 1);
  store.init_random(init);
  Qwen2Model m(store, tp);
  HostBatch batch(kLengths, c.vocab_size, 12);
  const int64_t T = batch.T();
  const std::vector<float> w = test::uniform_vector(size_t(T), 1), u = test::uniform_vector(size_t(T), 2);
  Workspace ws;
  std::vector<float> lp, ent;
  test::train_step(m, ws, batch, w, u, lp, ent, 1.0f / 0.8f);
  EXPECT_EQ(ws.act.used(), 0u) << "backward must release the activations";

  test::FullWeights full = test::full_random_weights(c, init);
  auto ref_loss = [&] {
    const test::ReferenceOutput r =
        test::reference_forward(c, full, batch.tokens, batch.positions, batch.cu_seqlens, batch.targets, 1.0 / 0.8);
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += w[size_t(t)] * r.logprob[size_t(t)] + u[size_t(t)] * r.entropy[size_t(t)];
    return s;
  };
  auto own_loss = [&] {  // the model's own fp32 forward
    std::vector<float> a = test::zeros(T), b = test::zeros(T);
    m.forward_logprob(ws.ctx, ws.act, batch.view(), 1.0f / 0.8f, tensor_f32(a.data(), {T}), tensor_f32(b.data(), {T}));
    return test::weighted_loss(w, a, u, b);
  };

  for (const ParamEntry& e : store.entries()) {
    const std::vector<float> grad = test::host_copy(e.grad);
    std::vector<double>& ref_w = full.at(e.spec.name);
    float* p = static_cast<float*>(e.param.data);
    double magnitude = 0;
    for (int64_t i : probe_indices(e, batch, c.hidden_size)) {
      // Against the double-precision reference: tight, the numeric side is exact to ~1e-8.
      const double h = 1e-4, saved = ref_w[size_t(i)];
      ref_w[size_t(i)] = saved + h;
      const double lp_ref = ref_loss();
      ref_w[size_t(i)] = saved - h;
      const double lm_ref = ref_loss();
      ref_w[size_t(i)] = saved;
      const double numeric = (lp_ref - lm_ref) / (2 * h);
      EXPECT_NEAR(grad[size_t(i)], numeric, 2e-5 + 2e-4 * std::fabs(numeric)) << e.spec.name << " element " << i;
      magnitude += std::fabs(numeric);
      // Against the model's own fp32 forward: loose (fp32 noise / h).
      const float hf = 1e-2f, keep = p[i];
      p[i] = keep + hf;
      const double lp_own = own_loss();
      p[i] = keep - hf;
      const double lm_own = own_loss();
      p[i] = keep;
      const double own = (lp_own - lm_own) / (2.0 * double(hf));
      EXPECT_NEAR(grad[size_t(i)], own, 3e-3 + 3e-2 * std::fabs(own)) << e.spec.name << " element " << i;
    }
    EXPECT_GT(magnitude, 1e-4) << e.spec.name << ": gradients too small for the check to mean anything";
  }
}

TEST_P(ModelTest, RecomputeGivesBitIdenticalResults) {
  const Qwen2Config c = test::tiny_arch_config(GetParam());
  ParamStore a(c, 0, 1), b(c, 0, 1);
  a.init_random(test::tiny_init());
  b.init_random(test::tiny_init());
  Qwen2Model plain(a, tp), recompute(b, tp, ModelOptions{true});
  HostBatch batch(kLengths, c.vocab_size, 13);
  const std::vector<float> w = test::uniform_vector(size_t(batch.T()), 3);
  const std::vector<float> u = test::uniform_vector(size_t(batch.T()), 4);
  Workspace ws1, ws2;
  std::vector<float> lp1, ent1, lp2, ent2;
  test::train_step(plain, ws1, batch, w, u, lp1, ent1);
  test::train_step(recompute, ws2, batch, w, u, lp2, ent2);
  EXPECT_EQ(lp1, lp2);
  EXPECT_EQ(ent1, ent2);
  ASSERT_EQ(a.buffer_elements(), b.buffer_elements());
  EXPECT_EQ(std::memcmp(a.gradients().data, b.gradients().data, a.gradients().nbytes()), 0)
      << "recomputation changed the gradients";
  bool any = false;
  for (float g : test::host_copy(a.gradients())) any = any || g != 0.0f;
  EXPECT_TRUE(any);
  // It saves memory once there are layers enough to matter.
  Qwen2Config deep = c;
  deep.num_hidden_layers = 6;
  ParamStore d1(deep, 0, 1), d2(deep, 0, 1);
  EXPECT_LT(Qwen2Model(d2, tp, ModelOptions{true}).train_activation_bytes(512),
            Qwen2Model(d1, tp).train_activation_bytes(512) / 2);
}

TEST_P(ModelTest, MicroBatchesAccumulateLikeOneBatch) {
  const Qwen2Config c = test::tiny_arch_config(GetParam());
  ParamStore one(c, 0, 1), two(c, 0, 1);
  one.init_random(test::tiny_init());
  two.init_random(test::tiny_init());
  Qwen2Model m1(one, tp), m2(two, tp, ModelOptions{true});
  HostBatch batch(kLengths, c.vocab_size, 14);
  const std::vector<float> w = test::uniform_vector(size_t(batch.T()), 5);
  const std::vector<float> u = test::uniform_vector(size_t(batch.T()), 6);
  Workspace ws;
  std::vector<float> lp, ent, lpa, enta, lpb, entb;
  test::train_step(m1, ws, batch, w, u, lp, ent);
  HostBatch first = batch.sub(0, 2), second = batch.sub(2, 3);
  const size_t split = size_t(first.T());
  test::train_step(m2, ws, first, std::vector<float>(w.begin(), w.begin() + long(split)),
                   std::vector<float>(u.begin(), u.begin() + long(split)), lpa, enta);
  test::train_step(m2, ws, second, std::vector<float>(w.begin() + long(split), w.end()),
                   std::vector<float>(u.begin() + long(split), u.end()), lpb, entb);
  lpa.insert(lpa.end(), lpb.begin(), lpb.end());
  for (size_t t = 0; t < lp.size(); ++t) EXPECT_NEAR(lpa[t], lp[t], 1e-6) << t;
  const std::vector<float> g1 = test::host_copy(one.gradients()), g2 = test::host_copy(two.gradients());
  double scale = 0;
  for (float g : g1) scale = std::max(scale, double(std::fabs(g)));
  for (size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(g2[i], g1[i], 1e-5 * scale) << "gradient element " << i;
  // Running the whole batch again doubles every gradient (+=, not =; not
  // bit for bit: BLAS may add the old value at another point of the sum).
  test::train_step(m1, ws, batch, w, u, lp, ent);
  const std::vector<float> g3 = test::host_copy(one.gradients());
  for (size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(g3[i], 2 * g1[i], 1e-6 * scale) << i;
  one.zero_grad();
  for (float g : test::host_copy(one.gradients())) ASSERT_EQ(g, 0.0f);
}

TEST_P(ModelTest, MemoryPlansCoverWhatTheModelUses) {
  const Qwen2Config c = test::tiny_arch_config(GetParam());
  for (bool recompute : {false, true}) {
    ParamStore store(c, 0, 1);
    store.init_random(test::tiny_init());
    Qwen2Model m(store, tp, ModelOptions{recompute});
    HostBatch batch(kLengths, c.vocab_size, 15);
    const int64_t T = batch.T();
    Arena act(size_t(4) << 20, Device::cpu, "act"), scratch(size_t(1) << 20, Device::cpu, "scratch");
    act.alloc_bytes(100);  // an unaligned start
    const size_t start = act.used();
    ops::Ctx ctx;
    ctx.scratch = &scratch;
    std::vector<float> lp = test::zeros(T), ent = test::zeros(T);
    Activations saved;
    m.forward_train(ctx, act, batch.view(), 1.0f, tensor_f32(lp.data(), {T}), tensor_f32(ent.data(), {T}), saved);
    m.backward(ctx, act, saved, tensor_f32(lp.data(), {T}), Tensor{});
    EXPECT_EQ(act.used(), start);
    const size_t planned = m.train_activation_bytes(T);
    EXPECT_LE(act.peak() - start, planned) << "recompute " << recompute;
    EXPECT_GE(act.peak() - start + 2 * Arena::kAlign, planned) << "the plan is loose";
    EXPECT_LE(scratch.peak(), m.scratch_bytes(T, 8, 0, 64));  // at most 64 threads in CI
    EXPECT_EQ(scratch.used(), 0u);

    Arena act2(size_t(4) << 20, Device::cpu, "act2");
    std::vector<float> logits = test::zeros(T * c.vocab_size);
    m.forward_logits(ctx, act2, batch.view(), tensor_f32(logits.data(), {T, c.vocab_size}));
    m.forward_logprob(ctx, act2, batch.view(), 1.0f, tensor_f32(lp.data(), {T}), tensor_f32(ent.data(), {T}));
    EXPECT_LE(act2.peak(), m.inference_activation_bytes(T));
    EXPECT_LT(m.inference_activation_bytes(T), planned);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ModelTest, testing::ValuesIn(test::kTinyArchs),
                         [](const testing::TestParamInfo<test::TinyArch>& i) { return test::tiny_arch_name(i.param); });

TEST(ModelDeathTest, MisuseIsFatal) {
  const parallel::Comm tp = parallel::Comm::world();
  const Qwen2Config c = test::tiny_config(false);
  ParamStore other(c, 1, 2), store(c, 0, 1);
  store.init_random(test::tiny_init());
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([&] { Qwen2Model m(other, tp); }), "the parameter store holds tp rank 1 of 2");
  Qwen2Model m(store, tp);
  HostBatch batch(kLengths, c.vocab_size, 16);
  Workspace ws;
  std::vector<float> lp(size_t(batch.T())), ent(size_t(batch.T()));
  Activations none;
  EXPECT_DEATH(die([&] { m.backward(ws.ctx, ws.act, none, Tensor{}, Tensor{}); }),
               "backward without a forward_train");
  EXPECT_DEATH(die([&] {
                 m.forward_logprob(ws.ctx, ws.act, batch.view(), 1.0f, tensor_f32(lp.data(), {batch.T() - 1}),
                                   tensor_f32(ent.data(), {batch.T()}));
               }),
               "logprob has shape");
  EXPECT_DEATH(die([&] {
                 m.forward_logprob(ws.ctx, ws.act, batch.view(), 0.0f, tensor_f32(lp.data(), {batch.T()}),
                                   tensor_f32(ent.data(), {batch.T()}));
               }),
               "inv_temperature");
  PackedBatch bad = batch.view();
  bad.positions = tensor_i32(batch.positions.data(), {batch.T() - 1});
  EXPECT_DEATH(die([&] {
                 m.forward_logprob(ws.ctx, ws.act, bad, 1.0f, tensor_f32(lp.data(), {batch.T()}),
                                   tensor_f32(ent.data(), {batch.T()}));
               }),
               "batch.positions must be");
}

}  // namespace
}  // namespace dapo::model
