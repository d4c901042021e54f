// The generation engine split over GPUs by tensor parallelism (mpirun -np 2
// or 4, one GPU per rank; skipped without them, as in CI): the tp ranks of
// a group return the same responses bit for bit, every sampled token's
// log-prob is the one a single fp32 model (the CPU model of the same
// weights, tp = 1) gives that token at T, and greedy answers are top-1
// tokens of that model up to bf16 noise - what "tp = 2 equals tp = 1" can
// mean for bf16 logits, whose last bits differ with the split.
// Named Nccl* so that the GPU ctest entries pick these up.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "dapo/core/error.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/grid.h"
#include "dapo/rollout/engine.h"
#include "model/model_test_util.h"

namespace dapo::parallel {
namespace {

model::Qwen2Config config() { return test::mid_config(2, 2048); }

model::RandomInit init() {
  model::RandomInit r;
  r.seed = 31;
  r.weight_scale = 0.08f;
  return r;
}

std::vector<rollout::PromptInput> prompts() {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> id(0, 999);
  std::vector<rollout::PromptInput> out;
  for (int len : {7, 16, 33, 2}) {
    rollout::PromptInput p;
    p.uid = 0x700 + uint64_t(len);
    for (int t = 0; t < len; ++t) p.ids.push_back(id(gen));
    out.push_back(p);
  }
  return out;
}

// The fp32 model's log-softmax at T of every response token, and the gap
// between the row's largest logit and the token's (teacher-forced).
struct Reference {
  std::vector<std::vector<float>> logprob, gap;
};
Reference reference(const model::Qwen2Model& m, const rollout::RolloutBatch& b, double temperature) {
  const int64_t V = m.config().vocab_size;
  Reference out;
  for (int64_t r = 0; r < b.num_responses(); ++r) {
    const auto prompt = b.prompt(b.response_prompt[size_t(r)]);
    const auto resp = b.response(r);
    std::vector<int32_t> toks(prompt.begin(), prompt.end());
    toks.insert(toks.end(), resp.begin(), resp.end());
    const std::vector<float> logits = test::host_logits(m, toks);
    std::vector<float> lp, gap;
    for (size_t i = 0; i < resp.size(); ++i) {
      const float* row = logits.data() + (prompt.size() - 1 + i) * size_t(V);
      const double t = temperature > 0 ? temperature : 1.0;
      double mx = -1e30, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]) / t);
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) / t - mx);
      lp.push_back(float(double(row[resp[i]]) / t - mx - std::log(sum)));
      gap.push_back(*std::max_element(row, row + V) - row[resp[i]]);
    }
    out.logprob.push_back(lp);
    out.gap.push_back(gap);
  }
  return out;
}

TEST(NcclEngine, TensorParallelGenerationMatchesOneFp32Model) {
  const Comm world = Comm::world();
  const int gpus = ops::cuda_device_count();
  if (world.all_reduce_i64(gpus >= world.size() ? 0 : 1, ReduceOp::max))
    GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
  const ops::CudaDevice gpu(world.rank());
  // The CPU reference runs on every rank at once: a few threads each, not
  // every core per rank (spinning OpenMP teams oversubscribe the node).
  omp_set_num_threads(4);
  const model::Qwen2Config c = config();
  // The CPU reference: the same weights, rounded to bf16 as the GPU's are.
  model::ParamStore ref_store(c, 0, 1);
  ref_store.init_random(init());
  for (const model::ParamEntry& e : ref_store.entries()) {
    float* p = e.param.ptr<float>();
    for (int64_t i = 0; i < e.param.numel(); ++i) p[i] = to_f32(to_bf16(p[i]));
  }
  const Comm self = world.split(world.rank(), 0);
  const model::Qwen2Model ref(ref_store, self);
  for (const int tp : {world.size(), 2}) {
    if (tp > world.size() || world.size() % tp != 0 || tp < 2) continue;
    SCOPED_TRACE(cat("tp ", tp));
    const Grid grid = make_grid(world, tp);
    model::ParamStore store(c, grid.tp_rank, grid.tp_size, Device::cuda, gpu.ctx(nullptr).stream);
    store.init_random(init());
    const model::Qwen2Model m(store, grid.tp);
    Arena none(0, Device::cuda, "unused");
    rollout::EngineOptions o;
    o.check_tp_agreement = true;
    rollout::GenerationEngine engine(m, grid.tp, gpu.ctx(&none), o);
    for (const double temperature : {0.0, 0.8}) {
      SCOPED_TRACE(cat("temperature ", temperature));
      rollout::SamplingOptions s;
      s.n = 3;
      s.temperature = temperature;
      s.max_response_length = 24;
      s.seed = 17;
      const rollout::RolloutBatch b = engine.generate(prompts(), s);
      gpu.check_flags("generation");
      // Every tp rank holds the same batch, bit for bit.
      const std::vector<std::byte> bytes = b.to_bytes();
      int64_t h = 1469598103;
      for (const std::byte x : bytes) h = (h * 1099511628211LL) ^ int64_t(x);
      const std::vector<int64_t> all = grid.tp.all_gather_i64(h);
      EXPECT_TRUE(std::all_of(all.begin(), all.end(), [&](int64_t v) { return v == all[0]; }));
      ASSERT_EQ(b.num_responses(), 12);
      const Reference want = reference(ref, b, temperature);
      for (int64_t r = 0; r < b.num_responses(); ++r) {
        ASSERT_EQ(b.response_length(r), 24);
        for (size_t i = 0; i < want.logprob[size_t(r)].size(); ++i) {
          const float got = b.logprobs(r)[i], w = want.logprob[size_t(r)][i];
          EXPECT_NEAR(got, w, 0.05 + 0.02 * std::fabs(w)) << "response " << r << " token " << i;
          // Greedy: a top-1 token of the fp32 model, up to bf16 noise.
          if (temperature == 0) EXPECT_LT(want.gap[size_t(r)][i], 0.05f) << "response " << r << " token " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dapo::parallel
