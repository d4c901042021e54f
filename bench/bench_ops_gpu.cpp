// The CUDA ops one at a time: each measurement is the median of CUDA-event
// timed repetitions after warm-ups (eager calls, or replays of a captured
// CUDA graph where the engine replays its decode steps: the products and
// paged attention, with weights rotating through a pool larger than L2 as a
// decode step reads each weight once), printed as one JSON line: op,
// variant, shape, dtype, ms, and GB/s (the fewest bytes the op must move)
// and/or TFLOP/s with their fractions of the H200's 4.8 TB/s and 989 TFLOP/s
// (bf16 dense). --sweep runs an op's tuning sweep instead (the data the
// plans in cuda/ and ops/plan/ were fitted to): the skinny GEMM's plans, the
// fused SwiGLU's tile widths, paged attention's forced splits.
//   bench_ops_gpu --list
//   bench_ops_gpu --op NAME[,NAME...]|all [--sweep [--part tail|mid]] [--shape K=V[:V...],...]
//                 [--reps 20] [--warmup 3]
// --shape replaces an op's default sizes (the keys --list names), e.g.
//   bench_ops_gpu --op rmsnorm --shape N=4096,C=896
//   bench_ops_gpu --op linear_multi --sweep --shape M=64:128
// Correctness is test_gpu's (tests/gpu); nothing here checks results.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "dapo/ops/cuda_device.h"

#ifdef DAPO_WITH_CUDA
#include <numeric>

#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"
#include "dapo/core/rng.h"
#include "dapo/ops/adamw.h"
#include "dapo/ops/attention.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/embedding.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/logprob.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sum_squares.h"
#include "dapo/ops/swiglu.h"
#include "ops_bench_util.h"
#endif

namespace {

struct OpInfo {
  const char* name;
  const char* what;
  const char* keys;   // the --shape keys it reads
  const char* sweep;  // what --sweep runs, or nullptr
};

const OpInfo kOps[] = {
    {"rmsnorm", "rmsnorm_forward/backward, residual_rmsnorm_forward (separate and in place)/backward, bf16",
     "N C", nullptr},
    {"swiglu", "swiglu_forward/backward, bf16", "N I", nullptr},
    {"rope", "rope_forward, rope_backward in place, bf16", "T H D (H, D zipped)", nullptr},
    {"rope_kv_write", "the fused decode prologue against rope x2 + kv_cache_write, eager and in a graph", "B", nullptr},
    {"embedding", "embedding_forward/backward, uniform ids and 1/8 of one id", "N V C", nullptr},
    {"adamw", "adamw_step with and without the bf16 copy", "N", nullptr},
    {"sum_squares", "sum_squares over more than 2^31 elements", "N", nullptr},
    {"cast", "cast f32 -> bf16, bf16 -> f32, and a same-dtype copy", "N", nullptr},
    {"fill", "fill of an f32 buffer", "N", nullptr},
    {"memcpy", "a device-to-device cudaMemcpyAsync: the copy ceiling", "MiB", nullptr},
    {"attention", "attention_forward/backward, packed sequences of the model shapes", "B L Hq Hkv D", nullptr},
    {"paged_attention", "decode over the paged KV cache, Qwen2.5 shapes, in graphs",
     "B ctx (zipped)", "forced splits (s<stages>g<groups>c<cluster>) per shape; --part tail|mid: that part alone"},
    {"qkv_rope_kv_write", "the fused q/k/v + RoPE + cache write against linear_forward_multi + rope_kv_write", "B",
     nullptr},
    {"linear_multi", "the decode projections: skinny kernel, cuBLASLt, as routed; cuBLASLt's gate/up batch", "M",
     "every skinny plan of every projection, then the best"},
    {"matmul", "the prefill/training GEMMs of a layer (T tokens) and the decode GEMMs (M rows)", "T M", nullptr},
    {"linear_swiglu", "gate/up + SwiGLU fused against the two ops (decode); the wide kernel (prefill)", "M",
     "every tile width with either ring"},
    {"norm_fold", "the folded norms (o_proj, down_proj epilogues; consumers with the row scale)", "M", nullptr},
    {"logprob", "logprob_entropy_forward, the three passes, backward (and in place), bf16", "N V", nullptr},
    {"lm_head_sample", "the fused head + sampling against linear_forward + sample_tokens", "B C", nullptr},
    {"sample_tokens", "sample_tokens: greedy, temperature, top-k, top-p", "B", nullptr},
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: bench_ops_gpu --list\n"
               "       bench_ops_gpu --op NAME[,NAME...]|all [--sweep [--part tail|mid]] [--shape K=V[:V...],...]\n"
               "                     [--reps 20] [--warmup 3]\n");
}

}  // namespace

#ifdef DAPO_WITH_CUDA
namespace {

using namespace dapo;
using namespace dapo::bench::ops_bench;
namespace cd = ops::cuda::detail;
using ops::LinearSegment;

struct Env {
  ops::CudaDevice& dev;
  ops::Ctx ctx;
  Shapes shapes;
  Repeat rep;
  bool sweep = false;
  std::string part;
  cudaStream_t stream() const { return ctx.stream; }
  // A device copy of host values.
  template <class T>
  Tensor upload(Arena& arena, const std::vector<T>& v, std::initializer_list<int64_t> d) const {
    Tensor t = arena.alloc(dtype_of<T>(), d);
    if (t.numel() > 0) dev.copy_to_device(t, Tensor(const_cast<T*>(v.data()), dtype_of<T>(), d));
    return t;
  }
};

// ---- norms, elementwise ----

void bench_rmsnorm(Env& e) {
  Arena big(size_t(1) << 30, Device::cuda, "bench-rmsnorm");
  for (const int64_t N : e.shapes.values("N", {16384}))
    for (const int64_t C : e.shapes.values("C", {1536, 896})) {
      const std::string shape = kv({{"N", N}, {"C", C}});
      const double row = double(N) * double(C) * 2;  // one bf16 (N, C) tensor
      ArenaScope scope(big);
      Tensor x = big.alloc(DType::bf16, {N, C}), b = big.alloc(DType::bf16, {N, C});
      Tensor out = big.alloc(DType::bf16, {N, C}), sum = big.alloc(DType::bf16, {N, C});
      Tensor dout = big.alloc(DType::bf16, {N, C}), din = big.alloc(DType::bf16, {N, C});
      Tensor w = big.alloc(DType::bf16, {C}), rstd = big.alloc(DType::f32, {N}), dw = big.alloc(DType::f32, {C});
      fill_random(e.dev, x, 1, -3, 3);
      fill_random(e.dev, b, 2);
      fill_random(e.dev, dout, 3);
      fill_random(e.dev, din, 4);
      fill_random(e.dev, w, 5, 0.5f, 1.5f);
      fill_random(e.dev, dw, 6);
      const ops::Ctx& ctx = e.ctx;
      emit({"rmsnorm_forward", "", shape, "bf16",
            median_ms(ctx.stream, [&] { ops::rmsnorm_forward(ctx, out, rstd, x, w, 1e-6f); }, e.rep), 2 * row + N * 4.0});
      emit({"rmsnorm_backward", "", shape, "bf16",
            median_ms(ctx.stream, [&] { ops::rmsnorm_backward(ctx, din, dw, dout, x, w, rstd); }, e.rep),
            3 * row + N * 4.0});
      emit({"residual_rmsnorm_forward", "separate_sum", shape, "bf16",
            median_ms(ctx.stream, [&] { ops::residual_rmsnorm_forward(ctx, sum, out, rstd, x, b, w, 1e-6f); }, e.rep),
            4 * row + N * 4.0});
      emit({"residual_rmsnorm_forward", "sum_in_place", shape, "bf16",
            median_ms(ctx.stream, [&] { ops::residual_rmsnorm_forward(ctx, x, out, rstd, x, b, w, 1e-6f); }, e.rep),
            4 * row + N * 4.0});
      fill_random(e.dev, x, 1, -3, 3);
      emit({"residual_rmsnorm_backward", "", shape, "bf16",
            median_ms(ctx.stream, [&] { ops::residual_rmsnorm_backward(ctx, din, dw, dout, x, w, rstd); }, e.rep),
            4 * row + N * 4.0});
    }
}

void bench_swiglu(Env& e) {
  Arena big(size_t(6) << 30, Device::cuda, "bench-swiglu");
  for (const int64_t N : e.shapes.values("N", {16384}))
    for (const int64_t I : e.shapes.values("I", {8960, 4864})) {  // Qwen2.5-1.5B, 0.5B
      ArenaScope scope(big);
      Tensor gate = big.alloc(DType::bf16, {N, I}), up = big.alloc(DType::bf16, {N, I});
      Tensor out = big.alloc(DType::bf16, {N, I}), dgate = big.alloc(DType::bf16, {N, I});
      Tensor dup = big.alloc(DType::bf16, {N, I});
      fill_random(e.dev, gate, 1, -6, 6);
      fill_random(e.dev, up, 2);
      fill_random(e.dev, out, 3);  // dout: any non-zero values do
      const std::string shape = kv({{"N", N}, {"I", I}});
      const double t = double(N) * double(I) * 2;  // one bf16 (N, I) tensor
      emit({"swiglu_forward", "", shape, "bf16",
            median_ms(e.ctx.stream, [&] { ops::swiglu_forward(e.ctx, out, gate, up); }, e.rep), 3 * t});
      emit({"swiglu_backward", "", shape, "bf16",
            median_ms(e.ctx.stream, [&] { ops::swiglu_backward(e.ctx, dgate, dup, out, gate, up); }, e.rep), 5 * t});
    }
}

void bench_memcpy(Env& e) {
  for (const int64_t mib : e.shapes.values("MiB", {512})) {
    const size_t bytes = size_t(mib) << 20;
    Arena big(2 * bytes + 4096, Device::cuda, "bench-memcpy");
    void* src = big.alloc_bytes(bytes);
    void* dst = big.alloc_bytes(bytes);
    const double ms = median_ms(
        e.ctx.stream,
        [&] { OPS_BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, e.stream())); }, e.rep);
    emit({"memcpy_d2d", "", kv({{"MiB", mib}}), "bytes", ms, 2.0 * double(bytes)});
  }
}

void bench_rope(Env& e) {
  Arena big(size_t(1) << 30, Device::cuda, "bench-rope");
  const std::vector<int64_t> Hs = e.shapes.values("H", {12, 14, 2}), Ds = e.shapes.values("D", {128, 64, 128});
  DAPO_CHECK(Hs.size() == Ds.size(), "rope: --shape H and D need as many values");
  for (const int64_t T : e.shapes.values("T", {16384}))
    for (size_t i = 0; i < Hs.size(); ++i) {
      const int64_t H = Hs[i], D = Ds[i];
      ArenaScope scope(big);
      std::vector<int32_t> pos(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t % 4096);  // packed sequences of 4096
      Tensor gpos = e.upload(big, pos, {T});
      Tensor q = big.alloc(DType::bf16, {T, H, D}), out = big.alloc(DType::bf16, {T, H, D});
      fill_random(e.dev, q, 1);
      const std::string shape = kv({{"T", T}, {"H", H}, {"D", D}});
      const double bytes = 2.0 * double(T * H * D) * 2 + double(T) * 4.0;
      emit({"rope_forward", "", shape, "bf16",
            median_ms(e.ctx.stream, [&] { ops::rope_forward(e.ctx, out, q, gpos, ops::kRopeThetaQwen2); }, e.rep),
            bytes});
      emit({"rope_backward", "in_place", shape, "bf16",
            median_ms(e.ctx.stream, [&] { ops::rope_backward(e.ctx, q, q, gpos, ops::kRopeThetaQwen2); }, e.rep),
            bytes});
    }
}

