// What a dependency between two phases of a decode step costs on this GPU,
// and how much of the HBM bandwidth a chain of short dependent phases can
// use: the question behind a persistent decode kernel. A 0.5B decode step
// at batch 128 is ~190 kernels, each a phase whose every CTA needs what
// every CTA of the phase before wrote; its weights (and KV) do not depend
// on the phase before.
//
// P phases; in phase p every CTA (one per SM) streams its share of the
// phase's weights (V 16-byte loads per thread, a fresh region per phase,
// so the P x bytes_per_phase stream from DRAM), then reads the value every
// CTA wrote in phase p - 1, and writes one value. Modes:
//   - graph_plain: one kernel per phase in a CUDA graph, no PDL;
//   - graph_pdl: the same as programmatic dependents (griddepcontrol.wait
//     first, as every decode kernel does);
//   - graph_pdl_early: as graph_pdl, the weights loaded before the wait;
//   - ..._cluster8, ..._smem200k: as graph_pdl(_early), in clusters of 8
//     CTAs (132 -> 128 CTAs), or each CTA holding 200 KB of shared memory
//     (what the TMA GEMM tiles of the decode step hold);
//   - persistent: one kernel (cooperative launch), a grid barrier between
//     phases (a monotonic counter: release add, acquire spin), the weights
//     loaded after the barrier;
//   - persistent_early: the phase's weights loaded before waiting for the
//     barrier.
// stream_only: the same bytes in one kernel without dependencies (what the
// GPU reads at best). Prints one JSON line per (mode, bytes per phase):
// us_per_phase, the achieved TB/s and its fraction of stream_only.
//   bench_phase_sync_gpu [--phases 192] [--reps 20]
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common.cuh"
#include "ptx/pdl.cuh"

using dapo::ops::cuda::detail::launch_pdl;
using dapo::ops::cuda::detail::pdl_launch_dependents;
using dapo::ops::cuda::detail::pdl_wait;

namespace {

constexpr int kThreads = 256;

struct PhaseArgs {
  const uint4* weights;  // phases x ctas x V x kThreads uint4
  float* values;         // (phases + 1) x ctas: phase p reads row p, writes row p + 1
  unsigned* counter;     // persistent modes: CTAs arrived, over all phases
  int phases, ctas;
};

template <int V>
__device__ __forceinline__ void load_weights(const PhaseArgs& a, int p, uint4 (&w)[V > 0 ? V : 1]) {
  const uint4* src = a.weights + (int64_t(p) * a.ctas + blockIdx.x) * V * kThreads + threadIdx.x;
#pragma unroll
  for (int i = 0; i < V; ++i) w[i] = __ldcs(src + i * kThreads);
}

// The phase's value: every CTA's value of the phase before, summed in CTA
// order (one warp), plus what the weights fold to (so no load is dead).
template <int V>
__device__ __forceinline__ void finish_phase(const PhaseArgs& a, int p, const uint4 (&w)[V > 0 ? V : 1]) {
  __shared__ float s_w[kThreads / 32];
  uint32_t x = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) x ^= w[i].x ^ w[i].y ^ w[i].z ^ w[i].w;
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) s_w[threadIdx.x / 32] = float(x & 1u);
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = 0;
    for (int c = threadIdx.x; c < a.ctas; c += 32) s += __ldcg(a.values + int64_t(p) * a.ctas + c);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) {
      float f = 0;
      for (int i = 0; i < kThreads / 32; ++i) f += s_w[i];
      a.values[int64_t(p + 1) * a.ctas + blockIdx.x] = 0.5f * s / float(a.ctas) + 1e-30f * f;
    }
  }
}

template <int V, bool kEarly>
__global__ void __launch_bounds__(kThreads) phase_kernel(const PhaseArgs a, int p) {
  uint4 w[V > 0 ? V : 1];
  if (kEarly) load_weights<V>(a, p, w);
  pdl_wait();
  pdl_launch_dependents();
  if (!kEarly) load_weights<V>(a, p, w);
  finish_phase<V>(a, p, w);
}

__device__ __forceinline__ void arrive(unsigned* counter) {
  __syncthreads();  // the phase's value is written
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
  }
}

__device__ __forceinline__ void wait_for(const unsigned* counter, unsigned target) {
  if (threadIdx.x == 0) {
    unsigned v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
    } while (v < target);
  }
  __syncthreads();
}

