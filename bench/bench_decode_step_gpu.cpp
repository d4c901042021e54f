// One decode step of the generation engine, kernel by kernel: B sequences
// at context C each take one new token through Qwen2Model::forward_cached
// (random weights of a Qwen2.5 shape, a paged bf16 KV cache) and
// sample_tokens at T = 1, as the engine's decode graphs run them.
// Prints one JSON line:
//   - graph_step_ms: the step captured as one CUDA graph and replayed back
//     to back (the engine's decode step less its metadata's way in and the
//     samples' way out), against the HBM roofline (weights + every sequence's KV
//     read once per step, at the card's spec bandwidth);
//   - step_with_*_ms: the replays with the engine's copies between them
//     (the metadata upload, the fed tokens, the samples' read-back; each
//     alone, then all three): what the step boundary costs the GPU;
//     step_with_io_in_graph_ms: the same three done inside the graph by
//     ops::step_in / step_out (ops/step_io.h), as the engine now runs it;
//   - ops: each op's GPU time per step with the op profiler. A spinning
//     kernel holds the stream while the host enqueues the step, so the ops
//     then run back to back and the events time the GPU alone; their sum
//     against graph_step_ms shows what the events themselves cost;
//   - graph_kernels: each kernel's time per step inside the replayed graph,
//     from CUPTI (bench/kernel_trace.h): exclusive_us is the timeline the
//     kernel alone holds (PDL lets a kernel start while the one before it
//     runs: that overlap counts for the earlier one), and idle_us the time
//     no kernel runs, so the two add up to traced_step_ms (the replay with
//     CUPTI on) less the gap between replays; idle_before_us is the idle
//     time just before each kernel's launches. Absent without CUPTI.
//     With --by-grid, launches of one kernel with different grids are
//     listed apart ("name [x,y,z]"): the products one GEMM kernel serves.
// The weights' share of the step: the GEMMs (linear_forward*) read every
// weight once, attention reads the KV.
// --interleaved: block j of sequence b is pool block j * B + b (how a pool
// hands out blocks to sequences that grow in lockstep) instead of b * W + j.
// --bucket Cb: the step planned for contexts up to Cb >= C (an engine
// graph's context bucket), the sequences still at C.
// The head and the draw are fused (Qwen2Model::forward_cached_sample,
// ops/lm_head_sample.h) where the engine fuses them ("fused_head" in the
// JSON); --unfused: the head's logits, then sample_tokens, always.
// --drafts k: every sequence also runs k speculative draft rows sharing its
// block table (the engine's verify step); "batch" counts all rows, the
// roofline each sequence's KV once.
// --exact: the batch-invariant step of rollout.exact_logprobs (the model's
// ModelOptions::batch_invariant, the head unfused, and the sampled tokens
// scored by Qwen2Model::score_sampled, as the engine then runs it).
//   bench_decode_step_gpu [0.5b|1.5b|7b] [--batch 128] [--context 512] [--reps 20] [--by-grid] [--interleaved]
//                         [--bucket Cb] [--unfused] [--drafts k] [--exact]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/clock.h"
#include "dapo/core/log.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/op_profiler.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/step_io.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"
#include "kernel_trace.h"
#include "qwen25_shapes.h"

using namespace dapo;