struct HeadShape {
  const char* model;
  int64_t Hq, Hkv, D;
};
constexpr HeadShape kHeads05{"0.5B", 14, 2, 64}, kHeads15{"1.5B", 12, 2, 128}, kHeads7{"7B", 28, 4, 128};

// us per call of the fused op and of the three ops it replaces at decode
// batches: back to back on the stream (launch overhead included, as an
// eager decode step), and replayed from a CUDA graph of 200 calls (the GPU
// time alone, as the engine's captured step).
void bench_rope_kv_write(Env& e) {
  const ops::Ctx& ctx = e.ctx;
  Arena big(size_t(1) << 30, Device::cuda, "bench-rope-kv");
  constexpr int kCalls = 200;
  for (const HeadShape h : {kHeads05, kHeads15})
    for (const int64_t B : e.shapes.values("B", {32, 128, 256})) {
      ArenaScope scope(big);
      const int64_t BS = 16, NB = 4096;  // a pool of 64k slots
      std::mt19937 gen(static_cast<unsigned>(B));
      std::vector<int32_t> pos(static_cast<size_t>(B)), all(static_cast<size_t>(NB * BS)), slots(pos.size());
      for (auto& p : pos) p = int32_t(gen() % 4096);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), gen);
      std::copy_n(all.begin(), B, slots.begin());
      Tensor gpos = e.upload(big, pos, {B}), gslots = e.upload(big, slots, {B});
      Tensor q = big.alloc(DType::bf16, {B, h.Hq, h.D}), k = big.alloc(DType::bf16, {B, h.Hkv, h.D});
      Tensor v = big.alloc(DType::bf16, {B, h.Hkv, h.D});
      Tensor kc = big.alloc(DType::bf16, {NB, BS, h.Hkv, h.D}), vc = big.alloc(DType::bf16, {NB, BS, h.Hkv, h.D});
      fill_random(e.dev, q, 1);
      fill_random(e.dev, k, 2);
      fill_random(e.dev, v, 3);
      const auto fused = [&] { ops::rope_kv_write(ctx, q, k, kc, vc, v, gpos, gslots, ops::kRopeThetaQwen2); };
      const auto three = [&] {
        ops::rope_forward(ctx, q, q, gpos, ops::kRopeThetaQwen2);
        ops::rope_forward(ctx, k, k, gpos, ops::kRopeThetaQwen2);
        ops::kv_cache_write(ctx, kc, vc, k, v, gslots);
      };
      const std::string shape =
          std::string("model=") + h.model + "," + kv({{"B", B}, {"Hq", h.Hq}, {"Hkv", h.Hkv}, {"D", h.D}});
      // q and k read and written, v read, k and v written to their slots.
      const double bytes = double(B) * double(h.D) * 2 * (2.0 * double(h.Hq) + 2.0 * double(h.Hkv) + 3.0 * double(h.Hkv));
      emit({"rope_kv_write", "fused_eager", shape, "bf16", batch_ms(ctx.stream, fused, kCalls, e.rep), bytes});
      emit({"rope_kv_write", "three_ops_eager", shape, "bf16", batch_ms(ctx.stream, three, kCalls, e.rep), bytes});
      emit({"rope_kv_write", "fused_graph", shape, "bf16", graph_ms(ctx, kCalls, [&](int) { fused(); }, e.rep), bytes});
      emit({"rope_kv_write", "three_ops_graph", shape, "bf16", graph_ms(ctx, kCalls, [&](int) { three(); }, e.rep),
            bytes});
    }
}

std::vector<int32_t> random_ids(int64_t n, int32_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = dist(gen);
  return ids;
}

void bench_embedding(Env& e) {
  const int64_t N = e.shapes.value("N", 16384), V = e.shapes.value("V", 151936), C = e.shapes.value("C", 1536);
  Arena big(size_t(V * C) * 6 + size_t(N * C) * 4 + (size_t(64) << 20), Device::cuda, "bench-embedding");
  const ops::Ctx& ctx = e.ctx;
  Tensor w = big.alloc(DType::bf16, {V, C}), dw = big.alloc(DType::f32, {V, C});
  Tensor out = big.alloc(DType::bf16, {N, C}), dout = big.alloc(DType::bf16, {N, C});
  fill_random(e.dev, w, 1);
  fill_random(e.dev, dw, 2);
  fill_random(e.dev, dout, 3);
  const std::string shape = kv({{"N", N}, {"V", V}, {"C", C}});
  for (const bool skewed : {false, true}) {
    auto ids = random_ids(N, int32_t(V), 4);
    if (skewed)
      for (int64_t i = 0; i < N; i += 8) ids[size_t(i)] = 198;
    std::vector<char> seen(size_t(V), 0);
    int64_t distinct = 0;
    for (int32_t id : ids) distinct += seen[size_t(id)]++ == 0;
    ArenaScope scope(big);
    Tensor gids = e.upload(big, ids, {N});
    const char* tag = skewed ? "one_eighth_one_id" : "uniform_ids";
    emit({"embedding_forward", tag, shape, "bf16",
          median_ms(ctx.stream, [&] { ops::embedding_forward(ctx, out, gids, w, 0); }, e.rep),
          2.0 * double(N * C) * 2 + double(N) * 4.0});
    // dout read once, each touched dweight row read and written once.
    emit({"embedding_backward", tag, shape, "bf16->f32",
          median_ms(ctx.stream, [&] { ops::embedding_backward(ctx, dw, dout, gids, 0); }, e.rep),
          double(N * C) * 2 + 2.0 * double(distinct * C) * 4 + double(N) * 4.0});
  }
}

// ---- the optimizer's ops: 1.5e9 parameters (Qwen2.5-1.5B on one rank) ----

void bench_adamw(Env& e) {
  const int64_t N = e.shapes.value("N", 1500000000);
  Arena big(size_t(N) * 18 + (size_t(64) << 20), Device::cuda, "bench-adamw");
  Tensor w = big.alloc(DType::f32, {N}), g = big.alloc(DType::f32, {N}), m = big.alloc(DType::f32, {N});
  Tensor v = big.alloc(DType::f32, {N}), wb = big.alloc(DType::bf16, {N});
  ops::fill(e.ctx, w, 0.5);  // non-zero state: never time zeros
  ops::fill(e.ctx, g, 0.01);
  ops::fill(e.ctx, m, 1e-3);
  ops::fill(e.ctx, v, 1e-4);
  ops::AdamWParams p;
  p.lr = 1e-6f;
  p.step = 10;
  p.grad_scale = 0.5f;
  const std::string shape = kv({{"N", N}});
  emit({"adamw_step", "with_bf16_copy", shape, "f32+bf16",
        median_ms(e.ctx.stream, [&] { ops::adamw_step(e.ctx, w, g, m, v, wb, p); }, e.rep), 30.0 * double(N)});
  emit({"adamw_step", "", shape, "f32",
        median_ms(e.ctx.stream, [&] { ops::adamw_step(e.ctx, w, g, m, v, Tensor{}, p); }, e.rep), 28.0 * double(N)});
}

void bench_sum_squares(Env& e) {
  // Past 2^31 elements: 2.5e9 by default.
  const int64_t N = e.shapes.value("N", 2500000000);
  Arena big(size_t(N) * 4 + (size_t(64) << 20), Device::cuda, "bench-sum-squares");
  Tensor x = big.alloc(DType::f32, {N}), out = big.alloc(DType::f32, {1});
  ops::fill(e.ctx, x, 0.01);
  const double ms = median_ms(e.ctx.stream, [&] { ops::sum_squares(e.ctx, out, x); }, e.rep);
  float got = 0;
  e.dev.copy_to_host(Tensor(&got, DType::f32, {1}), out);
  Line l{"sum_squares", "", kv({{"N", N}}), "f32", ms, 4.0 * double(N)};
  l.extra["value"] = got;
  l.extra["expected"] = double(N) * double(0.01f) * double(0.01f);
  emit(l);
}

void bench_cast(Env& e) {
  const int64_t N = e.shapes.value("N", 1500000000);
  Arena big(size_t(N) * 10 + (size_t(64) << 20), Device::cuda, "bench-cast");
  Tensor w = big.alloc(DType::f32, {N}), g = big.alloc(DType::f32, {N}), wb = big.alloc(DType::bf16, {N});
  ops::fill(e.ctx, w, 0.5);
  const std::string shape = kv({{"N", N}});
  emit({"cast", "f32_to_bf16", shape, "f32->bf16", median_ms(e.ctx.stream, [&] { ops::cast(e.ctx, wb, w); }, e.rep),
        6.0 * double(N)});
  emit({"cast", "bf16_to_f32", shape, "bf16->f32", median_ms(e.ctx.stream, [&] { ops::cast(e.ctx, g, wb); }, e.rep),
        6.0 * double(N)});
  emit({"cast", "same_dtype_copy", shape, "f32", median_ms(e.ctx.stream, [&] { ops::cast(e.ctx, g, w); }, e.rep),
        8.0 * double(N)});
}

void bench_fill(Env& e) {
  const int64_t N = e.shapes.value("N", 1500000000);
  Arena big(size_t(N) * 4 + (size_t(64) << 20), Device::cuda, "bench-fill");
  Tensor g = big.alloc(DType::f32, {N});
  const std::string shape = kv({{"N", N}});
  emit({"fill", "kernel", shape, "f32", median_ms(e.ctx.stream, [&] { ops::fill(e.ctx, g, 0.01); }, e.rep),
        4.0 * double(N)});
  emit({"fill", "memset", shape, "f32", median_ms(e.ctx.stream, [&] { ops::fill(e.ctx, g, 0.0); }, e.rep),
        4.0 * double(N)});
}

// ---- attention ----

