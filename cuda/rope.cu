// CUDA rotary position embedding on bf16 (production) or f32 storage, with
// the CPU op's fp32 angle recipe (rope.h): inv_freq is computed on the host
// with the same std::pow as the CPU reference (a 1-ulp difference in
// inv_freq moves the angle at position 32k by ~2e-3 rad) and passed by
// value; the angle is one fp32 product; cos/sin are the precise sincosf
// (not __sinf/__cosf: angles reach tens of thousands of radians); the
// output is two separately rounded products and a sum, as on the CPU.
//
// One thread per (token, K consecutive pairs, kHeadsInFlight heads): it
// computes its K angles and rotates them in its heads, moving packs of both
// halves. The precise sincosf of a large angle is a long serial path, so a
// decode step's few tokens need many threads sharing the angles: K is 16
// bytes' worth when the tokens alone fill the GPU (training), else 2 (see
// rotate()).
#include <cmath>

#include "common.cuh"
#include "dapo/ops/rope.h"
#include "pack.cuh"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;

constexpr int kMaxHalf = 256;  // D <= 512
constexpr int kHeadsInFlight = 4;

struct InvFreq {
  float v[kMaxHalf];
};

// out may be in (each element is read and written by the same thread).
template <class T, int K>
__global__ void rope_kernel(T* out, const T* in, const int32_t* positions, int64_t tokens, int H, int D,
                            const __grid_constant__ InvFreq inv_freq, float sign) {
  const int half = D / 2;
  const int groups = half / K;
  const int chunks = (H + kHeadsInFlight - 1) / kHeadsInFlight;
  const int64_t total = tokens * chunks * groups;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / (int64_t(chunks) * groups);
    const int rest = int(idx - t * chunks * groups);
    const int i0 = (rest % groups) * K;
    const float p = float(positions[t]);
    float c[K], s[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      sincosf(p * inv_freq.v[i0 + k], &s[k], &c[k]);
      s[k] *= sign;
    }
    {
      const int h0 = (rest / groups) * kHeadsInFlight;
      Pack<T, K> x1[kHeadsInFlight], x2[kHeadsInFlight];
#pragma unroll
      for (int j = 0; j < kHeadsInFlight; ++j) {
        if (h0 + j >= H) break;
        const int64_t base = (t * H + h0 + j) * D + i0;
        x1[j] = load_pack<T, K>(in + base);
        x2[j] = load_pack<T, K>(in + base + half);
      }
#pragma unroll
      for (int j = 0; j < kHeadsInFlight; ++j) {
        if (h0 + j >= H) break;
        const int64_t base = (t * H + h0 + j) * D + i0;
        Pack<T, K> y1, y2;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const float a = widen(x1[j].v[k]), b = widen(x2[j].v[k]);
          // Explicit roundings: no FMA contraction, as the CPU's x*cos + rotate_half(x)*sin.
          y1.v[k] = narrow<T>(__fadd_rn(__fmul_rn(a, c[k]), __fmul_rn(-b, s[k])));
          y2.v[k] = narrow<T>(__fadd_rn(__fmul_rn(b, c[k]), __fmul_rn(a, s[k])));
        }
        store_pack(out + base, y1);
        store_pack(out + base + half, y2);
      }
    }
  }
}

template <class T, int K>
void launch(const Ctx& ctx, T* out, const T* in, const int32_t* positions, int64_t tokens, int64_t H, int64_t D,
            const InvFreq& inv_freq, float sign) {
  const int64_t total = tokens * ((H + kHeadsInFlight - 1) / kHeadsInFlight) * (D / 2 / K);
  rope_kernel<T, K><<<grid_for(total, 256), 256, 0, stream_of(ctx)>>>(out, in, positions, tokens, int(H), int(D),
                                                                      inv_freq, sign);
  DAPO_CUDA_CHECK_LAUNCH();
}

template <class T>
void rotate(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, const InvFreq& inv_freq, float sign) {
  const int64_t tokens = in.shape[0], H = in.shape[1], D = in.shape[2];
  T* o = static_cast<T*>(out.data);
  const T* x = static_cast<const T*>(in.data);
  constexpr int kWide = kWidePack<T>;
  // Threads at the widest pack: enough for the GPU (~64k) in training, a
  // few thousand in a decode step, where narrower packs give more threads.
  const int64_t wide_threads = tokens * ((H + kHeadsInFlight - 1) / kHeadsInFlight) * (D / 2 / kWide);
  const int32_t* pos = positions.ptr<int32_t>();
  if ((D / 2) % kWide == 0 && aligned16(o) && aligned16(x) && wide_threads >= (int64_t(1) << 16))
    launch<T, kWide>(ctx, o, x, pos, tokens, H, D, inv_freq, sign);
  else if ((D / 2) % 2 == 0 && reinterpret_cast<uintptr_t>(o) % (2 * sizeof(T)) == 0 &&
           reinterpret_cast<uintptr_t>(x) % (2 * sizeof(T)) == 0)
    launch<T, 2>(ctx, o, x, pos, tokens, H, D, inv_freq, sign);
  else
    launch<T, 1>(ctx, o, x, pos, tokens, H, D, inv_freq, sign);
}

void run(const char* op, const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta, float sign) {
  check_device(ctx, out, "out");
  check_device(ctx, in, "in");
  check_device(ctx, positions, "positions");
  DAPO_CHECK(in.dtype == DType::f32 || in.dtype == DType::bf16, op, " on ", dtype_name(in.dtype));
  DAPO_CHECK_DTYPE(out, in.dtype);
  DAPO_CHECK_DTYPE(positions, DType::i32);
  DAPO_CHECK(in.ndim == 3, op, ": input must be (T, H, D), got ", in.shape_string());
  const int64_t T = in.shape[0], H = in.shape[1], D = in.shape[2];
  DAPO_CHECK(D % 2 == 0, op, ": head dimension ", D, " must be even");
  DAPO_CHECK(D / 2 <= kMaxHalf, op, ": head dimension ", D, " above ", 2 * kMaxHalf);
  DAPO_CHECK_SHAPE(out, {T, H, D});
  DAPO_CHECK_SHAPE(positions, {T});
  DAPO_CHECK(theta > 0.0f, op, ": theta ", theta, " must be positive");
  DAPO_CHECK(out.data == in.data || !overlaps(out, in), op, ": out and in overlap without being the same buffer");
  DAPO_CHECK(!overlaps(out, positions), op, ": out overlaps positions");
  if (T == 0 || H == 0 || D == 0) return;
  // Exactly the CPU reference's fp32 inv_freq (rope.cpp).
  InvFreq inv_freq{};
  for (int64_t i = 0; i < D / 2; ++i) inv_freq.v[i] = 1.0f / std::pow(theta, float(2 * i) / float(D));
  if (in.dtype == DType::f32) rotate<float>(ctx, out, in, positions, inv_freq, sign);
  else rotate<__nv_bfloat16>(ctx, out, in, positions, inv_freq, sign);
}

}  // namespace

void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta) {
  run("rope_forward", ctx, out, in, positions, theta, 1.0f);
}

void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta) {
  run("rope_backward", ctx, din, dout, positions, theta, -1.0f);
}

}  // namespace dapo::ops::cuda
