// The Qwen2 model on one GPU (bf16 weights and activations, fp32 gradients)
// against HF transformers (the small_d64 fixture: fp32 on the CPU) and
// against dapo's own CPU model (fp32), at bf16 tolerance; the GPU backward
// bit for bit over two runs and with/without activation recompute; one
// AdamW step on the GPU against the CPU's.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>

#include "dapo/io/safetensors.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/matmul.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/update_step.h"
#include "gpu/gpu_test_util.h"
#include "model/fixture_util.h"
#include "model/model_test_util.h"
#include "cuda/cuda_ops.h"

namespace dapo::test {
namespace {

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

class ModelGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    act_ = std::make_unique<Arena>(size_t(256) << 20, Device::cuda, "gpu-act");
  }

  // A store on the GPU, on the device's stream.
  std::unique_ptr<model::ParamStore> gpu_store(const model::Qwen2Config& c) {
    return std::make_unique<model::ParamStore>(c, 0, 1, Device::cuda, gpu().stream);
  }

  // forward_train + backward of sum(w*logprob + u*entropy) on the GPU; the
  // gradients accumulate into the model's store.
  void gpu_train_step(model::Qwen2Model& m, HostBatch& batch, const std::vector<float>& w,
                      const std::vector<float>& u, std::vector<float>& logprob, std::vector<float>& entropy) {
    const int64_t T = batch.T();
    model::PackedBatch b;
    b.tokens = upload_raw(batch.tokens, {T});
    b.positions = upload_raw(batch.positions, {T});
    b.cu_seqlens = upload_raw(batch.cu_seqlens, {batch.B() + 1});
    b.targets = upload_raw(batch.targets, {T});
    for (int64_t s = 0; s < batch.B(); ++s)
      b.max_seqlen = std::max<int64_t>(b.max_seqlen, batch.cu_seqlens[size_t(s + 1)] - batch.cu_seqlens[size_t(s)]);
    Tensor lp = device_empty(DType::f32, {T}), en = device_empty(DType::f32, {T});
    Tensor dw = upload(w, {T}), du = upload(u, {T});
    model::Activations saved;
    m.forward_train(gpu(), *act_, b, 1.0f, lp, en, saved);
    m.backward(gpu(), *act_, saved, dw, du);
    device_->synchronize();
    logprob = download(lp);
    entropy = download(en);
    const ops::DeviceFlags f = device_->read_flags();
    EXPECT_EQ(f.bad_id_count, 0);
    EXPECT_EQ(f.non_finite_count, 0);
  }

  std::vector<float> grad_of(const model::ParamStore& s, const std::string& name) {
    return download(s.grad(name));
  }

  std::unique_ptr<Arena> act_;
  parallel::Comm tp_ = parallel::Comm::world();
};

class ModelGpuFixture : public ModelGpu, public ::testing::WithParamInterface<std::string> {};