// Forward and backward TFLOP/s on the model shapes, causal FLOPs counted as
// 4 L^2 / 2 D Hq per sequence forward and 2.5 times that backward.
void bench_attention(Env& e) {
  struct Shape {
    const char* model;
    int64_t Hq, Hkv, D;
    std::vector<int> lens;
  };
  std::vector<Shape> shapes = {{"1.5B", 12, 2, 128, {4096, 4096, 4096, 4096}},
                               {"1.5B", 12, 2, 128, {16384}},
                               {"0.5B", 14, 2, 64, {4096, 4096, 4096, 4096}},
                               {"0.5B", 14, 2, 64, {16384}},
                               {"0.5B", 14, 2, 64, std::vector<int>(128, 256)},
                               {"1.5B", 12, 2, 128, std::vector<int>(128, 256)}};
  if (e.shapes.has("B") || e.shapes.has("L") || e.shapes.has("Hq") || e.shapes.has("Hkv") || e.shapes.has("D"))
    shapes = {{"custom", e.shapes.value("Hq", 12), e.shapes.value("Hkv", 2), e.shapes.value("D", 128),
               std::vector<int>(size_t(e.shapes.value("B", 4)), int(e.shapes.value("L", 4096)))}};
  Arena big(size_t(4) << 30, Device::cuda, "bench-attention");
  for (const Shape& s : shapes) {
    ArenaScope scope(big);
    std::vector<int32_t> cu = {0};
    for (int len : s.lens) cu.push_back(cu.back() + len);
    const int64_t T = cu.back(), B = int64_t(s.lens.size()), Hq = s.Hq, Hkv = s.Hkv, D = s.D;
    const int64_t max_len = *std::max_element(s.lens.begin(), s.lens.end());
    const float scale = 1.0f / std::sqrt(float(D));
    Tensor q = big.alloc(DType::bf16, {T, Hq, D}), k = big.alloc(DType::bf16, {T, Hkv, D});
    Tensor v = big.alloc(DType::bf16, {T, Hkv, D}), dout = big.alloc(DType::bf16, {T, Hq, D});
    fill_random(e.dev, q, 1, -1.5f, 1.5f);
    fill_random(e.dev, k, 2, -1.5f, 1.5f);
    fill_random(e.dev, v, 3);
    fill_random(e.dev, dout, 4);
    Tensor gcu = e.upload(big, cu, {B + 1});
    Tensor out = big.alloc(DType::bf16, {T, Hq, D}), lse = big.alloc(DType::f32, {Hq, T});
    Tensor dq = big.alloc(DType::bf16, {T, Hq, D}), dk = big.alloc(DType::bf16, {T, Hkv, D});
    Tensor dv = big.alloc(DType::bf16, {T, Hkv, D});
    double fwd_flops = 0;
    for (int len : s.lens) fwd_flops += 4.0 * double(len) * double(len) / 2.0 * double(D) * double(Hq);
    const std::string shape = std::string("model=") + s.model + "," +
                              kv({{"B", B}, {"L", s.lens[0]}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
    const ops::Ctx& ctx = e.ctx;
    emit({"attention_forward", "", shape, "bf16",
          median_ms(ctx.stream, [&] { ops::attention_forward(ctx, out, lse, q, k, v, gcu, max_len, scale); }, e.rep), 0,
          fwd_flops});
    emit({"attention_backward", "", shape, "bf16",
          median_ms(ctx.stream,
                    [&] { ops::attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, gcu, max_len, scale); },
                    e.rep),
          0, 2.5 * fwd_flops});
  }
}

// ---- paged attention ----

using ops::cuda::detail::PagedSplit;

// Decode (one new token per sequence) on the Qwen2.5 attention shapes;
// bandwidth is the K and V bytes the contexts hold (each read once; q and
// out are negligible). The calls are captured in a CUDA graph (as the
// engine runs them) and rotate over block tables into different parts of a
// 2 GiB pool so that the cache is read from HBM, not L2.
class DecodePool {
 public:
  explicit DecodePool(Env& e) : e_(e), big_(size_t(2 * kPoolBytes) + (size_t(256) << 20), Device::cuda, "bench-paged") {
    kpool_ = big_.alloc(DType::bf16, {kPoolBytes / 2});
    vpool_ = big_.alloc(DType::bf16, {kPoolBytes / 2});
    fill_random(e_.dev, kpool_, 1);
    fill_random(e_.dev, vpool_, 2);
  }

  // Milliseconds per decode call (B sequences of len positions) for each
  // split (null: the planned one), or empty when the pool is too small.
  std::vector<double> decode_ms(int64_t Hq, int64_t Hkv, int64_t D, int64_t B, int64_t len,
                                const std::vector<const PagedSplit*>& splits = {nullptr}) {
    const int64_t per_seq = (len + kBS - 1) / kBS, NB = B * per_seq, pool_blocks = kPoolBytes / (kBS * Hkv * D * 2);
    if (NB > pool_blocks) return {};
    ArenaScope scope(big_);
    const double bytes = double(B) * double(len) * double(Hkv * D) * 2 * 2;
    const int64_t rot =
        std::clamp<int64_t>(int64_t(std::ceil(1e9 / bytes)), 1, std::min<int64_t>(8, pool_blocks / NB));
    Tensor kc(kpool_.data, DType::bf16, {pool_blocks, kBS, Hkv, D}, Device::cuda);
    Tensor vc(vpool_.data, DType::bf16, {pool_blocks, kBS, Hkv, D}, Device::cuda);
    Tensor q = big_.alloc(DType::bf16, {B, Hq, D}), out = big_.alloc(DType::bf16, {B, Hq, D});
    fill_random(e_.dev, q, 3, -3, 3);
    std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(len)), cu(static_cast<size_t>(B + 1));
    std::iota(cu.begin(), cu.end(), 0);
    Tensor dl = e_.upload(big_, lens, {B}), dcu = e_.upload(big_, cu, {B + 1});
    std::vector<Tensor> tables;
    for (int64_t r = 0; r < rot; ++r) {
      std::vector<int32_t> table(static_cast<size_t>(NB));
      std::iota(table.begin(), table.end(), int32_t(r * NB));
      std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(4 + r)));
      tables.push_back(e_.upload(big_, table, {B, per_seq}));
    }
    const float scale = 1.0f / std::sqrt(float(D));
    std::vector<double> result;
    for (const PagedSplit* split : splits) {
      auto call = [&](int i) {
        const Tensor& t = tables[size_t(i % rot)];
        if (split != nullptr)
          cd::paged_attention_with_split(e_.ctx, out, q, kc, vc, t, dl, dcu, len, scale, *split);
        else
          ops::paged_attention(e_.ctx, out, q, kc, vc, t, dl, dcu, len, scale);
      };
      for (int i = 0; i < int(rot); ++i) call(i);  // warm-up, outside the capture
      result.push_back(graph_ms(e_.ctx, 20, call, e_.rep));
    }
    return result;
  }

  static constexpr int64_t kBS = 16;
  static constexpr int64_t kPoolBytes = int64_t(2) << 30;

 private:
  Env& e_;
  Arena big_;
  Tensor kpool_, vpool_;
};

constexpr HeadShape kPagedModels[] = {kHeads05, kHeads15, kHeads7};

void paged_decode(Env& e) {
  DecodePool pool(e);
  struct Shape {
    int64_t B, len;
  };
  // What a decode step mostly sees (batches of 64..256 at 256..2048
  // positions), then long contexts.
  std::vector<Shape> shapes = {{64, 256},   {64, 512},   {64, 1024},  {64, 2048},   {128, 256}, {128, 512},
                               {128, 1024}, {128, 2048}, {256, 256},  {256, 512},   {256, 1024}, {256, 2048},
                               {8, 4096},   {8, 16384},  {8, 32768},  {32, 8192},   {32, 32768}, {128, 4096},
                               {128, 16384}};
  if (e.shapes.has("B") || e.shapes.has("ctx")) {
    const auto Bs = e.shapes.values("B", {128}), Ls = e.shapes.values("ctx", {1024});
    DAPO_CHECK(Bs.size() == Ls.size(), "paged_attention: --shape B and ctx need as many values");
    shapes.clear();
    for (size_t i = 0; i < Bs.size(); ++i) shapes.push_back({Bs[i], Ls[i]});
  }
  for (const HeadShape& m : kPagedModels)
    for (const Shape& sh : shapes) {
      const std::vector<double> ms = pool.decode_ms(m.Hq, m.Hkv, m.D, sh.B, sh.len);
      if (ms.empty()) continue;
      const PagedSplit sp = cd::paged_attention_split(sh.B, sh.B, m.Hq, m.Hkv, m.D, sh.len);
      const size_t scratch = ops::cuda::paged_attention_scratch_bytes(sh.B, sh.B, m.Hq, m.Hkv, m.D, sh.len);
      Line l{"paged_attention", "decode",
             std::string("model=") + m.model + "," +
                 kv({{"B", sh.B}, {"Hq", m.Hq}, {"Hkv", m.Hkv}, {"D", m.D}, {"BS", 16}, {"ctx", sh.len}}),
             "bf16", ms[0], double(sh.B) * double(sh.len) * double(m.Hkv * m.D) * 2 * 2};
      l.extra["groups"] = sp.groups;
      l.extra["cluster"] = sp.cluster;
      l.extra["stages"] = sp.stages;
      l.extra["scratch_mib"] = double(scratch) / double(1 << 20);
      emit(l);
    }
}

std::string split_name(const PagedSplit& s) {
  return "s" + std::to_string(s.stages) + "g" + std::to_string(s.groups) + "c" + std::to_string(s.cluster);
}