namespace {

// v on the device, as (rows) or (rows, cols).
Tensor upload_i32(const ops::Ctx& ctx, Arena& arena, std::vector<int32_t>& v, int64_t rows, int64_t cols = 0) {
  const Tensor host = cols > 0 ? tensor_i32(v.data(), {rows, cols}) : tensor_i32(v.data(), {rows});
  const Tensor dev = cols > 0 ? arena.alloc(DType::i32, {rows, cols}) : arena.alloc(DType::i32, {rows});
  ops::copy(ctx, dev, host);
  return dev;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  std::string size = "0.5b";
  int64_t B = 128, C = 512, reps = 20, bucket = 0;
  int64_t drafts = 0;
  bool by_grid = false, interleaved = false, unfused = false, exact = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::stoll(argv[++i]) : 0LL; };
    if (a == "--batch") B = next();
    else if (a == "--context") C = next();
    else if (a == "--reps") reps = next();
    else if (a == "--by-grid") by_grid = true;
    else if (a == "--interleaved") interleaved = true;
    else if (a == "--bucket") bucket = next();
    else if (a == "--unfused") unfused = true;
    else if (a == "--drafts") drafts = next();
    else if (a == "--exact") exact = true;
    else size = a;
  }
  if (ops::cuda_device_count() == 0) {
    std::printf("{\"bench\": \"decode_step_gpu\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  DAPO_CHECK(B >= 1 && C >= 1 && reps >= 1 && drafts >= 0, "--batch, --context and --reps must be >= 1");
  configure_logging({runtime.world_rank(), false, LogLevel::warn});
  const model::Qwen2Config c = bench::qwen25(size, "bench_decode_step_gpu");
  const parallel::Comm tp = parallel::Comm::world().split(runtime.world_rank(), 0);
  ops::CudaDevice gpu(0);
  Arena no_scratch(0, Device::cuda, "unused");
  const ops::Ctx base = gpu.ctx(&no_scratch);
  model::ParamStore params(c, 0, 1, Device::cuda, base.stream);
  params.init_random(bench::hf_like_init());
  model::ModelOptions options;
  options.batch_invariant = exact;
  const model::Qwen2Model model(params, tp, options);

  // The cache: each sequence owns W blocks; the new token sits at C - 1.
  // With --bucket Cb the launch is planned for contexts up to Cb (the
  // table's width and max_context_len), as an engine graph whose context
  // bucket is above the sequences' lengths.
  DAPO_CHECK(bucket == 0 || bucket >= C, "--bucket ", bucket, " below --context ", C);
  // --drafts k: each sequence also runs k draft rows, as the engine's
  // speculative steps do (rollout/scheduler.h): row j of sequence b feeds
  // position C - 1 + j with b's block table and context C + j; B counts
  // the step's rows from here on.
  const int64_t sequences = B, per_seq = 1 + drafts;
  B = sequences * per_seq;
  const int64_t bs = 16, Cb = std::max(bucket > 0 ? bucket : C, C + drafts), W = (Cb + bs - 1) / bs;
  Arena kv_arena(model::kv_cache_bytes(c, 1, sequences * W, bs, Device::cuda), Device::cuda, "kv-cache");
  const model::KvCache cache = model::allocate_kv_cache(kv_arena, c, 1, sequences * W, bs);
  const size_t nb = size_t(B);
  std::vector<int32_t> tokens(nb), positions(nb), cu(nb + 1), last(nb), slots(nb), table(nb * size_t(W)), lens(nb);
  std::mt19937 gen(1);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t b = r / per_seq, j = r % per_seq;
    tokens[size_t(r)] = int32_t(gen() % uint32_t(c.vocab_size));
    cu[size_t(r)] = int32_t(r);
    last[size_t(r)] = int32_t(r);
    positions[size_t(r)] = int32_t(C - 1 + j);
    lens[size_t(r)] = int32_t(C + j);
    // Each sequence's blocks one after the other, or (--interleaved) block
    // j of every sequence next to each other, as a pool hands out blocks to
    // sequences that grow in lockstep.
    for (int64_t w = 0; w < W; ++w)
      table[size_t(r * W + w)] = int32_t(interleaved ? w * sequences + b : b * W + w);
    slots[size_t(r)] = int32_t(table[size_t(r * W + (C - 1 + j) / bs)] * bs + (C - 1 + j) % bs);
  }
  cu[size_t(B)] = int32_t(B);
  Arena meta(size_t(16) << 20, Device::cuda, "metadata");
  // What the engine stages for such a step: tokens, positions, slots,
  // cu_seqlens, last rows, context lengths, the table, the rows' streams
  // and counters.
  const int64_t meta_bytes = (6 * B + 1 + B * W) * 4 + 16 * B;
  model::CachedBatch batch;
  batch.tokens = upload_i32(base, meta, tokens, B);
  batch.positions = upload_i32(base, meta, positions, B);
  batch.cu_seqlens_q = upload_i32(base, meta, cu, B + 1);
  batch.last_rows = upload_i32(base, meta, last, B);
  batch.slot_mapping = upload_i32(base, meta, slots, B);
  batch.block_table = upload_i32(base, meta, table, B, W);
  batch.context_lens = upload_i32(base, meta, lens, B);
  batch.max_context_len = Cb;
  std::vector<int64_t> streams(nb);
  for (int64_t b = 0; b < B; ++b) streams[size_t(b)] = b;
  std::vector<int64_t> counters(nb, 0);
  Tensor rng_streams = meta.alloc(DType::i64, {B}), rng_counters = meta.alloc(DType::i64, {B});
  ops::copy(base, rng_streams, tensor_i64(streams.data(), {B}));
  ops::copy(base, rng_counters, tensor_i64(counters.data(), {B}));
  Tensor sampled = meta.alloc(DType::i32, {B}), logprobs = meta.alloc(DType::f32, {B});
  Arena logits_arena(size_t(B * c.vocab_size) * 4 + 4096, Device::cuda, "logits");
  const Tensor logits = logits_arena.alloc(DType::f32, {B, c.vocab_size});

  Arena act(model.cached_activation_bytes(B, B), Device::cuda, "activations");
  Arena scratch(std::max({model.scratch_bytes(B, C, B, 1), ops::sample_tokens_gpu_scratch_bytes(B),
                           ops::lm_head_sample_scratch_bytes(B, c.vocab_size)}),
                Device::cuda, "scratch");
  ops::Ctx ctx = gpu.ctx(&scratch);
  ops::SamplingParams sp;
  sp.seed = 1;
  const bool fused_head = !unfused && model.cached_sample_preferred(ctx, sp);
  const auto step = [&](const ops::Ctx& x) {
    if (fused_head) {
      model.forward_cached_sample(x, act, cache, batch, {sampled, logprobs, Tensor{}, rng_streams, rng_counters, sp});
      return;
    }
    model.forward_cached(x, act, cache, batch, logits);
    ops::sample_tokens(x, sampled, logprobs, logits, Tensor{}, rng_streams, rng_counters, sp);
    if (exact) model.score_sampled(x, act, logits, Tensor{}, sampled, 1.0f, logprobs);
  };
  step(ctx);  // warm-up: GEMM plans, kernel attributes
  ops::stream_synchronize(ctx);

  // Milliseconds per call of `one` (3 calls of warm-up, then reps calls
  // back to back, the stream drained before and after).
  auto ms_per_call = [&](const std::function<void()>& one) {
    for (int i = 0; i < 3; ++i) one();
    ops::stream_synchronize(ctx);
    const auto t = Clock::now();
    for (int64_t i = 0; i < reps; ++i) one();
    ops::stream_synchronize(ctx);
    return 1e3 * seconds_since(t) / double(reps);
  };

  // The step as a graph, replayed back to back.
  const ops::CapturedGraph graph = ops::CapturedGraph::capture(ctx, [&] { step(ctx); });
  const double graph_ms = ms_per_call([&] { graph.launch(ctx); });

  // The step boundary as the engine has it: between replays the step's
  // metadata upload (H2D from pinned memory, the size of the staged
  // metadata), the fed tokens (D2D, samples to input tokens) and the
  // samples' read-back (D2H to pinned memory); each alone, then all three.
  Arena pinned(2 * (size_t(meta_bytes) + 4096), Arena::Pinned{}, "boundary-host");
  const Tensor meta_host(pinned.alloc_bytes(size_t(meta_bytes)), DType::i32, {meta_bytes / 4});
  const Tensor back_host(pinned.alloc_bytes(size_t(B) * 4), DType::i32, {B});
  const Tensor meta_dev = meta.alloc(DType::i32, {meta_bytes / 4});
  auto boundary_ms = [&](bool h2d, bool d2d, bool d2h) {
    return ms_per_call([&] {
      if (h2d) ops::copy(ctx, meta_dev, meta_host);
      if (d2d) ops::copy(ctx, batch.tokens, sampled);
      graph.launch(ctx);
      if (d2h) ops::copy(ctx, back_host, sampled);
    });
  };
  const double h2d_ms = boundary_ms(true, false, false), d2d_ms = boundary_ms(false, true, false);
  const double d2h_ms = boundary_ms(false, false, true), all_ms = boundary_ms(true, true, true);

  // The same three inside the graph, as the engine's decode graphs have
  // them (ops/step_io.h): step_in from one of two pinned blocks (with the B
  // fed tokens), the step, step_out of the samples, re-targeted at the
  // other blocks before every replay.
  Arena pinned_io(2 * (size_t(meta_bytes) + size_t(B) * 4 + 8192), Arena::Pinned{}, "io-host");
  Tensor io_host[2], io_back[2];
  for (int i = 0; i < 2; ++i) {
    io_host[i] = Tensor(pinned_io.alloc_bytes(size_t(meta_bytes)), DType::i32, {meta_bytes / 4});
    io_back[i] = Tensor(pinned_io.alloc_bytes(size_t(B) * 4), DType::i32, {B});
  }
  const Tensor io_tokens(meta_dev.data, DType::i32, {B}, Device::cuda);
  auto io_in = [&](int i) { return ops::StepIn{io_host[i], meta_dev, io_tokens, sampled, B, meta_bytes / 4}; };
  auto io_out = [&](int i) { return ops::StepOut{io_back[i], sampled, B}; };
  ops::CapturedGraph io_graph = ops::CapturedGraph::capture(ctx, [&] {
    ops::step_in(ctx, io_in(0));
    step(ctx);
    ops::step_out(ctx, io_out(0));
  });
  int io_slot = 0;
  const double io_ms = ms_per_call([&] {
    ops::set_step_in(io_graph, io_in(io_slot));
    ops::set_step_out(io_graph, io_out(io_slot));
    io_graph.launch(ctx);
    io_slot = 1 - io_slot;
  });

  // Op by op, the host held back.
  ops::OpProfiler profiler;
  ops::Ctx pctx = ctx;
  pctx.profiler = &profiler;
  for (int64_t i = 0; i < reps; ++i) {
    profiler.hold(pctx, 20.0);
    step(pctx);
  }
  const auto entries = profiler.summary();

  // The graph again, kernel by kernel: CUPTI is on before it is captured.
  bench::KernelTimeline timeline;
  double traced_ms = 0;
  if (bench::KernelTrace::available()) {
    bench::KernelTrace trace(false, by_grid);
    const ops::CapturedGraph traced = ops::CapturedGraph::capture(ctx, [&] { step(ctx); });
    for (int i = 0; i < 3; ++i) traced.launch(ctx);
    ops::stream_synchronize(ctx);
    const uint64_t from = bench::KernelTrace::now_ns();
    const auto t1 = Clock::now();
    for (int64_t i = 0; i < reps; ++i) traced.launch(ctx);
    ops::stream_synchronize(ctx);
    traced_ms = 1e3 * seconds_since(t1) / double(reps);
    timeline = trace.collect(from, bench::KernelTrace::now_ns());
  }
  gpu.check_flags("decode step");

  const double kv_bytes = double(sequences) * double(C + drafts) * bench::kv_bytes_per_position(c);
  const double weight_bytes = bench::decode_weight_bytes(c);
  const double bw = bench::spec_bandwidth(gpu.name());
  const double roof_ms = bw > 0 ? 1e3 * (weight_bytes + kv_bytes) / bw : 0;
  double ops_ms = 0;
  for (const auto& e : entries) ops_ms += e.ms / double(reps);
  std::printf("{\"bench\": \"decode_step_gpu\", \"model\": \"%s\", \"gpu\": \"%s\", \"batch\": %lld, "
              "\"sequences\": %lld, \"drafts\": %lld, \"context\": %lld, \"bucket\": %lld, \"blocks\": \"%s\", \"exact\": %s, \"fused_head\": %s, "
              "\"graph_step_ms\": %.3f, \"tok_s\": %.0f, \"weight_mb\": %.1f, \"kv_mb\": %.1f, "
              "\"roofline_step_ms_spec_bw\": %.3f, \"fraction_of_roofline\": %.3f, \"step_with_h2d_ms\": %.3f, "
              "\"step_with_d2d_ms\": %.3f, \"step_with_d2h_ms\": %.3f, \"step_with_copies_ms\": %.3f, "
              "\"step_with_io_in_graph_ms\": %.3f, \"ops_sum_ms\": %.3f, \"ops\": [",
              size.c_str(), gpu.name().c_str(), (long long)B, (long long)sequences, (long long)drafts, (long long)C,
              (long long)Cb,
              interleaved ? "interleaved" : "contiguous", exact ? "true" : "false", fused_head ? "true" : "false",
              graph_ms, double(B) / graph_ms * 1e3,
              weight_bytes / 1e6, kv_bytes / 1e6, roof_ms, roof_ms > 0 ? roof_ms / graph_ms : 0.0, h2d_ms, d2d_ms,
              d2h_ms, all_ms, io_ms, ops_ms);
  for (size_t i = 0; i < entries.size(); ++i)
    std::printf("%s{\"op\": \"%s\", \"calls_per_step\": %lld, \"us_per_step\": %.1f, \"share\": %.3f}",
                i ? ", " : "", entries[i].op.c_str(), (long long)(entries[i].calls / reps),
                1e3 * entries[i].ms / double(reps), entries[i].ms / double(reps) / ops_ms);
  std::printf("]");
  if (!timeline.kernels.empty()) {
    const auto& ks = timeline.kernels;
    const double per = 1e3 * double(reps);  // ns over all reps -> us per step
    std::printf(", \"traced_step_ms\": %.3f, \"traced_span_us\": %.1f, \"idle_us\": %.1f, \"graph_kernels\": [",
                traced_ms, timeline.span_ns / per, timeline.idle_ns / per);
    for (size_t i = 0; i < ks.size(); ++i)
      std::printf(
          "%s{\"kernel\": \"%s\", \"calls_per_step\": %.2f, \"exclusive_us\": %.1f, \"us_per_step\": %.1f, "
          "\"idle_before_us\": %.1f}",
          i ? ", " : "", ks[i].name.c_str(), double(ks[i].calls) / double(reps), ks[i].exclusive_ns / per,
          ks[i].total_ns / per, ks[i].idle_before_ns / per);
    std::printf("]");
  }
  std::printf("}\n");
  return 0;
}