TEST_P(ModelGpuFixture, MatchesHfFixtureInBf16) {
  const std::string dir = fixtures_dir() + "/model/" + GetParam();
  if (!std::filesystem::exists(dir + "/expected.safetensors"))
    GTEST_SKIP() << dir << " is absent: run tests/fixtures/model/make_fixture.py --only " << GetParam();
  const model::Qwen2Config config = model::load_qwen2_config(dir + "/config.json");
  auto store = gpu_store(config);
  const io::SafetensorsFile weights(dir + "/model.safetensors");
  for (const model::ParamEntry& e : store->entries()) {
    const std::vector<float> v = read_f32(weights, e.spec.name);
    store->load_full(e.spec.name, v.data(), int64_t(v.size()));
  }
  const io::SafetensorsFile expected(dir + "/expected.safetensors");
  HostBatch batch;
  batch.tokens = read_i32(expected, "tokens");
  batch.positions = read_i32(expected, "positions");
  batch.cu_seqlens = read_i32(expected, "cu_seqlens");
  batch.targets = read_i32(expected, "targets");
  const std::vector<float> w = read_f32(expected, "w"), u = read_f32(expected, "u");
  for (bool recompute : {false, true}) {
    store->zero_grad();
    model::Qwen2Model m(*store, tp_, model::ModelOptions{recompute});
    std::vector<float> lp, ent;
    gpu_train_step(m, batch, w, u, lp, ent);
    // bf16 weights and activations: log-probs within a few hundredths.
    const std::vector<float> want_lp = read_f32(expected, "logprob"), want_ent = read_f32(expected, "entropy");
    for (size_t t = 0; t < lp.size(); ++t) {
      EXPECT_NEAR(lp[t], want_lp[t], 0.05 + 0.02 * std::fabs(want_lp[t])) << "logprob " << t;
      EXPECT_NEAR(ent[t], want_ent[t], 0.05 + 0.02 * std::fabs(want_ent[t])) << "entropy " << t;
    }
    for (const model::ParamEntry& e : store->entries()) {
      const std::vector<float> g = grad_of(*store, e.spec.name);
      ASSERT_TRUE(all_finite(g)) << e.spec.name;
      EXPECT_LT(rel_error(g, read_f32(expected, "grad." + e.spec.name)), 0.05) << "grad." << e.spec.name;
    }
  }
}

// Head dims 64 and 16 (tiny_tied's 8 is below the attention kernels' 16);
// Qwen3's 128, 32 and 16 (the last with q/k/v/o biases and tied embeddings).
INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGpuFixture,
                         ::testing::Values("small_d64", "tiny_untied", "qwen3_d128", "qwen3_untied", "qwen3_tied_bias"),
                         [](const auto& info) { return info.param; });

// A model of real proportions (head dim 128, GQA 4:1, a vocabulary that is
// not a power of two) on a packed batch with a long and a one-token
// sequence: the GPU against the CPU model, and the GPU against itself.
model::Qwen2Config mid_config() { return test::mid_config(1, 4096); }

// The same tests on Qwen2 (mid_config) and on Qwen3 (q/k norms: the CUDA
// decode step's fused norm + RoPE + cache write; q_proj and o_proj not
// square).
class ModelGpuArch : public ModelGpu, public ::testing::WithParamInterface<bool> {
 protected:
  model::Qwen2Config arch_config() const { return GetParam() ? test::mid_qwen3_config(4096) : mid_config(); }
};
INSTANTIATE_TEST_SUITE_P(Archs, ModelGpuArch, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "qwen3" : "qwen2"; });

model::RandomInit mid_init() {
  model::RandomInit init;
  init.seed = 11;
  init.weight_scale = 0.06f;
  init.bias_scale = 0.1f;
  init.norm_scale = 0.2f;
  return init;
}