// The data make_plan's model is fitted to: GB/s of forced splits ("s"
// stages, "g" merge groups, "c" cluster size) next to the planned one.
void paged_sweep(Env& e) {
  DecodePool pool(e);
  struct Variant {
    int64_t stages, groups, cluster;
  };
  auto sweep = [&](const HeadShape& m, int64_t B, int64_t len, const std::vector<Variant>& vs) {
    std::vector<PagedSplit> splits(vs.size());
    std::vector<const PagedSplit*> ptrs{nullptr};
    for (size_t i = 0; i < vs.size(); ++i) {
      splits[i].stages = vs[i].stages;
      splits[i].groups = vs[i].groups;
      splits[i].cluster = vs[i].cluster;
      ptrs.push_back(&splits[i]);
    }
    const std::vector<double> ms = pool.decode_ms(m.Hq, m.Hkv, m.D, B, len, ptrs);
    if (ms.empty()) return;
    const double bytes = double(B) * double(len) * double(m.Hkv * m.D) * 2 * 2;
    const PagedSplit sp = cd::paged_attention_split(B, B, m.Hq, m.Hkv, m.D, len);
    const std::string shape = std::string("model=") + m.model + "," + kv({{"B", B}, {"ctx", len}});
    emit({"paged_attention", "planned_" + split_name(sp), shape, "bf16", ms[0], bytes});
    for (size_t i = 0; i < splits.size(); ++i)
      emit({"paged_attention", "split_" + split_name(splits[i]), shape, "bf16", ms[i + 1], bytes});
  };
  const std::vector<Variant> short_vs = {{0, 1, 1}, {3, 1, 1}, {3, 1, 2}, {3, 2, 1}, {3, 1, 4},
                                         {2, 1, 1}, {2, 1, 2}, {2, 2, 1}, {2, 1, 4}};
  const std::vector<Variant> long_vs = {{0, 8, 1},  {0, 16, 1}, {3, 2, 1}, {3, 4, 1}, {3, 8, 1}, {3, 16, 1},
                                        {3, 32, 1}, {3, 1, 4},  {3, 2, 4}, {3, 4, 4}, {2, 4, 1}, {2, 8, 1},
                                        {2, 16, 1}};
  // The tail of a generation round: a few long sequences (DAPO's longest
  // answers), where every KV head's context must be spread over many CTAs.
  const std::vector<Variant> tail_vs = {{3, 8, 1},   {3, 16, 1}, {3, 32, 1}, {3, 64, 1}, {3, 128, 1},
                                        {3, 256, 1}, {2, 64, 1}, {2, 128, 1}, {0, 64, 1}, {3, 4, 8},
                                        {3, 8, 8},   {3, 16, 8}, {3, 32, 4}};
  if (e.part == "mid") {
    // Contexts between the powers of two (a decode run crosses them step by step).
    std::vector<Variant> mid_vs = short_vs;
    mid_vs.insert(mid_vs.end(), {{3, 2, 2}, {3, 3, 1}, {3, 4, 1}, {3, 2, 4}});
    for (const HeadShape& m : kPagedModels)
      for (const int64_t B : {64, 128, 256})
        for (const int64_t len : {384, 520, 640, 768, 896}) sweep(m, B, len, mid_vs);
    return;
  }
  for (const HeadShape& m : kPagedModels) {
    if (e.part != "tail") {
      for (const int64_t B : {64, 128, 256})
        for (const int64_t len : {256, 512, 1024, 2048}) sweep(m, B, len, short_vs);
      for (const auto& [B, len] : {std::pair<int64_t, int64_t>{8, 4096}, {8, 16384}, {8, 32768}, {32, 8192},
                                   {32, 32768}, {128, 4096}, {128, 16384}})
        sweep(m, B, len, long_vs);
    }
    for (const int64_t B : {1, 2, 4})
      for (const int64_t len : {4096, 8192, 20480}) sweep(m, B, len, tail_vs);
  }
}

void bench_paged_attention(Env& e) {
  if (e.sweep) return paged_sweep(e);
  // The copy ceiling of this card (bytes read + written), for the fractions.
  Env copy = e;
  copy.shapes = Shapes("MiB=1024");
  bench_memcpy(copy);
  paged_decode(e);
}

// ---- products ----

// The decode projections of one model (a tensor-parallel shard for tp 2):
// q, k, gate alone (the unfused path), o, down, the LM head (vocab 151936,
// when it fits the pool), and the fused q/k/v and gate/up.
struct Model {
  const char* name;
  int64_t C, q, kv, I, o_in, layers;
  bool lm_head;
};
const std::vector<Model>& perf_models() {
  static const std::vector<Model> models = {
      {"qwen2.5-0.5b", 896, 896, 128, 4864, 896, 24, true},
      {"qwen2.5-1.5b", 1536, 1536, 256, 8960, 1536, 28, true},
      {"qwen2.5-7b", 3584, 3584, 512, 18944, 3584, 28, false},
      {"qwen2.5-7b-tp2", 3584, 1792, 256, 9472, 1792, 28, false},
  };
  return models;
}
struct Proj {
  const char* model;
  const char* layer;
  int64_t K;
  std::vector<int64_t> N;
  bool bias;
};
std::vector<Proj> perf_projections(bool unfused) {
  std::vector<Proj> v;
  for (const Model& m : perf_models()) {
    if (unfused) {
      v.push_back({m.name, "q", m.C, {m.q}, true});
      v.push_back({m.name, "k", m.C, {m.kv}, true});
      v.push_back({m.name, "gate", m.C, {m.I}, false});
    }
    v.push_back({m.name, "o", m.o_in, {m.C}, false});
    v.push_back({m.name, "down", m.I, {m.C}, false});
    if (m.lm_head) v.push_back({m.name, "lm_head", m.C, {151936}, false});
    v.push_back({m.name, "qkv", m.C, {m.q, m.kv, m.kv}, true});
    v.push_back({m.name, "gate_up", m.C, {m.I, m.I}, false});
  }
  return v;
}
double weight_bytes(const Proj& s) {
  double b = 0;
  for (int64_t n : s.N) b += double(n) * double(s.K) * 2.0;
  return b;
}

// Weights rotate through a pool larger than L2 (50 MB on an H100, 60 on an
// H200), as a decode step reads each weight once; the input and outputs
// stay hot, as the previous op's output does.
class ProjBench {
 public:
  // Random weights for every shape: 2 x the 1.5B LM head (467 MB), far over L2.
  static constexpr int64_t kPoolElems = int64_t(480) << 20;
  explicit ProjBench(Env& e) : e_(e), arena_(size_t(3) << 30, Device::cuda, "bench-proj") {
    pool_ = arena_.alloc(DType::bf16, {kPoolElems});
    fill_random(e_.dev, pool_, 3);
  }
  struct Set {
    Tensor in;
    std::vector<Tensor> out, bias;
    size_t stride = 0;  // bytes between the weight sets of consecutive calls
    int64_t K = 0;
    std::vector<int64_t> N;
  };
  Arena& arena() { return arena_; }
  Set make(int64_t M, const Proj& s, DType out_dt) {
    Set b;
    b.K = s.K, b.N = s.N;
    size_t bytes = 0;
    for (int64_t n : s.N) bytes += size_t(n * s.K) * 2;
    b.stride = (bytes + 4095) / 4096 * 4096 + 4096 * 7;  // a set's bytes, then an odd skip
    DAPO_CHECK(b.stride <= pool_.nbytes(), "the weight pool is too small for ", s.model, " ", s.layer);
    b.in = arena_.alloc(DType::bf16, {std::max<int64_t>(M, 1), s.K});
    fill_random(e_.dev, b.in, 4);
    for (int64_t n : s.N) {
      b.out.push_back(arena_.alloc(out_dt, {std::max<int64_t>(M, 1), n}));
      b.bias.push_back(s.bias ? arena_.alloc(DType::bf16, {n}) : Tensor{});
      if (s.bias) fill_random(e_.dev, b.bias.back(), 5);
    }
    return b;
  }
  std::vector<LinearSegment> segments(const Set& b, int64_t M, int call) const {
    const size_t pool = pool_.nbytes();
    size_t at = (size_t(call) * b.stride) % (pool - b.stride + 1);
    at -= at % 256;
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < b.N.size(); ++i) {
      Tensor w(static_cast<char*>(pool_.data) + at, DType::bf16, {b.N[i], b.K}, Device::cuda);
      at += size_t(b.N[i] * b.K) * 2;
      segs.push_back({Tensor(b.out[i].data, b.out[i].dtype, {M, b.N[i]}, Device::cuda), w, b.bias[i]});
    }
    return segs;
  }
  // ms per call of one(ctx, in, segments) over `calls` back-to-back calls in a graph.
  template <class F>
  double ms(const Set& b, int64_t M, F&& one, int calls) {
    const Tensor in(b.in.data, DType::bf16, {M, b.K}, Device::cuda);
    return graph_ms(e_.ctx, calls, [&](int i) { one(e_.ctx, in, segments(b, M, i)); }, e_.rep);
  }
  // A weight of (rows, cols) at the call's place in the pool.
  Tensor weight(int call, int64_t rows, int64_t cols) const {
    const size_t bytes = size_t(rows * cols) * 2, stride = (bytes + 4095) / 4096 * 4096 + 4096 * 7;
    size_t at = (size_t(call) * stride) % (pool_.nbytes() - stride + 1);
    at -= at % 256;
    return Tensor(static_cast<char*>(pool_.data) + at, DType::bf16, {rows, cols}, Device::cuda);
  }

 private:
  Env& e_;
  Arena arena_;
  Tensor pool_;
};

std::string plan_name(const cd::SkinnyPlan& p) {
  return "c" + std::to_string(p.config) + "s" + std::to_string(p.splits) + (p.l2_prefetch ? "p" : "") + "l" +
         std::to_string(p.lookahead);
}
void skinny_call(const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& s) {
  cd::linear_forward_multi_skinny(ctx, in, s);
}
void cublaslt_call(const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& s) {
  cd::linear_forward_multi_cublaslt(ctx, in, s);
}
void routed_call(const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& s) {
  ops::linear_forward_multi(ctx, in, s);
}

std::string proj_shape(const Proj& s, int64_t M) {
  std::string n;
  for (int64_t x : s.N) n += (n.empty() ? "" : "+") + std::to_string(x);
  return std::string("model=") + s.model + ",layer=" + s.layer + "," + kv({{"M", M}, {"K", s.K}}) + ",N=" + n;
}

// cuBLASLt's strided batch of gate and up (one launch) against one
// cuBLASLt call per segment.
void batch_vs_per_segment(ProjBench& pb, const ProjBench::Set& b, int64_t M, const Proj& s, int calls) {
  const double wb = weight_bytes(s), flops = double(M) * wb;  // 2 M N K, weight bytes = 2 N K
  emit({"linear_forward_multi", "cublaslt_strided_batch", proj_shape(s, M), "bf16", pb.ms(b, M, cublaslt_call, calls),
        wb, flops});
  emit({"linear_forward_multi", "cublaslt_per_segment", proj_shape(s, M), "bf16",
        pb.ms(b, M,
              [](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
                for (const LinearSegment& seg : sg) cd::linear_forward_cublaslt(ctx, seg.out, in, seg.weight, seg.bias);
              },
              calls),
        wb, flops});
}

