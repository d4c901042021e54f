// ParamStore: HF order, 256-byte aligned views inside one buffer, tied
// embeddings, zeroed gradients, random init that gives every tp split the
// same logical model, loads from host buffers, and its fatal misuse.
#include "dapo/model/param_store.h"

#include <gtest/gtest.h>

#include <cstring>

#include "model/model_test_util.h"

namespace dapo::model {
namespace {

std::vector<float> local_values(const ParamStore& s, const std::string& name) {
  std::vector<float> v(size_t(s.param(name).numel()));
  s.read_local(name, v.data(), int64_t(v.size()));
  return v;
}

TEST(ParamStore, HfOrderAlignedViewsInOneBuffer) {
  for (bool tied : {false, true}) {
    const Qwen2Config c = test::tiny_config(tied);
    const ParamStore s(c, 0, 1);
    const std::vector<ParamSpec> specs = qwen2_param_specs(c);
    ASSERT_EQ(s.entries().size(), specs.size());
    const float* base = static_cast<const float*>(s.parameters().data);
    const float* gbase = static_cast<const float*>(s.gradients().data);
    int64_t end = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamEntry& e = s.entries()[i];
      EXPECT_EQ(e.spec.name, specs[i].name);
      EXPECT_EQ(e.offset % 64, 0) << e.spec.name;  // 256 bytes
      EXPECT_GE(e.offset, end) << e.spec.name;
      EXPECT_LT(e.offset, end + 64) << e.spec.name << ": more padding than alignment needs";
      EXPECT_EQ(e.param.data, base + e.offset);
      EXPECT_EQ(e.grad.data, gbase + e.offset);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(e.param.data) % 256, 0u);
      ASSERT_EQ(size_t(e.param.ndim), e.spec.shape.size());
      for (int d = 0; d < e.param.ndim; ++d) EXPECT_EQ(e.param.shape[d], e.spec.shape[size_t(d)]);
      EXPECT_TRUE(e.grad.same_shape(e.param));
      EXPECT_EQ(&s.entry(e.spec.name), &e);
      end = e.offset + e.param.numel();
    }
    EXPECT_GE(s.buffer_elements(), end);
    EXPECT_EQ(s.gradients().numel(), s.buffer_elements());
    EXPECT_EQ(s.contains("lm_head.weight"), !tied);
    EXPECT_EQ(s.lm_head().spec.name, tied ? "model.embed_tokens.weight" : "lm_head.weight");
    int64_t total = 0;
    for (const ParamSpec& p : specs) total += p.shape.size() == 2 ? p.shape[0] * p.shape[1] : p.shape[0];
    EXPECT_EQ(s.num_local_parameters(), total);
  }
}

TEST(ParamStore, TpSlicesHaveLocalShapes) {
  const Qwen2Config c = test::tiny_config(false);  // 4 heads of 8, 2 KV heads
  const ParamStore s(c, 1, 4);                      // tp 4 > Hkv: KV heads replicated
  EXPECT_EQ(s.param("model.embed_tokens.weight").shape[0], 16);
  EXPECT_EQ(s.param("model.layers.0.self_attn.q_proj.weight").shape[0], 8);
  EXPECT_EQ(s.param("model.layers.0.self_attn.k_proj.weight").shape[0], 8);  // one whole KV head
  EXPECT_EQ(s.param("model.layers.0.self_attn.o_proj.weight").shape[1], 8);
  EXPECT_EQ(s.param("model.layers.0.mlp.down_proj.weight").shape[1], 12);
  EXPECT_EQ(s.param("model.norm.weight").shape[0], 32);
}

