// The generation engine on one GPU with random Qwen2.5-shaped weights.
// Two loads, each one JSON line (plus an op-by-op line with --profile):
//  - fixed (default): `batch` prompts of `prompt` random ids, one response
//    each of exactly `new` tokens (no EOS), sampling at T = 1: the shape of
//    bench/peers/peer_generate.py, which the same device command runs.
//    Reported against the HBM roofline: each decode step reads the rank's
//    bf16 weights once (the LM head included, the embedding table not) and
//    the KV cache of every running sequence; roofline tokens/s = tokens /
//    (sum over the steps of those bytes / bandwidth), at the card's
//    specified bandwidth and at the device-to-device copy bandwidth
//    measured here. decode_enqueue_ms: of a decode step, the host's
//    padding, staging and launch calls before it waits for the tokens.
//  - --dapo: `prompts` prompts (random lengths 64..512) x n samples at
//    T = 1, ended by an EOS drawn from a set of ids sized so that the
//    near-uniform random model answers in ~mean-len tokens on average
//    (geometric lengths, capped at max-len): a long-tailed load that
//    drains. Reports tokens/s, the split of the time into host work,
//    prefill steps and decode steps, the sampling share (with --profile),
//    and tokens/s and the share of the run's time by how many sequences
//    were running (buckets of powers of two: 8 means 8 to 15), against the
//    roofline (each step reads the weights once and the KV positions its
//    attention reads, at the card's specified bandwidth): for the whole
//    run and per bucket. --max-seqs: EngineOptions::max_num_seqs (default
//    0: as many as the KV pool holds).
// With --trace, the load runs once more under CUPTI (bench/kernel_trace.h):
// the GPU's idle time over the run (no kernel or copy on it: the host's
// share of the critical path), which kernels and copies it came before, and
// the run's kernels by their exclusive time (bench/kernel_trace.h).
// --no-launch-ahead: EngineOptions::launch_ahead off (on by default on GPUs; steps_ahead counts its steps).
// --unfused-head: EngineOptions::fused_head off (the LM head's logits, then the sampler; "fused_head" in the JSON).
// --max-tokens: EngineOptions::max_batch_tokens (fixed load: batch x prompt, DAPO load: 8192).
// --spec K / --spec-max-running R: EngineOptions::spec_tokens (default -1:
// the engine's) and spec_max_running; the DAPO load reports the drafts run
// and accepted. --temperature T (default 1; 0: greedy). --init-scale S:
// weights S times the HF-like scale. The HF-like random model's answers do
// not repeat (near-uniform logits: n-gram drafts find nothing); larger
// weights and lower temperatures peak the logits until answers repeat, a
// stand-in for the repetitive traces of a trained reasoning model (whose
// weights the GPU machine does not have) where drafts are taken.
// Usage: bench_generate_gpu 0.5b [--batch 128 --prompt 256 --new 512] [--trace] [--no-launch-ahead]
//        bench_generate_gpu 1.5b --dapo [--prompts 64 --n 16 --mean-len 800 --max-len 8192] [--max-seqs 0] [--profile]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/core/log.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/op_profiler.h"
#include "kernel_trace.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"
#include "dapo/rollout/engine.h"
#include "qwen25_shapes.h"

using namespace dapo;

namespace {

// Device-to-device copy bandwidth (bytes read + written per second).
double measured_copy_bandwidth(const ops::Ctx& ctx) {
  const size_t bytes = size_t(1) << 30;
  Arena a(2 * bytes + 1024, Device::cuda, "bandwidth");
  const Tensor src = a.alloc(DType::i32, {int64_t(bytes / 4)}), dst = a.alloc(DType::i32, {int64_t(bytes / 4)});
  ops::copy(ctx, dst, src);
  ops::stream_synchronize(ctx);
  const int reps = 10;
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) ops::copy(ctx, dst, src);
  ops::stream_synchronize(ctx);
  return 2.0 * double(bytes) * reps / seconds_since(t0);
}