void linear_multi_decode(Env& e) {
  ProjBench pb(e);
  Arena& arena = pb.arena();
  for (const int64_t M : e.shapes.values("M", {1, 32, 64, 128, 256})) {
    // One decode step's GEMMs per model: every layer's qkv, o, gate_up,
    // down, then the LM head; unfused q, k, v, gate, up for the old path.
    struct Step {
      double lt = 0, fused = 0, routed = 0, bytes = 0;
    };
    std::vector<Step> step(perf_models().size());
    for (const Proj& s : perf_projections(true)) {
      ArenaScope scope(arena);
      const bool lm = std::string(s.layer) == "lm_head";
      const ProjBench::Set b = pb.make(M, s, lm ? DType::f32 : DType::bf16);
      const double wb = weight_bytes(s), flops = double(M) * wb;
      const int calls = wb > 64e6 ? 10 : 50;
      const double ms_skinny = pb.ms(b, M, skinny_call, calls), ms_lt = pb.ms(b, M, cublaslt_call, calls),
                   ms_routed = pb.ms(b, M, routed_call, calls);
      const auto segs = pb.segments(b, M, 0);
      const cd::SkinnyPlan plan = cd::skinny_plan(M, s.K, segs);
      cd::SkinnyPlan other_pdl = plan;
      other_pdl.pdl = !plan.pdl;
      const double ms_pdl = pb.ms(
          b, M,
          [&](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
            cd::linear_forward_multi_skinny(ctx, in, sg, &other_pdl);
          },
          calls);
      const bool prefer = cd::linear_multi_skinny_preferred(M, s.K, segs);
      const std::string dt = lm ? "bf16->f32" : "bf16";
      Line skinny{"linear_forward_multi", "skinny", proj_shape(s, M), dt, ms_skinny, wb, flops};
      skinny.extra["plan"] = plan_name(plan);
      emit(skinny);
      Line pdl{"linear_forward_multi", other_pdl.pdl ? "skinny_with_pdl" : "skinny_without_pdl", proj_shape(s, M), dt,
               ms_pdl, wb, flops};
      pdl.extra["plan"] = plan_name(other_pdl);
      emit(pdl);
      emit({"linear_forward_multi", "cublaslt", proj_shape(s, M), dt, ms_lt, wb, flops});
      if (cd::gemv_supported(b.in, pb.segments(b, M, 0)))
        emit({"linear_forward_multi", "gemv", proj_shape(s, M), dt,
              pb.ms(
                  b, M,
                  [](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
                    cd::linear_forward_multi_gemv(ctx, in, sg);
                  },
                  calls),
              wb, flops});
      Line routed{"linear_forward_multi", "routed", proj_shape(s, M), dt, ms_routed, wb, flops};
      routed.extra["routed_to"] = prefer ? "skinny" : "cublaslt";
      emit(routed);
      if (std::string(s.layer) == "gate_up") batch_vs_per_segment(pb, b, M, s, calls);
      size_t mi = 0;
      while (std::string(perf_models()[mi].name) != s.model) ++mi;
      Step& st = step[mi];
      const double layers = double(perf_models()[mi].layers), us_lt = ms_lt * 1e3, us_sk = ms_skinny * 1e3,
                   us_ro = ms_routed * 1e3;
      const std::string l = s.layer;
      if (l == "q" || l == "o" || l == "down") st.lt += layers * us_lt;
      if (l == "k" || l == "gate") st.lt += 2 * layers * us_lt;
      if (l == "qkv" || l == "o" || l == "gate_up" || l == "down") {
        st.fused += layers * us_sk;
        st.routed += layers * us_ro;
        st.bytes += layers * wb;
      }
      if (lm) {
        st.lt += us_lt;
        st.fused += us_sk;
        st.routed += us_ro;
        st.bytes += wb;
      }
    }
    // One decode step's GEMMs, summed: the unfused cuBLASLt path, the fused
    // skinny one, and as routed.
    for (size_t m = 0; m < step.size(); ++m) {
      const std::string shape = std::string("model=") + perf_models()[m].name + "," + kv({{"M", M}});
      emit({"decode_step_gemms", "cublaslt_unfused", shape, "bf16", step[m].lt / 1e3, step[m].bytes});
      emit({"decode_step_gemms", "skinny_fused", shape, "bf16", step[m].fused / 1e3, step[m].bytes});
      emit({"decode_step_gemms", "routed_fused", shape, "bf16", step[m].routed / 1e3, step[m].bytes});
    }
  }
  // The strided batch also takes the prefill and training products (many
  // rows, bound by the tensor cores): it must not lose to two calls there.
  if (e.shapes.has("M")) return;
  for (const int64_t M : {int64_t(4096), int64_t(16384)})
    for (const Proj& s : perf_projections(false)) {
      if (std::string(s.layer) != "gate_up" || std::string(s.model).rfind("qwen2.5-7b", 0) == 0) continue;
      ArenaScope scope(arena);
      const ProjBench::Set b = pb.make(M, s, DType::bf16);
      batch_vs_per_segment(pb, b, M, s, 6);
    }
}

// Every plan of every fused or single projection: the data the plan rule
// and the routing rule are fitted to. One line per plan, then per shape
// the best plan found (tile and split first, then its L2 options).
void linear_multi_sweep(Env& e) {
  ProjBench pb(e);
  Arena& arena = pb.arena();
  for (const int64_t M : e.shapes.values("M", {1, 32, 64, 128, 256}))
    for (const Proj& s : perf_projections(false)) {
      ArenaScope scope(arena);
      const bool lm = std::string(s.layer) == "lm_head";
      const ProjBench::Set b = pb.make(M, s, lm ? DType::f32 : DType::bf16);
      const double wb = weight_bytes(s), flops = double(M) * wb;
      const int calls = wb > 64e6 ? 6 : 30;
      const int64_t k_blocks = (s.K + 63) / 64;
      const std::string dt = lm ? "bf16->f32" : "bf16";
      auto time_plan = [&](const cd::SkinnyPlan& plan, const char* what) {
        const double ms = pb.ms(
            b, M,
            [&](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
              cd::linear_forward_multi_skinny(ctx, in, sg, &plan);
            },
            calls);
        Line l{"linear_forward_multi", std::string("skinny_") + what, proj_shape(s, M), dt, ms, wb, flops};
        l.extra["plan"] = plan_name(plan);
        emit(l);
        return ms;
      };
      emit({"linear_forward_multi", "cublaslt", proj_shape(s, M), dt, pb.ms(b, M, cublaslt_call, calls), wb, flops});
      const cd::SkinnyPlan def = cd::skinny_plan(M, s.K, pb.segments(b, M, 0));
      cd::SkinnyPlan best = def;
      double best_ms = time_plan(def, "default_plan");
      for (int config = 0; config < cd::skinny_config_count(); ++config) {
        int bn = 0, bm = 0;
        cd::skinny_config_tile(config, bn, bm);
        if (bm < M && bm < 64) continue;      // tiny tiles re-read the weights
        if (bm >= 2 * M && bm > 8) continue;  // mostly empty tiles
        int64_t last = 0;
        for (const int splits : {1, 2, 3, 4, 6, 8}) {
          if (splits > k_blocks || (lm && splits > 1)) continue;
          const int64_t per = (k_blocks + splits - 1) / splits, actual = (k_blocks + per - 1) / per;
          if (actual == last) continue;
          last = actual;
          const cd::SkinnyPlan plan{config, int(actual), false, true, 4};
          const double ms = time_plan(plan, "plan");
          if (ms < best_ms) best = plan, best_ms = ms;
        }
      }
      const cd::SkinnyPlan grid = best;
      for (const int la : {0, 2, 8})
        for (const bool pf : {false, true}) {
          cd::SkinnyPlan plan = grid;
          plan.lookahead = la, plan.l2_prefetch = pf;
          const double ms = time_plan(plan, "plan");
          if (ms < best_ms) best = plan, best_ms = ms;
        }
      Line l{"linear_forward_multi", "skinny_best_plan", proj_shape(s, M), dt, best_ms, wb, flops};
      l.extra["plan"] = plan_name(best);
      l.extra["default"] = plan_name(def);
      emit(l);
    }
}

void bench_linear_multi(Env& e) {
  std::printf("{\"device\":\"%s\"}\n", e.dev.name().c_str());
  if (e.sweep) return linear_multi_sweep(e);
  linear_multi_decode(e);
}

// Forward, backward-data and backward-weight (f32 accumulate) of one
// projection of T tokens, bf16 operands; the bias gradient's share.
void matmul_projection(Env& e, Arena& arena, const char* model, const char* layer, int64_t T, int64_t I, int64_t O,
                       bool bias) {
  ArenaScope scope(arena);
  Tensor in = arena.alloc(DType::bf16, {T, I}), w = arena.alloc(DType::bf16, {O, I});
  Tensor out = arena.alloc(DType::bf16, {T, O}), dout = arena.alloc(DType::bf16, {T, O});
  Tensor din = arena.alloc(DType::bf16, {T, I}), dw = arena.alloc(DType::f32, {O, I});
  Tensor b = arena.alloc(DType::bf16, {O}), db = arena.alloc(DType::f32, {O});
  for (const Tensor* t : {&in, &w, &dout, &dw, &b, &db}) fill_random(e.dev, *t, 9);
  const ops::Ctx& ctx = e.ctx;
  const std::string shape = std::string("model=") + model + ",layer=" + layer + "," + kv({{"T", T}, {"I", I}, {"O", O}});
  const double flops = 2.0 * double(T) * double(I) * double(O);
  emit({"linear_forward", "", shape, "bf16",
        median_ms(ctx.stream, [&] { ops::linear_forward(ctx, out, in, w, Tensor{}); }, e.rep), 0, flops});
  if (bias)
    emit({"linear_forward", "bias", shape, "bf16",
          median_ms(ctx.stream, [&] { ops::linear_forward(ctx, out, in, w, b); }, e.rep), 0, flops});
  // rollout.exact_logprobs: one cuBLASLt algorithm for every row count.
  ops::Ctx invariant = ctx;
  invariant.batch_invariant = true;
  emit({"linear_forward", bias ? "batch_invariant_bias" : "batch_invariant", shape, "bf16",
        median_ms(ctx.stream, [&] { ops::linear_forward(invariant, out, in, w, bias ? b : Tensor{}); }, e.rep), 0,
        flops});
  emit({"matmul", "backward_data", shape, "bf16",
        median_ms(ctx.stream, [&] { ops::matmul(ctx, din, dout, w, false, false, 1, 0); }, e.rep), 0, flops});
  const double wgrad = median_ms(ctx.stream, [&] { ops::matmul(ctx, dw, dout, in, true, false, 1, 1); }, e.rep);
  emit({"matmul", "backward_weight", shape, "bf16->f32", wgrad, 0, flops});
  if (bias) {
    // linear_backward always takes dweight: the bias sum's cost is the difference.
    const double ms = median_ms(ctx.stream, [&] { ops::linear_backward(ctx, Tensor{}, dw, db, dout, in, w); }, e.rep);
    emit({"linear_backward", "weight_and_bias", shape, "bf16->f32", ms, 0, flops});
    Line l{"linear_backward", "bias_share", shape, "bf16->f32", std::max(ms - wgrad, 1e-6), double(dout.nbytes())};
    emit(l);
  }
}