TEST(ParamStore, PrimaryCopiesCountEveryElementOnce) {
  const Qwen2Config c = test::tiny_config(false);
  const ParamStore full(c, 0, 1);
  for (int64_t tp : {1, 2, 4}) {  // tp 4 > Hkv = 2: KV heads held twice
    int64_t primary = 0, held = 0;
    for (int64_t r = 0; r < tp; ++r) {
      const ParamStore s(c, r, tp);
      for (const ParamEntry& e : s.entries()) {
        held += e.param.numel();
        if (e.primary) primary += e.param.numel();
      }
    }
    EXPECT_EQ(primary, full.num_local_parameters()) << "tp " << tp;
    if (tp > 1) EXPECT_GT(held, primary) << "tp " << tp;
  }
  EXPECT_FALSE(ParamStore(c, 1, 4).entry("model.layers.0.self_attn.k_proj.weight").primary);
  EXPECT_TRUE(ParamStore(c, 2, 4).entry("model.layers.0.self_attn.k_proj.weight").primary);
  EXPECT_FALSE(ParamStore(c, 1, 2).entry("model.norm.weight").primary);
}

TEST(ParamStore, ZeroBuffersAndZeroGrad) {
  ParamStore s(test::tiny_config(false), 0, 1);
  s.init_random(test::tiny_init());
  const float* g = static_cast<const float*>(s.gradients().data);
  for (int64_t i = 0; i < s.buffer_elements(); ++i) ASSERT_EQ(g[i], 0.0f) << i;
  // Padding of the master buffer stays zero after init.
  const float* p = static_cast<const float*>(s.parameters().data);
  int64_t end = 0;
  for (const ParamEntry& e : s.entries()) {
    for (int64_t i = end; i < e.offset; ++i) ASSERT_EQ(p[i], 0.0f) << "padding before " << e.spec.name;
    end = e.offset + e.param.numel();
  }
  for (int64_t i = 0; i < s.buffer_elements(); ++i) static_cast<float*>(s.gradients().data)[i] = 1.5f;
  s.zero_grad();
  for (int64_t i = 0; i < s.buffer_elements(); ++i) ASSERT_EQ(g[i], 0.0f) << i;
}

TEST(ParamStore, RandomInitValuesByKind) {
  ParamStore s(test::tiny_config(false), 0, 1);
  RandomInit init = test::tiny_init(3);
  s.init_random(init);
  auto range = [&](const std::string& name, float lo, float hi) {
    const std::vector<float> v = local_values(s, name);
    float mn = v[0], mx = v[0];
    for (float x : v) mn = std::min(mn, x), mx = std::max(mx, x);
    EXPECT_GE(mn, lo) << name;
    EXPECT_LE(mx, hi) << name;
    EXPECT_LT(mn, lo + 0.2f * (hi - lo)) << name << ": values do not fill their range";
    EXPECT_GT(mx, hi - 0.2f * (hi - lo)) << name << ": values do not fill their range";
  };
  range("model.embed_tokens.weight", -init.weight_scale, init.weight_scale);
  range("model.layers.1.mlp.down_proj.weight", -init.weight_scale, init.weight_scale);
  range("model.layers.0.self_attn.q_proj.bias", -init.bias_scale, init.bias_scale);
  range("model.layers.0.input_layernorm.weight", 1 - init.norm_scale, 1 + init.norm_scale);
  range("model.norm.weight", 1 - init.norm_scale, 1 + init.norm_scale);
  // Another seed, another model; another tensor, other values.
  ParamStore s2(test::tiny_config(false), 0, 1);
  init.seed = 4;
  s2.init_random(init);
  EXPECT_NE(local_values(s, "model.layers.0.self_attn.k_proj.weight"),
            local_values(s2, "model.layers.0.self_attn.k_proj.weight"));
  EXPECT_NE(local_values(s, "model.layers.0.self_attn.k_proj.weight"),
            local_values(s, "model.layers.0.self_attn.v_proj.weight"));
}

TEST(ParamStore, RandomInitIsTheSameLogicalModelForEveryTp) {
  const Qwen2Config c = test::tiny_config(false);
  ParamStore full(c, 0, 1);
  full.init_random(test::tiny_init());
  for (int64_t tp : {2, 4}) {
    for (int64_t r = 0; r < tp; ++r) {
      ParamStore s(c, r, tp);
      s.init_random(test::tiny_init());
      for (const ParamEntry& e : s.entries()) {
        const std::vector<float> whole = local_values(full, e.spec.name);
        std::vector<float> want(size_t(e.param.numel()));
        extract_slice(e.slice, e.spec.shape, whole.data(), want.data());
        EXPECT_EQ(local_values(s, e.spec.name), want) << e.spec.name << " tp " << tp << " rank " << r;
      }
    }
  }
}