template <int V, bool kEarly>
__global__ void __launch_bounds__(kThreads) persistent_kernel(const PhaseArgs a) {
  for (int p = 0; p < a.phases; ++p) {
    uint4 w[V > 0 ? V : 1];
    if (kEarly) load_weights<V>(a, p, w);
    if (p > 0) wait_for(a.counter, unsigned(p) * unsigned(a.ctas));
    if (!kEarly) load_weights<V>(a, p, w);
    finish_phase<V>(a, p, w);
    arrive(a.counter);
  }
}

template <int V>
__global__ void __launch_bounds__(kThreads) stream_kernel(const PhaseArgs a) {
  for (int p = 0; p < a.phases; ++p) {
    uint4 w[V > 0 ? V : 1];
    load_weights<V>(a, p, w);
    uint32_t x = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) x ^= w[i].x ^ w[i].y ^ w[i].z ^ w[i].w;
    if (x == 0x9e3779b9u) a.values[blockIdx.x] = 1.0f;  // keeps the loads
  }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    DAPO_CUDA_CHECK(cudaEventCreate(&a));
    DAPO_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

// Mean ms of `reps` calls of f on stream s, after two warm-ups.
template <class F>
double time_ms(cudaStream_t s, int reps, F&& f) {
  Timer t;
  f();
  f();
  DAPO_CUDA_CHECK(cudaEventRecord(t.a, s));
  for (int i = 0; i < reps; ++i) f();
  DAPO_CUDA_CHECK(cudaEventRecord(t.b, s));
  DAPO_CUDA_CHECK(cudaEventSynchronize(t.b));
  float ms = 0;
  DAPO_CUDA_CHECK(cudaEventElapsedTime(&ms, t.a, t.b));
  return double(ms) / reps;
}