void bench_matmul(Env& e) {
  std::printf("{\"device\":\"%s\"}\n", e.dev.name().c_str());
  Arena arena(size_t(5) << 30, Device::cuda, "bench-matmul");  // lm_head of 1.5B: 3.9 GB
  struct M4 {
    const char* name;
    int64_t C, q, kv, I;
  };
  const M4 models[] = {{"qwen2.5-1.5b", 1536, 1536, 256, 8960}, {"qwen2.5-0.5b", 896, 896, 128, 4864}};
  for (const int64_t T : e.shapes.values("T", {16384}))
    for (const M4& m : models) {
      matmul_projection(e, arena, m.name, "q", T, m.C, m.q, true);
      matmul_projection(e, arena, m.name, "k", T, m.C, m.kv, true);  // v has k's shape
      matmul_projection(e, arena, m.name, "o", T, m.q, m.C, false);
      matmul_projection(e, arena, m.name, "gate", T, m.C, m.I, false);  // up has gate's shape
      matmul_projection(e, arena, m.name, "down", T, m.I, m.C, false);
      matmul_projection(e, arena, m.name, "lm_head", std::min<int64_t>(T, 4096), m.C, 151936, false);
    }
  // The generation engine's GEMMs: M = (running sequences) rows by every
  // weight, bound by reading the weights; 50 calls back to back between
  // two events, as a replayed decode graph runs them.
  struct Layer {
    const char* model;
    const char* name;
    int64_t K, N;
    bool bias;
  };
  const Layer layers[] = {{"qwen2.5-0.5b", "q", 896, 896, true},     {"qwen2.5-0.5b", "k", 896, 128, true},
                          {"qwen2.5-0.5b", "o", 896, 896, false},    {"qwen2.5-0.5b", "gate", 896, 4864, false},
                          {"qwen2.5-0.5b", "down", 4864, 896, false}, {"qwen2.5-0.5b", "lm_head", 896, 151936, false},
                          {"qwen2.5-1.5b", "q", 1536, 1536, true},   {"qwen2.5-1.5b", "k", 1536, 256, true},
                          {"qwen2.5-1.5b", "gate", 1536, 8960, false}, {"qwen2.5-1.5b", "down", 8960, 1536, false}};
  for (const int64_t M : e.shapes.values("M", {1, 32, 128, 256}))
    for (const Layer& l : layers) {
      ArenaScope scope(arena);
      Tensor in = arena.alloc(DType::bf16, {M, l.K}), w = arena.alloc(DType::bf16, {l.N, l.K});
      Tensor out = arena.alloc(DType::bf16, {M, l.N}), b = arena.alloc(DType::bf16, {l.N});
      for (const Tensor* t : {&in, &w, &b}) fill_random(e.dev, *t, 9);
      const Tensor bias = l.bias ? b : Tensor{};
      const std::string shape =
          std::string("model=") + l.model + ",layer=" + l.name + "," + kv({{"M", M}, {"N", l.N}, {"K", l.K}});
      const double ms = batch_ms(e.ctx.stream, [&] { ops::linear_forward(e.ctx, out, in, w, bias); }, 50, e.rep);
      emit({"linear_forward", "decode", shape, "bf16", ms, double(w.nbytes()),
            2.0 * double(M) * double(l.N) * double(l.K)});
      ops::Ctx invariant = e.ctx;
      invariant.batch_invariant = true;
      const double ms_inv =
          batch_ms(e.ctx.stream, [&] { ops::linear_forward(invariant, out, in, w, bias); }, 50, e.rep);
      emit({"linear_forward", "decode_batch_invariant", shape, "bf16", ms_inv, double(w.nbytes()),
            2.0 * double(M) * double(l.N) * double(l.K)});
    }
}

// gate/up + SwiGLU: the fused launch against the gate/up product (as
// linear_forward_multi routes it) then swiglu_forward, in CUDA graphs whose
// weights rotate through ~1 GB (cold L2); --sweep: every tile width with
// the plan's ring and the other one. Then the wide (prefill) kernel against
// the unfused path on one weight pair (a prefill layer's: in L2 after the
// first call).
void bench_linear_swiglu(Env& e) {
  std::printf("{\"device\":\"%s\"}\n", e.dev.name().c_str());
  struct M3 {
    const char* name;
    int64_t K, I;
  };
  const M3 models[] = {{"qwen2.5-0.5b", 896, 4864},
                       {"qwen2.5-1.5b", 1536, 8960},
                       {"qwen2.5-7b-tp2", 3584, 9472},
                       {"qwen2.5-7b", 3584, 18944}};
  const ops::Ctx& ctx = e.ctx;
  {
    Arena big(size_t(3) << 30, Device::cuda, "bench-swiglu-decode");
    const int64_t pool_elems = int64_t(480) << 20;
    const Tensor pool = big.alloc(DType::bf16, {pool_elems});
    fill_random(e.dev, pool, 3, -0.05f, 0.05f);
    for (const M3& m : models)
      for (const int64_t M : e.shapes.values("M", {1, 8, 32, 64, 128, 256})) {
        if (M > 1024) continue;
        ArenaScope scope(big);
        Tensor in = big.alloc(DType::bf16, {M, m.K}), h = big.alloc(DType::bf16, {M, m.I});
        Tensor gate = big.alloc(DType::bf16, {M, m.I}), up = big.alloc(DType::bf16, {M, m.I});
        fill_random(e.dev, in, 4);
        const size_t set = size_t(2 * m.I * m.K) * 2;
        const size_t stride = (set + 4095) / 4096 * 4096 + 4096 * 7;
        const int calls = set > 64e6 ? 10 : 40;
        auto weights = [&](int call, int which) {
          size_t at = (size_t(call) * stride) % (pool.nbytes() - stride + 1);
          at -= at % 256;
          return Tensor(static_cast<char*>(pool.data) + at + size_t(which) * (set / 2), DType::bf16, {m.I, m.K},
                        Device::cuda);
        };
        auto time = [&](auto&& one) {
          return graph_ms(ctx, calls, [&](int i) { one(weights(i, 0), weights(i, 1)); }, e.rep);
        };
        const std::string shape = std::string("model=") + m.name + "," + kv({{"M", M}, {"K", m.K}, {"I", m.I}});
        const double bytes = double(set), flops = 2.0 * double(M) * double(2 * m.I) * double(m.K);
        const cd::SwigluPlan plan = cd::linear_swiglu_plan(M, m.K, m.I);
        auto plan_str = [](const cd::SwigluPlan& p) {
          return std::to_string(p.cols) + "x" + std::to_string(p.rows) + (p.deep ? "_deep" : "");
        };
        if (!e.sweep) {
          emit({"linear_swiglu_forward", "unfused", shape, "bf16", time([&](Tensor wg, Tensor wu) {
                  const ops::LinearSegment segs[] = {{gate, wg, Tensor{}}, {up, wu, Tensor{}}};
                  ops::linear_forward_multi(ctx, in, segs);
                  ops::swiglu_forward(ctx, h, gate, up);
                }),
                bytes, flops});
          if (cd::linear_swiglu_gemv_supported(h, in, weights(0, 0), weights(0, 1)))
            emit({"linear_swiglu_forward", "gemv", shape, "bf16",
                  time([&](Tensor wg, Tensor wu) { cd::linear_swiglu_gemv(ctx, h, in, wg, wu); }), bytes, flops});
          if (plan.cols == 0) continue;  // no fused plan (not an sm_90a build)
          Line l{"linear_swiglu_forward", "fused", shape, "bf16",
                 time([&](Tensor wg, Tensor wu) { cd::linear_swiglu_fused(ctx, h, in, wg, wu, &plan); }), bytes, flops};
          l.extra["plan"] = plan_str(plan);
          emit(l);
          continue;
        }
        if (plan.cols == 0) continue;
        // Every width at this row count, with the plan's ring and the other.
        for (const bool other_ring : {false, true})
          for (const int cols : cd::linear_swiglu_widths()) {
            const cd::SwigluPlan p{cols, plan.rows, other_ring ? !plan.deep : plan.deep};
            Line l{"linear_swiglu_forward", "fused_width", shape, "bf16",
                   time([&](Tensor wg, Tensor wu) { cd::linear_swiglu_fused(ctx, h, in, wg, wu, &p); }), bytes, flops};
            l.extra["plan"] = plan_str(p);
            l.extra["default"] = plan_str(plan);
            emit(l);
          }
      }
  }
  if (e.sweep || !cd::linear_swiglu_wide_preferred(4096, 896, 4864)) return;  // the wide kernel: sm_90a builds
  Arena big(size_t(6) << 30, Device::cuda, "bench-swiglu-prefill");
  for (const M3& m : models) {
    if (std::string(m.name) == "qwen2.5-7b-tp2") continue;
    for (const int64_t M : e.shapes.values("M", {512, 1024, 4096, 32768})) {
      if (M < 512 || M * m.I > (int64_t(160) << 20)) continue;  // gate, up and h within the arena
      ArenaScope scope(big);
      Tensor in = big.alloc(DType::bf16, {M, m.K}), h = big.alloc(DType::bf16, {M, m.I});
      Tensor gate = big.alloc(DType::bf16, {M, m.I}), up = big.alloc(DType::bf16, {M, m.I});
      Tensor wg = big.alloc(DType::bf16, {m.I, m.K}), wu = big.alloc(DType::bf16, {m.I, m.K});
      fill_random(e.dev, in, 4);
      fill_random(e.dev, wg, 5, -0.05f, 0.05f);
      fill_random(e.dev, wu, 6, -0.05f, 0.05f);
      const int calls = M >= 32768 ? 3 : 10;
      auto time = [&](auto&& one) { return graph_ms(ctx, calls, [&](int) { one(); }, e.rep); };
      const std::string shape = std::string("model=") + m.name + "," + kv({{"M", M}, {"K", m.K}, {"I", m.I}});
      const double flops = 2.0 * double(M) * double(2 * m.I) * double(m.K);
      const ops::LinearSegment segs[] = {{gate, wg, Tensor{}}, {up, wu, Tensor{}}};
      emit({"linear_swiglu_forward", "prefill_unfused", shape, "bf16", time([&] {
              ops::linear_forward_multi(ctx, in, segs);
              ops::swiglu_forward(ctx, h, gate, up);
            }),
            0, flops});
      emit({"linear_forward_multi", "prefill_gate_up_alone", shape, "bf16",
            time([&] { ops::linear_forward_multi(ctx, in, segs); }), 0, flops});
      Line l{"linear_swiglu_forward", "prefill_wide", shape, "bf16",
             time([&] { cd::linear_swiglu_wide(ctx, h, in, wg, wu); }), 0, flops};
      l.extra["preferred"] = cd::linear_swiglu_wide_preferred(M, m.K, m.I);
      emit(l);
    }
  }
}