void print_profile(const char* bench, const std::string& size, ops::OpProfiler& profiler, double wall_ms,
                   int64_t steps) {
  const auto entries = profiler.summary();
  double total = 0;
  for (const auto& e : entries) total += e.ms;
  std::printf("{\"bench\": \"%s_ops\", \"model\": \"%s\", \"wall_ms\": %.1f, \"gpu_ops_ms\": %.1f, \"steps\": %lld, "
              "\"ops\": [",
              bench, size.c_str(), wall_ms, total, (long long)steps);
  for (size_t i = 0; i < entries.size(); ++i)
    std::printf("%s{\"op\": \"%s\", \"calls\": %lld, \"ms\": %.2f, \"us_per_step\": %.1f, \"share_of_wall\": %.3f}",
                i ? ", " : "", entries[i].op.c_str(), (long long)entries[i].calls, entries[i].ms,
                1e3 * entries[i].ms / double(std::max<int64_t>(steps, 1)), entries[i].ms / wall_ms);
  std::printf("]}\n");
  std::fflush(stdout);
}

std::vector<rollout::PromptInput> random_prompts(int64_t count, int64_t min_len, int64_t max_len, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, 150000);
  std::uniform_int_distribution<int64_t> len(min_len, max_len);
  std::vector<rollout::PromptInput> out;
  for (int64_t p = 0; p < count; ++p) {
    rollout::PromptInput in;
    in.uid = uint64_t(7000 + p);
    const int64_t n = len(gen);
    for (int64_t t = 0; t < n; ++t) in.ids.push_back(id(gen));
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  std::string size = "0.5b";
  int64_t batch = 128, prompt = 256, new_tokens = 512;
  int64_t prompts = 64, n = 16, mean_len = 800, max_len = 8192, max_seqs = 0, max_tokens = 0;
  int64_t spec_tokens = -1, spec_max_running = 8;
  double temperature = 1.0, init_scale = 1.0;
  bool dapo_load = false, profile = false, trace = false, launch_ahead = true, fused_head = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::stoll(argv[++i]) : 0LL; };
    if (a == "--batch") batch = next();
    else if (a == "--prompt") prompt = next();
    else if (a == "--new") new_tokens = next();
    else if (a == "--prompts") prompts = next();
    else if (a == "--n") n = next();
    else if (a == "--mean-len") mean_len = next();
    else if (a == "--max-len") max_len = next();
    else if (a == "--max-seqs") max_seqs = next();
    else if (a == "--max-tokens") max_tokens = next();
    else if (a == "--dapo") dapo_load = true;
    else if (a == "--spec") spec_tokens = next();
    else if (a == "--spec-max-running") spec_max_running = next();
    else if (a == "--temperature") temperature = i + 1 < argc ? std::stod(argv[++i]) : 1.0;
    else if (a == "--init-scale") init_scale = i + 1 < argc ? std::stod(argv[++i]) : 1.0;
    else if (a == "--profile") profile = true;
    else if (a == "--trace") trace = true;
    else if (a == "--no-launch-ahead") launch_ahead = false;
    else if (a == "--unfused-head") fused_head = false;
    else size = a;
  }
  if (ops::cuda_device_count() == 0) {
    std::printf("{\"bench\": \"generate_gpu\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  configure_logging({runtime.world_rank(), false, LogLevel::warn});
  const model::Qwen2Config c = bench::qwen25(size, "bench_generate_gpu");
  const parallel::Comm tp = parallel::Comm::world().split(runtime.world_rank(), 0);
  ops::CudaDevice gpu(0);
  Arena no_scratch(0, Device::cuda, "unused");
  const ops::Ctx ctx = gpu.ctx(&no_scratch);
  model::ParamStore params(c, 0, 1, Device::cuda, ctx.stream);
  model::RandomInit init = bench::hf_like_init();
  init.weight_scale *= float(init_scale);
  params.init_random(init);
  const model::Qwen2Model model(params, tp);
  const double bw_copy = measured_copy_bandwidth(ctx), bw_spec = bench::spec_bandwidth(gpu.name());

  rollout::EngineOptions o;
  o.check_tp_agreement = false;
  // Positions a step may prefill. The fixed load's default: every prompt in
  // one step, as the peer's generate() prefills them (H100, 0.5B: 0.733 s
  // in 4 steps of 8,192, 0.720 s in one of 32,768); the DAPO load's: 8,192.
  if (max_tokens <= 0) max_tokens = dapo_load ? 8192 : batch * prompt;
  o.max_batch_tokens = max_tokens;
  o.launch_ahead = launch_ahead;
  o.fused_head = fused_head;
  o.spec_tokens = spec_tokens;
  o.spec_max_running = spec_max_running;
  rollout::SamplingOptions s;
  s.temperature = temperature;
  s.seed = 1;
  std::vector<rollout::PromptInput> in;
  if (!dapo_load) {
    o.max_num_seqs = batch;
    s.n = 1;
    s.max_response_length = new_tokens;
    in = random_prompts(batch, prompt, prompt, 1);
  } else {
    o.max_num_seqs = max_seqs;
    s.n = n;
    s.max_response_length = max_len;
    // Every (V / mean_len)-th id ends a response.
    for (int64_t id = 3; id < c.vocab_size; id += std::max<int64_t>(1, mean_len)) s.eos_ids.push_back(int32_t(id));
    in = random_prompts(prompts, 64, 512, 2);
  }
  rollout::GenerationEngine engine(model, tp, ctx, o);
  {
    // Warm-up on other prompts of the same shapes: the GEMM plans of the
    // prefill sizes, the first launch of every kernel (lazy module loading)
    // and the pools' growth are paid once a job, not on each generate() of a
    // training run. The decode graphs are captured again in every
    // generate(), so the timed run pays for them (graph_capture_s).
    rollout::SamplingOptions w = s;
    w.max_response_length = 8;
    const std::vector<rollout::PromptInput> warm =
        dapo_load ? random_prompts(prompts, 64, 512, 12) : random_prompts(batch, prompt, prompt, 11);
    engine.generate(warm, w);
  }
  // Throughput as the batch drains: tokens per second of the steps run
  // with a given number of sequences (in buckets of powers of two).
  // And the bytes those steps had to read: the weights once a step, the
  // KV positions their attention read (for a roofline per bucket).
  struct Bucket {
    int64_t tokens = 0, steps = 0, kv_positions = 0;
    double seconds = 0;
  };
  std::map<int64_t, Bucket> by_running;
  int64_t last_tokens = 0, last_step = 0, last_kv = 0;
  double last_s = 0;
  const rollout::ProgressCallback progress = [&](const rollout::GenerationProgress& p) {
    int64_t bucket = 1;
    while (bucket * 2 <= std::max<int64_t>(p.running, 1)) bucket *= 2;
    Bucket& b = by_running[bucket];
    b.tokens += p.generated_tokens - last_tokens;
    b.seconds += p.elapsed_s - last_s;
    b.steps += p.step - last_step;
    b.kv_positions += p.kv_positions_read - last_kv;
    last_tokens = p.generated_tokens;
    last_s = p.elapsed_s;
    last_step = p.step;
    last_kv = p.kv_positions_read;
  };
  const size_t used_before = gpu.memory_used();
  const rollout::RolloutBatch out = engine.generate(in, s, dapo_load ? progress : rollout::ProgressCallback{});
  const rollout::GenerationStats st = engine.stats();
  gpu.check_flags("generation");
  const int64_t tokens = out.total_response_tokens();
  const double gib = double(size_t(1) << 30);

  const double kv_per_position = bench::kv_bytes_per_position(c), weight_bytes = bench::decode_weight_bytes(c);

  if (!dapo_load) {
    double bytes = 0;  // every decode step: weights + the whole KV of every sequence
    for (int64_t t = 0; t < new_tokens; ++t) bytes += weight_bytes + double(batch) * double(prompt + t) * kv_per_position;
    const double roof_spec = bw_spec > 0 ? double(tokens) / (bytes / bw_spec) : 0;
    const double roof_copy = double(tokens) / (bytes / bw_copy);
    const double tok_s = double(tokens) / st.seconds;
    std::printf(
        "{\"bench\": \"generate_gpu\", \"load\": \"fixed\", \"model\": \"%s\", \"gpu\": \"%s\", \"batch\": %lld, "
        "\"prompt\": %lld, \"new\": %lld, \"tokens\": %lld, \"s\": %.3f, \"tok_s\": %.0f, "
        "\"roofline_tok_s_spec_bw\": %.0f, \"fraction_of_roofline_spec\": %.3f, \"copy_bw_gbs\": %.0f, "
        "\"roofline_tok_s_copy_bw\": %.0f, \"fraction_of_roofline_copy\": %.3f, \"steps\": %lld, "
        "\"max_batch_tokens\": %lld, \"decode_step_ms\": %.3f, \"decode_enqueue_ms\": %.3f, \"prefill_s\": %.3f, \"decode_s\": %.3f, "
        "\"host_s\": %.3f, "
        "\"decode_graphs\": %lld, \"padded_graph_steps\": %lld, \"graphs_captured_ahead\": %lld, "
        "\"graph_capture_s\": %.3f, \"steps_ahead\": %lld, \"fused_head\": %s, \"kv_cache_gib\": %.2f, \"device_used_gib\": %.2f, "
        "\"temperature\": %.2f, \"init_scale\": %.2f, \"spec_tokens\": %lld, \"spec_steps\": %lld, \"drafted_tokens\": %lld, "
        "\"accepted_tokens\": %lld}\n",
        size.c_str(), gpu.name().c_str(), (long long)batch, (long long)prompt, (long long)new_tokens,
        (long long)tokens, st.seconds, tok_s, roof_spec, roof_spec > 0 ? tok_s / roof_spec : 0.0, bw_copy / 1e9,
        roof_copy, tok_s / roof_copy, (long long)st.scheduler.steps, (long long)max_tokens,
        1e3 * st.decode_step_seconds / double(std::max<int64_t>(st.decode_steps, 1)),
        1e3 * (st.decode_step_seconds - st.decode_wait_seconds) / double(std::max<int64_t>(st.decode_steps, 1)),
        st.prefill_step_seconds,
        st.decode_step_seconds, st.host_seconds, (long long)st.decode_graphs, (long long)st.padded_graph_steps,
        (long long)st.graphs_captured_ahead, st.graph_capture_seconds, (long long)st.steps_ahead,
        st.fused_head ? "true" : "false", double(st.kv_cache_bytes) / gib,
        double(used_before) / gib, temperature, init_scale, (long long)rollout::engine_spec_tokens(o, true),
        (long long)st.scheduler.spec_steps, (long long)st.scheduler.drafted_tokens,
        (long long)st.scheduler.accepted_tokens);
  } else {
    std::vector<int64_t> lengths;
    for (int64_t r = 0; r < out.num_responses(); ++r) lengths.push_back(out.response_length(r));
    std::sort(lengths.begin(), lengths.end());
    auto pct = [&](double q) { return lengths[std::min(lengths.size() - 1, size_t(q * double(lengths.size())))]; };
    // The run's roofline: every step reads the weights once and the KV
    // positions its attention reads, at the card's bandwidth (prefill
    // compute and sampling not counted: a floor no schedule of these
    // lengths beats without reading less).
    auto roofline_s = [&](double steps, double kv_positions) {
      return bw_spec > 0 ? (steps * weight_bytes + kv_positions * kv_per_position) / bw_spec : 0.0;
    };
    const double roof_s = roofline_s(double(st.scheduler.steps), double(st.scheduler.kv_positions_read));
    std::printf(
        "{\"bench\": \"generate_gpu\", \"load\": \"dapo\", \"model\": \"%s\", \"gpu\": \"%s\", \"prompts\": %lld, "
        "\"n\": %lld, \"max_num_seqs\": %lld, \"peak_running\": %lld, \"roofline_s_spec_bw\": %.3f, "
        "\"fraction_of_roofline\": %.3f, \"kv_read_gb\": %.1f, \"tokens\": %lld, \"length_mean\": %.0f, \"length_p50\": %lld, "
        "\"length_p90\": %lld, \"length_max\": %lld, \"s\": %.3f, \"tok_s\": %.0f, \"share_prefill_steps\": %.3f, "
        "\"share_decode_steps\": %.3f, \"share_host\": %.3f, \"steps\": %lld, \"preemptions\": %lld, "
        "\"decode_graphs\": %lld, \"padded_graph_steps\": %lld, \"graphs_captured_ahead\": %lld, "
        "\"graph_capture_s\": %.3f, \"steps_ahead\": %lld, \"fused_head\": %s, \"kv_cache_gib\": %.2f, "
        "\"temperature\": %.2f, \"init_scale\": %.2f, \"spec_tokens\": %lld, \"spec_steps\": %lld, \"drafted_tokens\": %lld, "
        "\"accepted_tokens\": %lld, \"tok_s_by_running\": {",
        size.c_str(), gpu.name().c_str(), (long long)prompts, (long long)n, (long long)max_seqs,
        (long long)st.scheduler.peak_running, roof_s, roof_s / st.seconds,
        double(st.scheduler.kv_positions_read) * kv_per_position / 1e9, (long long)tokens,
        double(tokens) / double(out.num_responses()), (long long)pct(0.5), (long long)pct(0.9),
        (long long)lengths.back(), st.seconds, double(tokens) / st.seconds, st.prefill_step_seconds / st.seconds,
        st.decode_step_seconds / st.seconds, st.host_seconds / st.seconds, (long long)st.scheduler.steps,
        (long long)st.scheduler.preemptions, (long long)st.decode_graphs, (long long)st.padded_graph_steps,
        (long long)st.graphs_captured_ahead, st.graph_capture_seconds, (long long)st.steps_ahead,
        st.fused_head ? "true" : "false", double(st.kv_cache_bytes) / gib, temperature, init_scale,
        (long long)rollout::engine_spec_tokens(o, true), (long long)st.scheduler.spec_steps,
        (long long)st.scheduler.drafted_tokens, (long long)st.scheduler.accepted_tokens);
    // One JSON object over the running-count buckets, largest first.
    auto print_by_running = [&](const char* fmt, auto value) {
      bool first = true;
      for (auto it = by_running.rbegin(); it != by_running.rend(); ++it) {
        std::printf("%s\"%lld\": ", first ? "" : ", ", (long long)it->first);
        std::printf(fmt, value(it->second));
        first = false;
      }
    };
    print_by_running("%.0f", [](const Bucket& b) { return b.seconds > 0 ? double(b.tokens) / b.seconds : 0.0; });
    // Where the time goes as the batch drains: the share of the run spent
    // with each number of sequences running.
    std::printf("}, \"share_s_by_running\": {");
    print_by_running("%.3f", [&](const Bucket& b) { return st.seconds > 0 ? b.seconds / st.seconds : 0.0; });
    // How close each bucket's steps came to reading their bytes at the
    // card's bandwidth.
    std::printf("}, \"fraction_of_roofline_by_running\": {");
    print_by_running("%.3f", [&](const Bucket& b) {
      return b.seconds > 0 ? roofline_s(double(b.steps), double(b.kv_positions)) / b.seconds : 0.0;
    });
    std::printf("}}\n");
  }
  std::fflush(stdout);

  if (trace && bench::KernelTrace::available()) {
    // Again under CUPTI: where the GPU waits for the host.
    bench::KernelTrace tracer(true);
    const uint64_t from = bench::KernelTrace::now_ns();
    engine.generate(in, s);
    ops::stream_synchronize(ctx);
    const bench::KernelTimeline t = tracer.collect(from, bench::KernelTrace::now_ns());
    const int64_t steps = std::max<int64_t>(engine.stats().scheduler.steps, 1);
    std::vector<bench::TracedKernel> ks = t.kernels;
    std::sort(ks.begin(), ks.end(), [](const auto& a, const auto& b) { return a.idle_before_ns > b.idle_before_ns; });
    std::printf("{\"bench\": \"generate_gpu_trace\", \"model\": \"%s\", \"steps\": %lld, \"span_s\": %.4f, "
                "\"idle_s\": %.4f, \"idle_us_per_step\": %.1f, \"idle_before\": [",
                size.c_str(), (long long)steps, t.span_ns / 1e9, t.idle_ns / 1e9, t.idle_ns / 1e3 / double(steps));
    for (size_t i = 0; i < ks.size() && i < 8; ++i)
      std::printf("%s{\"kernel\": \"%s\", \"calls\": %lld, \"idle_us_per_call\": %.2f, \"exclusive_us_per_call\": %.2f}",
                  i ? ", " : "", ks[i].name.c_str(), (long long)ks[i].calls,
                  ks[i].idle_before_ns / 1e3 / double(ks[i].calls), ks[i].exclusive_ns / 1e3 / double(ks[i].calls));
    // And what the GPU spends the run on, kernel by kernel (most first).
    std::printf("], \"kernels\": [");
    for (size_t i = 0; i < t.kernels.size() && i < 24; ++i)
      std::printf("%s{\"kernel\": \"%s\", \"calls\": %lld, \"exclusive_ms\": %.3f}", i ? ", " : "",
                  t.kernels[i].name.c_str(), (long long)t.kernels[i].calls, t.kernels[i].exclusive_ns / 1e6);
    std::printf("]}\n");
    std::fflush(stdout);
  }

  if (profile) {
    // Again with the per-op profiler: the same load, every op bracketed.
    ops::OpProfiler profiler;
    ops::Ctx pctx = ctx;
    pctx.profiler = &profiler;
    rollout::GenerationEngine profiled(model, tp, pctx, o);
    rollout::SamplingOptions ps = s;
    if (dapo_load) ps.max_response_length = std::min<int64_t>(max_len, 1024);  // a bounded profile
    const auto t0 = Clock::now();
    profiled.generate(in, ps);
    const double wall_ms = seconds_since(t0) * 1e3;
    print_profile("generate_gpu", size, profiler, wall_ms, profiled.stats().scheduler.steps);
  }
  return 0;
}
