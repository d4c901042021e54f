// CUDA rotary position embedding on bf16 (production) or f32 storage, with
// the CPU op's fp32 angle recipe (rope.h): inv_freq is computed on the host
// with the same std::pow as the CPU reference (a 1-ulp difference in
// inv_freq moves the angle at position 32k by ~2e-3 rad) and passed by
// value; the angle is one fp32 product; cos/sin are the precise sincosf
// (not __sinf/__cosf: angles reach tens of thousands of radians); the
// output is two separately rounded products and a sum, as on the CPU.
//
// One thread per (token, K consecutive pairs, kRopeHeadsInFlight heads): it
// computes its K angles and rotates them in its heads, moving packs of both
// halves. The precise sincosf of a large angle is a long serial path, so a
// decode step's few tokens need many threads sharing the angles: K is 16
// bytes' worth when the tokens alone fill the GPU (training), else 2
// (rope_pack_width). The device code is rope_common.cuh, shared with the
// fused decode op rope_kv_write.cu.
#include "common.cuh"
#include "dapo/ops/rope.h"
#include "attention/rope_common.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

// out may be in (each element is read and written by the same thread).
template <class T, int K>
__global__ void rope_kernel(T* out, const T* in, const int32_t* positions, int64_t tokens, int H, int D,
                            const __grid_constant__ RopeInvFreq inv_freq, float sign) {
  const int groups = D / 2 / K;
  const int chunks = rope_chunks(H);
  const int64_t total = tokens * chunks * groups;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / (int64_t(chunks) * groups);
    const int rest = int(idx - t * chunks * groups);
    const int i0 = (rest % groups) * K;
    const int h0 = (rest / groups) * kRopeHeadsInFlight;
    float c[K], s[K];
    rope_angles<K>(positions[t], inv_freq, i0, sign, c, s);
    const int64_t row = (t * H + h0) * D;
    rope_rotate_heads<T, K>(out + row, in + row, nullptr, min(kRopeHeadsInFlight, H - h0), D, i0, c, s);
  }
}

template <class T, int K>
void launch(const Ctx& ctx, T* out, const T* in, const int32_t* positions, int64_t tokens, int64_t H, int64_t D,
            const RopeInvFreq& inv_freq, float sign) {
  const int64_t total = tokens * rope_chunks(H) * (D / 2 / K);
  rope_kernel<T, K><<<grid_for(total, kRopeThreads), kRopeThreads, 0, stream_of(ctx)>>>(
      out, in, positions, tokens, int(H), int(D), inv_freq, sign);
  DAPO_CUDA_CHECK_LAUNCH();
}

template <class T>
void rotate(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, const RopeInvFreq& inv_freq, float sign) {
  const int64_t tokens = in.shape[0], H = in.shape[1], D = in.shape[2];
  T* o = static_cast<T*>(out.data);
  const T* x = static_cast<const T*>(in.data);
  const int64_t wide_threads = tokens * rope_chunks(H) * (D / 2 / kWidePack<T>);
  const int32_t* pos = positions.ptr<int32_t>();
  switch (rope_pack_width<T>(wide_threads, D, common_alignment({o, x}))) {
    case kWidePack<T>: launch<T, kWidePack<T>>(ctx, o, x, pos, tokens, H, D, inv_freq, sign); break;
    case 2: launch<T, 2>(ctx, o, x, pos, tokens, H, D, inv_freq, sign); break;
    default: launch<T, 1>(ctx, o, x, pos, tokens, H, D, inv_freq, sign); break;
  }
}

// The contract (dtypes, shapes, aliasing, theta) is checked by ops::rope_forward
// and rope_backward; here the kernel's limit.
void run(const char* op, const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta, float sign) {
  const int64_t T = in.shape[0], H = in.shape[1], D = in.shape[2];
  DAPO_CHECK(D / 2 <= kRopeMaxHalf, op, " on CUDA: head dimension ", D, " above ", 2 * kRopeMaxHalf);
  if (T == 0 || H == 0 || D == 0) return;
  const RopeInvFreq inv_freq = rope_inv_freq(theta, D);
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