template <int V>
void run(cudaStream_t s, PhaseArgs a, int reps, const char* gpu) {
  const double bytes = double(a.ctas) * V * kThreads * 16;
  const dim3 grid(unsigned(a.ctas)), block(kThreads);

  const double stream_ms = V == 0 ? 0.0 : time_ms(s, reps, [&] {
    stream_kernel<V><<<grid, block, 0, s>>>(a);
    DAPO_CUDA_CHECK_LAUNCH();
  });
  auto report = [&](const char* mode, double ms, int ctas) {
    const double us = 1e3 * ms / a.phases;
    const double tbs = bytes > 0 ? bytes * ctas / a.ctas * a.phases / (ms * 1e-3) / 1e12 : 0.0;
    const double stream_tbs = V == 0 ? 0.0 : bytes * a.phases / (stream_ms * 1e-3) / 1e12;
    std::printf("{\"bench\": \"phase_sync_gpu\", \"gpu\": \"%s\", \"mode\": \"%s\", \"phases\": %d, \"ctas\": %d, "
                "\"bytes_per_phase\": %.0f, \"us_per_phase\": %.3f, \"tb_s\": %.3f, \"stream_only_tb_s\": %.3f, "
                "\"fraction_of_stream\": %.3f}\n",
                gpu, mode, a.phases, ctas, bytes * ctas / a.ctas, us, tbs, stream_tbs, stream_tbs > 0 ? tbs / stream_tbs : 0.0);
  };

  // cluster > 1: the grid in thread-block clusters (as the split-K GEMMs
  // run); smem: dynamic shared memory a CTA asks for (unused), which keeps a
  // dependent CTA off an SM until the CTA there exits.
  auto graph_of = [&](bool pdl, auto kernel, int cluster, int smem) {
    if (smem > 0)
      DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cudaGraph_t g;
    cudaGraphExec_t e;
    DAPO_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int p = 0; p < a.phases; ++p) {
      cudaLaunchAttribute attrs[2];
      int n = 0;
      if (pdl) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n++].val.programmaticStreamSerializationAllowed = 1;
      }
      if (cluster > 1) {
        attrs[n].id = cudaLaunchAttributeClusterDimension;
        attrs[n++].val.clusterDim = {unsigned(cluster), 1, 1};
      }
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(unsigned(a.ctas / cluster * cluster));
      config.blockDim = block;
      config.dynamicSmemBytes = size_t(smem);
      config.stream = s;
      config.attrs = attrs;
      config.numAttrs = unsigned(n);
      PhaseArgs b = a;
      b.ctas = int(config.gridDim.x);
      DAPO_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, b, p));
    }
    DAPO_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    DAPO_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    DAPO_CUDA_CHECK(cudaGraphDestroy(g));
    return e;
  };
  struct GraphMode {
    const char* name;
    bool pdl;
    void (*kernel)(PhaseArgs, int);
    int cluster, smem;
  };
  constexpr int kBigSmem = 200 * 1024;
  for (const GraphMode& m : {GraphMode{"graph_plain", false, phase_kernel<V, false>, 1, 0},
                             GraphMode{"graph_pdl", true, phase_kernel<V, false>, 1, 0},
                             GraphMode{"graph_pdl_early", true, phase_kernel<V, true>, 1, 0},
                             GraphMode{"graph_pdl_early_cluster8", true, phase_kernel<V, true>, 8, 0},
                             GraphMode{"graph_pdl_early_smem200k", true, phase_kernel<V, true>, 1, kBigSmem},
                             GraphMode{"graph_pdl_cluster8_smem200k", true, phase_kernel<V, false>, 8, kBigSmem},
                             GraphMode{"graph_pdl_early_cluster8_smem200k", true, phase_kernel<V, true>, 8, kBigSmem}}) {
    cudaGraphExec_t e = graph_of(m.pdl, m.kernel, m.cluster, m.smem);
    report(m.name, time_ms(s, reps, [&] { DAPO_CUDA_CHECK(cudaGraphLaunch(e, s)); }), a.ctas / m.cluster * m.cluster);
    DAPO_CUDA_CHECK(cudaGraphExecDestroy(e));
  }
  struct PersistentMode {
    const char* name;
    void (*kernel)(PhaseArgs);
  };
  for (const PersistentMode& m : {PersistentMode{"persistent", persistent_kernel<V, false>},
                                  PersistentMode{"persistent_early", persistent_kernel<V, true>}}) {
    report(m.name, time_ms(s, reps, [&] {
             DAPO_CUDA_CHECK(cudaMemsetAsync(a.counter, 0, sizeof(unsigned), s));
             void* args[] = {&a};
             DAPO_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(m.kernel), grid, block, args,
                                                         0, s));
           }),
           a.ctas);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int phases = 192, reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--phases" && i + 1 < argc) phases = std::stoi(argv[++i]);
    else if (arg == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_phase_sync_gpu [--phases 192] [--reps 20]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("{\"bench\": \"phase_sync_gpu\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  cudaDeviceProp prop{};
  DAPO_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  DAPO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  PhaseArgs a{};
  a.phases = phases;
  a.ctas = prop.multiProcessorCount;  // one CTA per SM: all resident, as the cooperative launch needs
  constexpr int kMaxV = 20;
  const size_t weight_bytes = size_t(phases) * a.ctas * kMaxV * kThreads * 16;
  void* w = nullptr;
  DAPO_CUDA_CHECK(cudaMalloc(&w, weight_bytes));
  DAPO_CUDA_CHECK(cudaMemsetAsync(w, 1, weight_bytes, s));
  DAPO_CUDA_CHECK(cudaMalloc(&a.values, size_t(phases + 1) * a.ctas * sizeof(float)));
  DAPO_CUDA_CHECK(cudaMemsetAsync(a.values, 0, size_t(phases + 1) * a.ctas * sizeof(float), s));
  DAPO_CUDA_CHECK(cudaMalloc(&a.counter, sizeof(unsigned)));
  a.weights = static_cast<const uint4*>(w);
  // 0: the dependency alone; 5: 2.7 MB a phase on 132 SMs (a 0.5B decode
  // step's weights over its ~190 kernels); 20: 10.8 MB (1.5B down_proj).
  run<0>(s, a, reps, prop.name);
  run<5>(s, a, reps, prop.name);
  run<20>(s, a, reps, prop.name);
  DAPO_CUDA_CHECK(cudaStreamSynchronize(s));
  DAPO_CUDA_CHECK(cudaFree(w));
  DAPO_CUDA_CHECK(cudaFree(a.values));
  DAPO_CUDA_CHECK(cudaFree(a.counter));
  return 0;
}