TEST_P(ModelGpuArch, MatchesCpuModelAndIsDeterministic) {
  const model::Qwen2Config c = arch_config();
  HostBatch batch({700, 1, 129, 64}, c.vocab_size, 5);
  const int64_t T = batch.T();
  const std::vector<float> w = uniform_vector(size_t(T), 1), u = uniform_vector(size_t(T), 2);

  // The CPU reference in fp32, from the same (bf16-representable) weights.
  model::ParamStore cpu_store(c, 0, 1);
  cpu_store.init_random(mid_init());
  for (const model::ParamEntry& e : cpu_store.entries()) {
    float* p = e.param.ptr<float>();
    for (int64_t i = 0; i < e.param.numel(); ++i) p[i] = to_f32(to_bf16(p[i]));
  }
  std::vector<float> cpu_lp, cpu_ent;
  {
    model::Qwen2Model m(cpu_store, tp_);
    Workspace ws;
    Arena big_act(size_t(256) << 20, Device::cpu, "cpu-act"), big_scratch(size_t(64) << 20, Device::cpu, "cpu-s");
    ws.ctx.scratch = &big_scratch;
    model::Activations saved;
    cpu_lp.assign(size_t(T), 0);
    cpu_ent.assign(size_t(T), 0);
    m.forward_train(ws.ctx, big_act, batch.view(), 1.0f, tensor_f32(cpu_lp.data(), {T}),
                    tensor_f32(cpu_ent.data(), {T}), saved);
    std::vector<float> dw(w), du(u);
    m.backward(ws.ctx, big_act, saved, tensor_f32(dw.data(), {T}), tensor_f32(du.data(), {T}));
  }

  auto store = gpu_store(c);
  for (const model::ParamEntry& e : cpu_store.entries())
    store->load_local(e.spec.name, e.param.ptr<float>(), e.param.numel());
  std::vector<std::vector<float>> grads[3];
  for (int run = 0; run < 3; ++run) {  // 0, 1: the same call twice; 2: with recompute
    store->zero_grad();
    model::Qwen2Model m(*store, tp_, model::ModelOptions{run == 2});
    std::vector<float> lp, ent;
    gpu_train_step(m, batch, w, u, lp, ent);
    for (const model::ParamEntry& e : store->entries()) grads[run].push_back(grad_of(*store, e.spec.name));
    if (run > 0) continue;
    EXPECT_LT(rel_error(lp, cpu_lp), 0.02) << "logprob";
    EXPECT_LT(rel_error(ent, cpu_ent), 0.02) << "entropy";
    size_t i = 0;
    for (const model::ParamEntry& e : cpu_store.entries()) {
      EXPECT_LT(rel_error(grads[0][i], host_copy(e.grad)), 0.05) << "grad " << e.spec.name;
      ++i;
    }
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_EQ(grads[0][i], grads[1][i]) << "run to run, tensor " << i;
    EXPECT_EQ(grads[0][i], grads[2][i]) << "with recompute, tensor " << i;
  }
}

