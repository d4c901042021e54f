// An independent, naive double-precision Qwen2 / Qwen3 forward for the model
// tests: plain loops over the HF formulas (RMSNorm, Qwen3's per-head q/k
// RMSNorm, rotate-half RoPE, causal GQA softmax attention, SwiGLU, tied or
// untied LM head), one sequence at a
// time, with full (unsliced) weights by HF name. It shares no code with the
// model under test, so agreement means both follow the formulas.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dapo/model/param_store.h"

namespace dapo::test {

using FullWeights = std::map<std::string, std::vector<double>>;

// The full tensors init_random gives every rank its slices of.
inline FullWeights full_random_weights(const model::Qwen2Config& c, const model::RandomInit& init) {
  FullWeights w;
  for (const model::ParamSpec& s : model::qwen2_param_specs(c)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::vector<double>& v = w[s.name];
    v.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = model::random_init_value(s, i, init);
  }
  return w;
}

struct ReferenceOutput {
  std::vector<double> logits;   // (T, V)
  std::vector<double> logprob;  // (T)
  std::vector<double> entropy;  // (T)
};

// tokens/positions/targets (T), cu_seqlens (B+1); targets may be empty.
inline ReferenceOutput reference_forward(const model::Qwen2Config& c, const FullWeights& w,
                                         const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                                         const std::vector<int32_t>& cu_seqlens, const std::vector<int32_t>& targets,
                                         double inv_temperature = 1.0) {
  const int64_t C = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size, V = c.vocab_size, T = int64_t(tokens.size());
  const double eps = c.rms_norm_eps;
  auto W = [&](const std::string& name) -> const std::vector<double>& { return w.at(name); };
  // y (n_out) = M (n_out, n_in) x + b
  auto matvec = [](const std::vector<double>& M, const double* x, int64_t n_out, int64_t n_in, double* y,
                   const std::vector<double>* b) {
    for (int64_t o = 0; o < n_out; ++o) {
      double s = b ? (*b)[size_t(o)] : 0.0;
      for (int64_t i = 0; i < n_in; ++i) s += M[size_t(o * n_in + i)] * x[i];
      y[o] = s;
    }
  };
  auto rmsnorm = [&](const double* x, const std::vector<double>& g, double* y) {
    double ms = 0;
    for (int64_t i = 0; i < C; ++i) ms += x[i] * x[i];
    const double r = 1.0 / std::sqrt(ms / double(C) + eps);
    for (int64_t i = 0; i < C; ++i) y[i] = x[i] * r * g[size_t(i)];
  };
  auto head_norm = [&](double* v, const std::vector<double>& g) {  // one head (D), in place
    double ms = 0;
    for (int64_t i = 0; i < D; ++i) ms += v[i] * v[i];
    const double r = 1.0 / std::sqrt(ms / double(D) + eps);
    for (int64_t i = 0; i < D; ++i) v[i] = v[i] * r * g[size_t(i)];
  };
  auto bias = [&](const std::string& name) { return w.count(name) ? &W(name) : nullptr; };
  auto rope = [&](double* v, int64_t pos) {  // one head (D), rotate-half pairs (i, i + D/2)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = double(pos) * std::pow(c.rope_theta, -2.0 * double(i) / double(D));
      const double a = v[i], b = v[i + D / 2];
      v[i] = a * std::cos(angle) - b * std::sin(angle);
      v[i + D / 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  };

  ReferenceOutput out;
  out.logits.assign(size_t(T * V), 0.0);
  auto buffer = [](int64_t n) { return std::vector<double>(size_t(n), 0.0); };
  std::vector<double> x = buffer(T * C), xn = buffer(T * C), q = buffer(T * Hq * D), k = buffer(T * Hkv * D),
                      v = buffer(T * Hkv * D), attn = buffer(T * Hq * D), tmp = buffer(C), g = buffer(I), u = buffer(I);
  const std::vector<double>& emb = W("model.embed_tokens.weight");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < C; ++i) x[size_t(t * C + i)] = emb[size_t(tokens[size_t(t)] * C + i)];

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (int64_t t = 0; t < T; ++t) {
      rmsnorm(&x[size_t(t * C)], W(p + "input_layernorm.weight"), &xn[size_t(t * C)]);
      matvec(W(p + "self_attn.q_proj.weight"), &xn[size_t(t * C)], Hq * D, C, &q[size_t(t * Hq * D)],
             bias(p + "self_attn.q_proj.bias"));
      matvec(W(p + "self_attn.k_proj.weight"), &xn[size_t(t * C)], Hkv * D, C, &k[size_t(t * Hkv * D)],
             bias(p + "self_attn.k_proj.bias"));
      matvec(W(p + "self_attn.v_proj.weight"), &xn[size_t(t * C)], Hkv * D, C, &v[size_t(t * Hkv * D)],
             bias(p + "self_attn.v_proj.bias"));
      if (c.qk_norm()) {
        for (int64_t h = 0; h < Hq; ++h) head_norm(&q[size_t((t * Hq + h) * D)], W(p + "self_attn.q_norm.weight"));
        for (int64_t h = 0; h < Hkv; ++h) head_norm(&k[size_t((t * Hkv + h) * D)], W(p + "self_attn.k_norm.weight"));
      }
      for (int64_t h = 0; h < Hq; ++h) rope(&q[size_t((t * Hq + h) * D)], positions[size_t(t)]);
      for (int64_t h = 0; h < Hkv; ++h) rope(&k[size_t((t * Hkv + h) * D)], positions[size_t(t)]);
    }
    for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
      const int64_t start = cu_seqlens[s], end = cu_seqlens[s + 1];
      for (int64_t i = start; i < end; ++i)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t kh = h / (Hq / Hkv);
          std::vector<double> sc = buffer(i - start + 1);
          double m = -1e300;
          for (int64_t j = start; j <= i; ++j) {
            double d = 0;
            for (int64_t e = 0; e < D; ++e) d += q[size_t((i * Hq + h) * D + e)] * k[size_t((j * Hkv + kh) * D + e)];
            sc[size_t(j - start)] = d / std::sqrt(double(D));
            m = std::max(m, sc[size_t(j - start)]);
          }
          double z = 0;
          for (double& e : sc) z += (e = std::exp(e - m));
          for (int64_t e = 0; e < D; ++e) {
            double acc = 0;
            for (int64_t j = start; j <= i; ++j) acc += sc[size_t(j - start)] * v[size_t((j * Hkv + kh) * D + e)];
            attn[size_t((i * Hq + h) * D + e)] = acc / z;
          }
        }
    }
    for (int64_t t = 0; t < T; ++t) {
      double* xt = &x[size_t(t * C)];
      matvec(W(p + "self_attn.o_proj.weight"), &attn[size_t(t * Hq * D)], C, Hq * D, tmp.data(),
             bias(p + "self_attn.o_proj.bias"));
      for (int64_t i = 0; i < C; ++i) xt[i] += tmp[size_t(i)];
      rmsnorm(xt, W(p + "post_attention_layernorm.weight"), &xn[size_t(t * C)]);
      matvec(W(p + "mlp.gate_proj.weight"), &xn[size_t(t * C)], I, C, g.data(), nullptr);
      matvec(W(p + "mlp.up_proj.weight"), &xn[size_t(t * C)], I, C, u.data(), nullptr);
      for (int64_t i = 0; i < I; ++i) g[size_t(i)] = g[size_t(i)] / (1.0 + std::exp(-g[size_t(i)])) * u[size_t(i)];
      matvec(W(p + "mlp.down_proj.weight"), g.data(), C, I, tmp.data(), nullptr);
      for (int64_t i = 0; i < C; ++i) xt[i] += tmp[size_t(i)];
    }
  }
  const std::vector<double>& head = c.tie_word_embeddings ? emb : W("lm_head.weight");
  for (int64_t t = 0; t < T; ++t) {
    rmsnorm(&x[size_t(t * C)], W("model.norm.weight"), &xn[size_t(t * C)]);
    matvec(head, &xn[size_t(t * C)], V, C, &out.logits[size_t(t * V)], nullptr);
  }
  if (targets.empty()) return out;
  for (int64_t t = 0; t < T; ++t) {
    const double* z = &out.logits[size_t(t * V)];
    double m = -1e300;
    for (int64_t i = 0; i < V; ++i) m = std::max(m, z[i] * inv_temperature);
    double s = 0, sz = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double e = std::exp(z[i] * inv_temperature - m);
      s += e;
      sz += e * z[i] * inv_temperature;
    }
    const double lse = m + std::log(s);
    out.logprob.push_back(z[targets[size_t(t)]] * inv_temperature - lse);
    out.entropy.push_back(lse - sz / s);
  }
  return out;
}

}  // namespace dapo::test