TEST(ParamStore, LoadFullLoadLocalReadLocal) {
  const Qwen2Config c = test::tiny_config(false);
  ParamStore s(c, 1, 2);
  const std::string name = "model.layers.0.self_attn.o_proj.weight";  // (32, 32), columns split
  std::vector<float> full(32 * 32);
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(i);
  s.load_full(name, full.data(), int64_t(full.size()));
  const std::vector<float> got = local_values(s, name);
  ASSERT_EQ(got.size(), 32u * 16u);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t j = 0; j < 16; ++j) EXPECT_EQ(got[size_t(r * 16 + j)], float(r * 32 + 16 + j));
  std::vector<float> local(got.size());
  for (size_t i = 0; i < local.size(); ++i) local[i] = -float(i);
  s.load_local(name, local.data(), int64_t(local.size()));
  EXPECT_EQ(local_values(s, name), local);
  // Rows split: embed_tokens rank 1 of 2 holds vocabulary ids 32..63.
  std::vector<float> emb(64 * 32);
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = float(i) * 0.5f;
  s.load_full("model.embed_tokens.weight", emb.data(), int64_t(emb.size()));
  const std::vector<float> e = local_values(s, "model.embed_tokens.weight");
  EXPECT_EQ(e.front(), emb[32 * 32]);
  EXPECT_EQ(e.back(), emb.back());
}

TEST(ParamStore, SliceExtractInsertRoundTrip) {
  const std::vector<int64_t> shape{4, 6};
  std::vector<float> full(24);
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(i);
  for (int dim : {-1, 0, 1}) {
    SliceSpec s;
    s.dim = dim;
    s.begin = dim == 0 ? 1 : 2;
    s.count = dim == 0 ? 2 : 3;
    const size_t n = dim == -1 ? 24 : dim == 0 ? 12 : 12;
    std::vector<float> local(n, -1.0f);
    extract_slice(s, shape, full.data(), local.data());
    if (dim == 0) EXPECT_EQ(local[0], 6.0f);
    if (dim == 1) EXPECT_EQ(local[3], 8.0f);  // row 1, column 2
    std::vector<float> back(24, 0.0f);
    insert_slice(s, shape, local.data(), back.data());
    for (size_t i = 0; i < 24; ++i) {
      const int64_t r = int64_t(i) / 6, col = int64_t(i) % 6;
      const bool inside = dim == -1 || (dim == 0 && r >= 1 && r < 3) || (dim == 1 && col >= 2 && col < 5);
      EXPECT_EQ(back[i], inside ? full[i] : 0.0f) << "dim " << dim << " index " << i;
    }
  }
}

TEST(ParamStoreDeathTest, MisuseIsFatal) {
  ParamStore s(test::tiny_config(true), 0, 1);
  std::vector<float> buf(64 * 32 + 1);
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);  // a forked child must not MPI_Abort the parent's job
    f();
  };
  EXPECT_DEATH(die([&] { s.param("lm_head.weight"); }), "the model has no parameter 'lm_head.weight'");
  EXPECT_DEATH(die([&] { s.load_full("model.embed_tokens.weight", buf.data(), int64_t(buf.size())); }),
               "2049 elements given, the full tensor has 2048");
  EXPECT_DEATH(die([&] { s.load_local("model.norm.weight", buf.data(), 31); }),
               "31 elements given, this rank's slice has 32");
  EXPECT_DEATH(die([&] { s.read_local("model.norm.weight", buf.data(), 33); }), "room for 33 elements");
  EXPECT_DEATH(die([&] { ParamStore bad(test::tiny_config(true), 2, 2); }), "tp rank 2 of 2");
}

}  // namespace
}  // namespace dapo::model