// Generation's forward over the paged KV cache on the GPU (bf16 cache,
// kv_cache_write + paged_attention, or attention_forward for the fresh
// prefill): a prefill of three prompts,
// then decode steps, against the CPU model's cached forward fed the same
// tokens (the CPU's greedy choices), at bf16 tolerance; the greedy tokens
// agree wherever the CPU's top-1/top-2 margin is clear of bf16 noise.
TEST_P(ModelGpuArch, CachedForwardMatchesCpu) {
  const model::Qwen2Config c = arch_config();
  model::ParamStore cpu_store(c, 0, 1);
  cpu_store.init_random(mid_init());
  for (const model::ParamEntry& e : cpu_store.entries()) {
    float* p = e.param.ptr<float>();
    for (int64_t i = 0; i < e.param.numel(); ++i) p[i] = to_f32(to_bf16(p[i]));
  }
  auto store = gpu_store(c);
  for (const model::ParamEntry& e : cpu_store.entries())
    store->load_local(e.spec.name, e.param.ptr<float>(), e.param.numel());
  const model::Qwen2Model cpu_model(cpu_store, tp_), gpu_model(*store, tp_);

  const int64_t blocks = 96, bs = 16, V = c.vocab_size;
  Arena cpu_kv(model::kv_cache_bytes(c, 1, blocks, bs), Device::cpu, "cpu-kv");
  Arena gpu_kv(model::kv_cache_bytes(c, 1, blocks, bs, Device::cuda), Device::cuda, "gpu-kv");
  const model::KvCache cpu_cache = model::allocate_kv_cache(cpu_kv, c, 1, blocks, bs);
  const model::KvCache gpu_cache = model::allocate_kv_cache(gpu_kv, c, 1, blocks, bs);
  ASSERT_EQ(gpu_cache.k[0].dtype, DType::bf16);
  // Twice: step 0 through the paged kernel, then as a fresh prefill
  // (CachedBatch::fresh_max_seqlen: the flash kernels over the new tokens);
  // with prompts of 575 rows in all, whose prefill adds the residual in
  // the row-parallel products (ops::linear_residual_preferred); and of 1,055,
  // whose prefill also takes the wide gate/up + SwiGLU kernel
  // (linear_swiglu_wide_preferred).
  // (sm_90a builds: the 1,055-row prefill is the wide kernel's.)
  EXPECT_EQ(ops::cuda::detail::linear_swiglu_wide_preferred(1055, c.hidden_size, c.intermediate_size),
            ops::cuda::detail::linear_swiglu_wide_preferred(4096, 896, 4864));
  for (const auto& [fresh, lens] :
       {std::pair{false, std::vector<int64_t>{37, 5, 70}}, {true, {37, 5, 70}}, {false, {300, 5, 270}},
        {true, {300, 5, 270}}, {false, {600, 5, 450}}, {true, {600, 5, 450}}}) {
    SCOPED_TRACE(std::string(fresh ? "fresh prefill through attention_forward" : "prefill through paged_attention") +
                 ", prompts of " + std::to_string(lens[0]) + ", " + std::to_string(lens[1]) + ", " +
                 std::to_string(lens[2]));
    BlockPool pool(blocks, bs, 3);
    Arena cpu_act(size_t(64) << 20, Device::cpu, "cpu-act"), cpu_scratch(size_t(64) << 20, Device::cpu, "cpu-s");
    ops::Ctx host;
    host.scratch = &cpu_scratch;

    HostBatch prompts(lens, V, 21);
    std::vector<std::vector<int32_t>> next(3), tables(3);
    for (size_t b = 0; b < 3; ++b)
      next[b].assign(prompts.tokens.begin() + prompts.cu_seqlens[b],
                     prompts.tokens.begin() + prompts.cu_seqlens[b + 1]);
    std::vector<int64_t> cached(3, 0);
    int64_t clear = 0, agree = 0;
    for (int step = 0; step < 8; ++step) {  // step 0: the prompts (multi-token queries); then decode
      for (size_t b = 0; b < 3; ++b) pool.reserve(tables[b], cached[b] + int64_t(next[b].size()));
      HostCachedStep s(next, cached, tables, pool);
      const int64_t N = int64_t(s.tokens.size()), B = 3;
      std::vector<float> cpu_logits(size_t(B * V)), gpu_logits;
      cpu_model.forward_cached(host, cpu_act, cpu_cache, s.view(), tensor_f32(cpu_logits.data(), {B, V}));
      model::CachedBatch d;
      d.tokens = upload_raw(s.tokens, {N});
      d.positions = upload_raw(s.positions, {N});
      d.cu_seqlens_q = upload_raw(s.cu_seqlens_q, {B + 1});
      d.last_rows = upload_raw(s.last_rows, {B});
      d.slot_mapping = upload_raw(s.slot_mapping, {N});
      d.block_table = upload_raw(s.block_table, {B, s.max_blocks});
      d.context_lens = upload_raw(s.context_lens, {B});
      for (int32_t n : s.context_lens) d.max_context_len = std::max<int64_t>(d.max_context_len, n);
      if (fresh && step == 0)
        for (const auto& t : next) d.fresh_max_seqlen = std::max<int64_t>(d.fresh_max_seqlen, int64_t(t.size()));
      Tensor logits = device_empty(DType::f32, {B, V});
      gpu_model.forward_cached(gpu(), *act_, gpu_cache, d, logits);
      gpu_logits = download(logits);
      ASSERT_TRUE(all_finite(gpu_logits)) << "step " << step;
      EXPECT_LT(rel_error(gpu_logits, cpu_logits), 0.02) << "step " << step;
      for (size_t b = 0; b < 3; ++b) {
        const float* cr = cpu_logits.data() + b * size_t(V);
        const float* gr = gpu_logits.data() + b * size_t(V);
        const int64_t ct = std::max_element(cr, cr + V) - cr, gt = std::max_element(gr, gr + V) - gr;
        std::vector<float> sorted(cr, cr + V);
        std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
        if (sorted[0] - sorted[1] > 0.05f) {
          ++clear;
          agree += ct == gt;
        }
        cached[b] += int64_t(next[b].size());
        next[b] = {int32_t(ct)};  // both backends continue with the CPU's choice
      }
    }
    EXPECT_GT(clear, 0);
    EXPECT_EQ(agree, clear) << "greedy tokens with a clear margin";
  }
  const ops::DeviceFlags f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count + f.non_finite_count, 0);
}