// us per layer in CUDA graphs (weights rotating through 960 MB, cold L2):
// o_proj and down_proj each with the norm after them, folded or not, and
// the consumers with the RowNorm against without.
void bench_norm_fold(Env& e) {
  std::printf("{\"device\":\"%s\"}\n", e.dev.name().c_str());
  ProjBench pb(e);
  Arena& big = pb.arena();
  struct M5 {
    const char* name;
    int64_t C, I, Hkv, D;
  };
  const ops::Ctx& ctx = e.ctx;
  const float eps = 1e-6f;
  for (const M5 m : {M5{"qwen2.5-0.5b", 896, 4864, 2, 64}, M5{"qwen2.5-1.5b", 1536, 8960, 2, 128}})
    for (const int64_t M : e.shapes.values("M", {1, 32, 64, 128})) {
      ArenaScope scope(big);
      auto act = [&](int64_t cols) {
        Tensor t = big.alloc(DType::bf16, {M, cols});
        fill_random(e.dev, t, 5, -1.0f, 1.0f);
        return t;
      };
      const Tensor attn = act(m.C), hid = act(m.I), x = act(m.C), x_mid = act(m.C), xn = act(m.C), part = act(m.C);
      const Tensor g = big.alloc(DType::bf16, {m.C}), rstd = big.alloc(DType::f32, {M});
      fill_random(e.dev, g, 6, 0.5f, 1.5f);
      const Tensor ssq = big.alloc(DType::f32, {M, ops::norm_fold_parts(m.C)});
      const int calls = 40;
      auto ms = [&](auto&& one) { return graph_ms(ctx, calls, [&](int i) { one(i); }, e.rep); };
      const std::string shape = std::string("model=") + m.name + "," + kv({{"M", M}});
      const double wo = double(m.C) * double(m.C) * 2, wd = double(m.C) * double(m.I) * 2;
      emit({"norm_fold", "o_proj_then_residual_rmsnorm", shape, "bf16", ms([&](int i) {
              ops::linear_forward(ctx, part, attn, pb.weight(i, m.C, m.C), Tensor{});
              ops::residual_rmsnorm_forward(ctx, x_mid, xn, rstd, x, part, g, eps);
            }),
            wo});
      emit({"norm_fold", "o_proj_fold", shape, "bf16",
            ms([&](int i) { ops::linear_residual_fold(ctx, x_mid, xn, ssq, attn, pb.weight(i, m.C, m.C), x, g); }), wo});
      emit({"norm_fold", "down_proj_then_residual_rmsnorm", shape, "bf16", ms([&](int i) {
              ops::linear_forward(ctx, part, hid, pb.weight(i, m.C, m.I), Tensor{});
              ops::residual_rmsnorm_forward(ctx, x, xn, rstd, x_mid, part, g, eps);
            }),
            wd});
      emit({"norm_fold", "down_proj_fold", shape, "bf16",
            ms([&](int i) { ops::linear_residual_fold(ctx, x, xn, ssq, hid, pb.weight(i, m.C, m.I), x_mid, g); }), wd});
      // The consumer's side: gate/up + SwiGLU with and without the row scale.
      const Tensor h = big.alloc(DType::bf16, {M, m.I}), gate = big.alloc(DType::bf16, {M, m.I}),
                   up = big.alloc(DType::bf16, {M, m.I});
      ops::linear_residual_fold(ctx, x_mid, xn, ssq, attn, pb.weight(0, m.C, m.C), x, g);
      const double wgu = 2 * wd;
      emit({"norm_fold", "swiglu", shape, "bf16", ms([&](int i) {
              ops::linear_swiglu_forward(ctx, h, gate, up, xn, pb.weight(i, m.I, m.C), pb.weight(i + 7, m.I, m.C));
            }),
            wgu});
      emit({"norm_fold", "swiglu_row_norm", shape, "bf16", ms([&](int i) {
              ops::linear_swiglu_forward(ctx, h, gate, up, xn, pb.weight(i, m.I, m.C), pb.weight(i + 7, m.I, m.C),
                                         ops::RowNorm{ssq, eps});
            }),
            wgu});
      // q/k/v + RoPE + cache write with and without it.
      const int64_t Nkv = m.Hkv * m.D;
      const Tensor q = big.alloc(DType::bf16, {M, m.C}), k = big.alloc(DType::bf16, {M, Nkv}),
                   v = big.alloc(DType::bf16, {M, Nkv}), bias = big.alloc(DType::bf16, {m.C + 2 * Nkv});
      fill_random(e.dev, bias, 7);
      const Tensor kc = big.alloc(DType::bf16, {M / 16 + 1, 16, m.Hkv, m.D}),
                   vc = big.alloc(DType::bf16, {M / 16 + 1, 16, m.Hkv, m.D});
      std::vector<int32_t> idx(static_cast<size_t>(M));
      std::iota(idx.begin(), idx.end(), 0);
      const Tensor pos = e.upload(big, idx, {M}), slots = e.upload(big, idx, {M});
      auto qkv = [&](int i, const ops::RowNorm& rn) {
        const Tensor w = pb.weight(i, m.C + 2 * Nkv, m.C);
        const ops::LinearSegment segs[] = {
            {q, w.slice_rows(0, m.C), bias.slice_rows(0, m.C)},
            {k, w.slice_rows(m.C, m.C + Nkv), bias.slice_rows(m.C, m.C + Nkv)},
            {v, w.slice_rows(m.C + Nkv, m.C + 2 * Nkv), bias.slice_rows(m.C + Nkv, m.C + 2 * Nkv)}};
        ops::qkv_rope_kv_write(ctx, xn, segs, kc, vc, pos, slots, ops::kRopeThetaQwen2, rn);
      };
      const double wqkv = double(m.C + 2 * Nkv) * double(m.C) * 2;
      emit({"norm_fold", "qkv", shape, "bf16", ms([&](int i) { qkv(i, ops::RowNorm{}); }), wqkv});
      emit({"norm_fold", "qkv_row_norm", shape, "bf16", ms([&](int i) { qkv(i, ops::RowNorm{ssq, eps}); }), wqkv});
    }
}

// The fused op against linear_forward_multi + rope_kv_write, each replayed
// from a CUDA graph of one call per layer over enough weight copies to
// leave L2 cold (as in a decode step).
void bench_qkv_rope_kv_write(Env& e) {
  struct S {
    const char* model;
    int64_t Hq, Hkv, D, C;
  };
  const ops::Ctx& ctx = e.ctx;
  Arena big(size_t(3) << 30, Device::cuda, "bench-qkv-rope");
  for (const S s : {S{"0.5B", 14, 2, 64, 896}, S{"1.5B", 12, 2, 128, 1536}, S{"7B", 28, 4, 128, 3584}})
    for (const int64_t B : e.shapes.values("B", {32, 64, 128, 256})) {
      ArenaScope scope(big);
      const int64_t Nq = s.Hq * s.D, Nkv = s.Hkv * s.D, BS = 16, NB = 4096;
      const double bytes = 2.0 * double(Nq + 2 * Nkv) * double(s.C);
      const int layers = int(std::max(4.0, std::ceil(200e6 / bytes)));
      std::vector<std::vector<ops::LinearSegment>> segs(static_cast<size_t>(layers));
      Tensor in = big.alloc(DType::bf16, {B, s.C});
      Tensor q = big.alloc(DType::bf16, {B, Nq}), k = big.alloc(DType::bf16, {B, Nkv});
      Tensor v = big.alloc(DType::bf16, {B, Nkv});
      Tensor kc = big.alloc(DType::bf16, {NB, BS, s.Hkv, s.D}), vc = big.alloc(DType::bf16, {NB, BS, s.Hkv, s.D});
      fill_random(e.dev, in, 1);
      for (int l = 0; l < layers; ++l) {
        Tensor wq = big.alloc(DType::bf16, {Nq, s.C}), wk = big.alloc(DType::bf16, {Nkv, s.C});
        Tensor wv = big.alloc(DType::bf16, {Nkv, s.C}), bq = big.alloc(DType::bf16, {Nq});
        Tensor bk = big.alloc(DType::bf16, {Nkv}), bv = big.alloc(DType::bf16, {Nkv});
        for (const Tensor& t : {wq, wk, wv, bq, bk, bv}) fill_random(e.dev, t, uint32_t(l + 2), -0.05f, 0.05f);
        segs[size_t(l)] = {{q, wq, bq}, {k, wk, bk}, {v, wv, bv}};
      }
      std::vector<int32_t> pos(static_cast<size_t>(B)), slots(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) pos[size_t(b)] = int32_t(300 + b), slots[size_t(b)] = int32_t(b * 37);
      const Tensor gpos = e.upload(big, pos, {B}), gslots = e.upload(big, slots, {B});
      const bool fused = cd::linear_multi_skinny_preferred(B, s.C, segs[0]) &&
                         cd::skinny_rope_plan(B, s.C, segs[0], s.D).config >= 0;
      const std::string shape =
          std::string("model=") + s.model + "," + kv({{"B", B}, {"Hq", s.Hq}, {"Hkv", s.Hkv}, {"D", s.D}, {"C", s.C}});
      const double flops = 2.0 * double(B) * double(Nq + 2 * Nkv) * double(s.C);
      Line op{"qkv_rope_kv_write", "op", shape, "bf16", graph_ms(ctx, layers, [&](int l) {
                ops::qkv_rope_kv_write(ctx, in, segs[size_t(l)], kc, vc, gpos, gslots, ops::kRopeThetaQwen2);
              }, e.rep), bytes, flops};
      op.extra["fused_launch"] = fused;
      emit(op);
      emit({"qkv_rope_kv_write", "linear_forward_multi_then_rope_kv_write", shape, "bf16",
            graph_ms(ctx, layers, [&](int l) {
              ops::linear_forward_multi(ctx, in, segs[size_t(l)]);
              ops::rope_kv_write(ctx, q.reshape({B, s.Hq, s.D}), k.reshape({B, s.Hkv, s.D}), kc, vc,
                                 v.reshape({B, s.Hkv, s.D}), gpos, gslots, ops::kRopeThetaQwen2);
            }, e.rep),
            bytes, flops});
    }
}

// ---- the LM head's consumers ----

void bench_logprob(Env& e) {
  const int64_t N = e.shapes.value("N", 4096), V = e.shapes.value("V", 151936);  // 4096 tokens, Qwen2.5's vocabulary
  Arena big(size_t(N * V) * 2 * 2 + (size_t(64) << 20), Device::cuda, "bench-logprob");
  Tensor x = big.alloc(DType::bf16, {N, V}), dx = big.alloc(DType::bf16, {N, V});
  fill_random(e.dev, x, 3, -8, 8);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  std::mt19937 gen(4);
  for (auto& t : targets) t = int32_t(gen() % uint32_t(V));
  Tensor t = e.upload(big, targets, {N});
  Tensor lp = big.alloc(DType::f32, {N}), ent = big.alloc(DType::f32, {N}), lse = big.alloc(DType::f32, {N});
  Tensor row_max = big.alloc(DType::f32, {N}), sums = big.alloc(DType::f32, {N, 3});
  Tensor g1 = big.alloc(DType::f32, {N}), g2 = big.alloc(DType::f32, {N});
  fill_random(e.dev, g1, 5);
  fill_random(e.dev, g2, 6);
  const float inv_t = 1.0f / 0.7f;
  const ops::Ctx& ctx = e.ctx;
  const double bytes = double(N) * double(V) * 2;
  const std::string shape = kv({{"N", N}, {"V", V}});
  emit({"logprob_entropy_forward", "", shape, "bf16",
        median_ms(ctx.stream, [&] { ops::logprob_entropy_forward(ctx, lp, ent, lse, x, t, 0, inv_t); }, e.rep), bytes});
  emit({"logprob_three_pass", "logits_row_max+logits_partial_sums+logprob_entropy_finish", shape, "bf16",
        median_ms(ctx.stream, [&] {
          ops::logits_row_max(ctx, row_max, x, inv_t);
          ops::logits_partial_sums(ctx, sums, x, t, row_max, 0, inv_t);
          ops::logprob_entropy_finish(ctx, lp, ent, lse, sums, row_max);
        }, e.rep),
        2 * bytes});
  ops::logprob_entropy_forward(ctx, lp, ent, lse, x, t, 0, inv_t);
  emit({"logprob_entropy_backward", "", shape, "bf16",
        median_ms(ctx.stream, [&] { ops::logprob_entropy_backward(ctx, dx, g1, g2, x, t, lse, ent, 0, inv_t); }, e.rep),
        2 * bytes});
  emit({"logprob_entropy_backward", "in_place", shape, "bf16",
        median_ms(ctx.stream, [&] { ops::logprob_entropy_backward(ctx, x, g1, g2, x, t, lse, ent, 0, inv_t); }, e.rep),
        2 * bytes});
  emit({"cast", "copy_reference", shape, "bf16", median_ms(ctx.stream, [&] { ops::cast(ctx, dx, x); }, e.rep),
        2 * bytes});
}