// The whole update path (UpdateRunner: staging, forward, host loss,
// backward, AdamW) twice from the same start on the same GPU: the same bits.
TEST_F(ModelGpu, TwoRunsOfTheSameUpdateGiveIdenticalWeights) {
  const model::Qwen2Config c = mid_config();
  const parallel::Grid grid = parallel::make_grid(1);
  trainer::MicroBatch mb;
  HostBatch hb({300, 7, 129}, c.vocab_size, 9);
  mb.tokens = hb.tokens, mb.positions = hb.positions, mb.cu_seqlens = hb.cu_seqlens, mb.targets = hb.targets;
  mb.mask.assign(hb.tokens.size(), 1);
  const std::vector<trainer::MicroBatch> micro{mb, mb};  // two micro-batches: gradients accumulate
  const trainer::TokenGradient ce = [](const trainer::MicroBatch& m, const trainer::ForwardOutputs&,
                                       std::span<float> dlogprob, std::span<float>) {
    for (size_t t = 0; t < m.tokens.size(); ++t) dlogprob[t] = -1.0f / float(m.tokens.size());
  };
  std::vector<std::vector<float>> weights[2];
  for (int run = 0; run < 2; ++run) {
    auto store = gpu_store(c);
    store->init_random(mid_init());
    model::Qwen2Model m(*store, grid.tp, model::ModelOptions{true});
    optim::AdamW opt(*store, optim::AdamWOptions{});
    trainer::UpdateRunner runner(m, &opt, grid, device_.get());
    for (int step = 0; step < 3; ++step) runner.step(micro, ce, 1e-3);
    for (const model::ParamEntry& e : store->entries()) {
      weights[run].push_back(download(store->param(e.spec.name)));
      weights[run].push_back(download(e.compute));
    }
  }
  for (size_t i = 0; i < weights[0].size(); ++i) ASSERT_EQ(weights[0][i], weights[1][i]) << "tensor " << i / 2;
}

TEST_F(ModelGpu, AdamWStepWritesMasterAndBf16Copy) {
  const model::Qwen2Config c = mid_config();
  model::ParamStore cpu_store(c, 0, 1);
  cpu_store.init_random(mid_init());
  auto store = gpu_store(c);
  for (const model::ParamEntry& e : cpu_store.entries()) {
    store->load_local(e.spec.name, e.param.ptr<float>(), e.param.numel());
    // The same gradient on both: a deterministic function of the element.
    std::vector<float> g(size_t(e.grad.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.37f * float(i) + float(e.offset % 97));
    std::copy(g.begin(), g.end(), e.grad.ptr<float>());
    device_->copy_to_device(store->grad(e.spec.name), tensor_f32(g.data(), {int64_t(g.size())}));
  }
  optim::AdamWOptions o;
  optim::AdamW cpu_opt(cpu_store, o), gpu_opt(*store, o);
  ops::Ctx host;
  host.scratch = host_scratch_.get();
  for (int step = 0; step < 2; ++step) {
    const optim::StepReport rc = cpu_opt.step(host, {}, 1e-3);
    const optim::StepReport rg = gpu_opt.step(gpu(), {}, 1e-3);
    EXPECT_NEAR(rg.grad_norm, rc.grad_norm, 1e-5 * rc.grad_norm);
  }
  device_->synchronize();
  for (const model::ParamEntry& e : cpu_store.entries()) {
    const std::vector<float> got = download(store->param(e.spec.name));
    const std::vector<float> want = host_copy(e.param);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << e.spec.name;
    // The compute copy is the master rounded to bf16.
    const std::vector<float> copy = download(store->entry(e.spec.name).compute);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(copy[i], to_f32(to_bf16(got[i]))) << e.spec.name << " " << i;
  }
}

}  // namespace
}  // namespace dapo::test