void make_keys(int64_t B, uint32_t seed, std::vector<int64_t>& streams, std::vector<int64_t>& counters) {
  std::mt19937_64 gen(seed);
  streams.resize(size_t(B));
  counters.resize(size_t(B));
  for (int64_t b = 0; b < B; ++b) {
    streams[size_t(b)] = int64_t(stream_id({gen(), uint64_t(b)}));
    counters[size_t(b)] = int64_t(gen() % 100000);
  }
}

// The fused op against the head (linear_forward: cuBLASLt at these rows)
// plus sample_tokens, each timed as a CUDA graph of 20 calls, Qwen2.5 heads
// (tied embeddings: 0.5B C = 896, 1.5B C = 1536).
void bench_lm_head_sample(Env& e) {
  const ops::Ctx& ctx = e.ctx;
  Arena big(size_t(2) << 30, Device::cuda, "bench-lm-head");
  const int64_t V = 151936;
  for (const int64_t C : e.shapes.values("C", {896, 1536}))
    for (const int64_t B : e.shapes.values("B", {1, 32, 128, 256})) {
      ArenaScope scope(big);
      Tensor h = big.alloc(DType::bf16, {B, C}), w = big.alloc(DType::bf16, {V, C});
      fill_random(e.dev, h, 1, -0.1f, 0.1f);
      fill_random(e.dev, w, 2, -1.0f, 1.0f);
      std::vector<int64_t> streams, counters;
      make_keys(B, 2, streams, counters);
      Tensor ds = e.upload(big, streams, {B}), dc = e.upload(big, counters, {B});
      Tensor tok = big.alloc(DType::i32, {B}), lp = big.alloc(DType::f32, {B}), logits = big.alloc(DType::f32, {B, V});
      ops::SamplingParams p;
      p.seed = 91;
      const std::string shape = kv({{"B", B}, {"V", V}, {"C", C}});
      const double bytes = double(V * C * 2), flops = 2.0 * double(B) * double(V) * double(C);
      emit({"lm_head_sample", "fused", shape, "bf16",
            graph_ms(ctx, 20, [&](int) { ops::lm_head_sample(ctx, tok, lp, h, w, Tensor{}, ds, dc, p); }, e.rep), bytes,
            flops});
      emit({"lm_head_sample", "linear_forward_then_sample_tokens", shape, "bf16", graph_ms(ctx, 20, [&](int) {
              ops::linear_forward(ctx, logits, h, w, Tensor{});
              ops::sample_tokens(ctx, tok, lp, logits, Tensor{}, ds, dc, p);
            }, e.rep),
            bytes, flops});
      emit({"lm_head_sample", "linear_forward_alone", shape, "bf16",
            graph_ms(ctx, 20, [&](int) { ops::linear_forward(ctx, logits, h, w, Tensor{}); }, e.rep), bytes, flops});
    }
}

void bench_sample_tokens(Env& e) {
  Arena big(size_t(1) << 30, Device::cuda, "bench-sampling");
  const int64_t V = 151936;
  auto P = [](float t, int k, float top_p) {
    ops::SamplingParams p;
    p.seed = 77;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    return p;
  };
  struct Case {
    const char* name;
    ops::SamplingParams p;
  };
  const Case cases[] = {{"T1", P(1.0f, 0, 1.0f)},
                        {"greedy", P(0.0f, 0, 1.0f)},
                        {"T0.7_topk20", P(0.7f, 20, 1.0f)},
                        {"T0.7_topk1000", P(0.7f, 1000, 1.0f)},
                        {"T0.7_topp0.9", P(0.7f, 0, 0.9f)},
                        {"T0.7_topp0.95", P(0.7f, 0, 0.95f)},
                        {"T0.7_topk20_topp0.9", P(0.7f, 20, 0.9f)},
                        {"T0.7_topk1000_topp0.95", P(0.7f, 1000, 0.95f)}};
  ops::Ctx one_cta = e.ctx;  // the untruncated sampler's one CTA a row (no scratch)
  one_cta.scratch = nullptr;
  const bool custom = e.shapes.has("B");
  for (const int64_t B : e.shapes.values("B", {1, 8, 128, 512}))
    for (const DType dt : {DType::f32, DType::bf16})
      for (const float spread : {8.0f, 20.0f}) {  // logits uniform in [-spread, spread)
        if (!custom && B == 512 && (dt == DType::f32 || spread != 8.0f)) continue;
        if (!custom && B < 128 && (dt == DType::bf16 || spread != 8.0f)) continue;
        ArenaScope scope(big);
        Tensor logits = big.alloc(dt, {B, V});
        fill_random(e.dev, logits, 1, -spread, spread);
        std::vector<int64_t> streams, counters;
        make_keys(B, 2, streams, counters);
        Tensor ds = e.upload(big, streams, {B}), dc = e.upload(big, counters, {B});
        Tensor tok = big.alloc(DType::i32, {B}), lp = big.alloc(DType::f32, {B});
        const std::string shape = kv({{"B", B}, {"V", V}, {"spread", int64_t(spread)}});
        const double bytes = double(B) * double(V) * double(dtype_size(dt));
        for (const Case& c : cases) {
          if (!custom && B < 128 && (c.p.top_k > 0 || c.p.top_p < 1.0f)) continue;  // T1 and greedy only
          emit({"sample_tokens", c.name, shape, dtype_name(dt),
                median_ms(e.ctx.stream, [&] { ops::sample_tokens(e.ctx, tok, lp, logits, Tensor{}, ds, dc, c.p); },
                          e.rep),
                bytes});
        }
        emit({"sample_tokens", "T1_one_cta", shape, dtype_name(dt),
              median_ms(e.ctx.stream, [&] { ops::sample_tokens(one_cta, tok, lp, logits, Tensor{}, ds, dc, cases[0].p); },
                        e.rep),
              bytes});
      }
}

using BenchFn = void (*)(Env&);
BenchFn bench_of(const std::string& name) {
  if (name == "rmsnorm") return bench_rmsnorm;
  if (name == "swiglu") return bench_swiglu;
  if (name == "rope") return bench_rope;
  if (name == "rope_kv_write") return bench_rope_kv_write;
  if (name == "embedding") return bench_embedding;
  if (name == "adamw") return bench_adamw;
  if (name == "sum_squares") return bench_sum_squares;
  if (name == "cast") return bench_cast;
  if (name == "fill") return bench_fill;
  if (name == "memcpy") return bench_memcpy;
  if (name == "attention") return bench_attention;
  if (name == "paged_attention") return bench_paged_attention;
  if (name == "qkv_rope_kv_write") return bench_qkv_rope_kv_write;
  if (name == "linear_multi") return bench_linear_multi;
  if (name == "matmul") return bench_matmul;
  if (name == "linear_swiglu") return bench_linear_swiglu;
  if (name == "norm_fold") return bench_norm_fold;
  if (name == "logprob") return bench_logprob;
  if (name == "lm_head_sample") return bench_lm_head_sample;
  if (name == "sample_tokens") return bench_sample_tokens;
  return nullptr;
}

}  // namespace
#endif  // DAPO_WITH_CUDA

int main(int argc, char** argv) {
  std::vector<std::string> names;
  std::string shape_spec, part;
  bool sweep = false, list = false;
  int reps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_ops_gpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--list") list = true;
    else if (a == "--sweep") sweep = true;
    else if (a == "--op") {
      std::string v = next();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = v.find(',', at);
        names.push_back(v.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    } else if (a == "--shape") shape_spec = next();
    else if (a == "--part") part = next();
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "bench_ops_gpu: unknown argument %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (list) {
    for (const OpInfo& o : kOps)
      std::printf("%-18s %s\n%-18s   --shape keys: %s%s%s\n", o.name, o.what, "", o.keys,
                  o.sweep ? "; --sweep: " : "", o.sweep ? o.sweep : "");
    return 0;
  }
  if (names.empty()) {
    usage(stderr);
    return 2;
  }
  if (names.size() == 1 && names[0] == "all") {
    names.clear();
    for (const OpInfo& o : kOps)
      if (!sweep || o.sweep) names.push_back(o.name);
  }
  for (const std::string& n : names) {
    const OpInfo* info = nullptr;
    for (const OpInfo& o : kOps)
      if (n == o.name) info = &o;
    if (info == nullptr) {
      std::fprintf(stderr, "bench_ops_gpu: no op '%s' (--list shows them)\n", n.c_str());
      return 2;
    }
    if (sweep && info->sweep == nullptr) {
      std::fprintf(stderr, "bench_ops_gpu: %s has no --sweep (--list shows the ops that have one)\n", n.c_str());
      return 2;
    }
  }
  if (!part.empty() && part != "tail" && part != "mid") {
    std::fprintf(stderr, "bench_ops_gpu: --part tail or mid, not %s\n", part.c_str());
    return 2;
  }
  if (reps < 1 || warmup < 0) {
    std::fprintf(stderr, "bench_ops_gpu: --reps >= 1, --warmup >= 0\n");
    return 2;
  }
#ifndef DAPO_WITH_CUDA
  std::printf("{\"bench\": \"ops_gpu\", \"skipped\": \"built without CUDA\"}\n");
  (void)shape_spec;
  return 0;
#else
  if (dapo::ops::cuda_device_count() == 0) {
    std::printf("{\"bench\": \"ops_gpu\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  dapo::ops::CudaDevice dev(0);
  dapo::Arena scratch(size_t(256) << 20, dapo::Device::cuda, "bench-ops-scratch");
  Env env{dev, dev.ctx(&scratch), Shapes(shape_spec), Repeat{reps, warmup}, sweep, part};
  std::printf("{\"bench\":\"ops_gpu\",\"device\":\"%s\",\"reps\":%d,\"warmup\":%d,\"peak_gbps\":%.0f,"
              "\"peak_tflops\":%.0f}\n",
              dev.name().c_str(), reps, warmup, kPeakBytesPerSecond / 1e9, kPeakFlopsPerSecond / 1e12);
  for (const std::string& n : names) {
    bench_of(n)(env);
    dev.synchronize();
  }
  for (const std::string& k : env.shapes.unused())
    std::fprintf(stderr, "bench_ops_gpu: --shape %s is not a key of %s\n", k.c_str(), names.size() == 1 ? names[0].c_str() : "these ops");
  return 0;
#endif
}
