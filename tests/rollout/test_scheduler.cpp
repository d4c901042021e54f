// The scheduler without a model: a made-up "model" whose next token is a
// hash of (prompt, sample, position) drives it, and a simulated cache (the
// token written in every slot) checks after every step that each scheduled
// sequence sees exactly its own tokens at all its positions - so sharing,
// copy-on-write, preemption and chunked prefill are checked for what they
// must preserve. Responses must not depend on the limits or the pool.
#include "dapo/rollout/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"

namespace dapo::rollout {
namespace {

constexpr int32_t kVocab = 40, kEos = 0;

// The made-up model: token `position` of response `sample` of prompt `prompt`.
// About 1 in 12 tokens is the EOS.
int32_t next_token(int64_t prompt, int64_t sample, int64_t position) {
  const uint64_t h = stream_id({uint64_t(prompt), uint64_t(sample), uint64_t(position)});
  return h % 12 == 0 ? kEos : int32_t(1 + h % (kVocab - 1));
}

// A model that repeats itself (what n-gram drafts are for): a cycle of 5
// tokens per prompt, with a detour now and then, ending at a length that
// depends on the sample.
int32_t cyclic_token(int64_t prompt, int64_t sample, int64_t position) {
  if (position == 12 + 7 * sample + 3 * prompt) return kEos;
  const uint64_t h = stream_id({uint64_t(prompt), uint64_t(sample), uint64_t(position)});
  if (h % 9 == 0) return int32_t(1 + h % (kVocab - 1));
  return int32_t(1 + (prompt * 3 + position % 5) % (kVocab - 1));
}

using TokenModel = int32_t (*)(int64_t, int64_t, int64_t);

std::vector<std::vector<int32_t>> make_prompts(const std::vector<int>& lengths) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t p = 0; p < lengths.size(); ++p) {
    std::vector<int32_t> ids;
    for (int i = 0; i < lengths[p]; ++i) ids.push_back(int32_t(1 + (p * 7 + size_t(i) * 3) % (kVocab - 1)));
    prompts.push_back(ids);
  }
  return prompts;
}

// What every schedule must produce.
RolloutBatch expected(const std::vector<std::vector<int32_t>>& prompts, int64_t n, int64_t max_len,
                      TokenModel model = next_token) {
  RolloutBatch b;
  for (size_t p = 0; p < prompts.size(); ++p) b.add_prompt(1000 + p, prompts[p]);
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int64_t k = 0; k < n; ++k) {
      std::vector<int32_t> tokens;
      FinishReason finish = FinishReason::length;
      for (int64_t t = 0; t < max_len; ++t) {
        tokens.push_back(model(int64_t(p), k, t));
        if (tokens.back() == kEos) {
          finish = FinishReason::eos;
          break;
        }
      }
      std::vector<float> lp(tokens.size());
      for (size_t t = 0; t < tokens.size(); ++t) lp[t] = -float(tokens[t]);
      b.add_response(int64_t(p), k, tokens, lp, finish);
    }
  }
  return b;
}

struct Outcome {
  RolloutBatch batch;
  SchedulerStats stats;
  int64_t ahead = 0;  // steps planned ahead
};

// Drives a scheduler to the end, checking every step against the simulated
// cache. With `ahead`, as the engine does: while a step is "in flight"
// (executed, not committed), the next one is planned ahead whenever
// can_plan_ahead() allows, its row r fed the in-flight step's token r.
// With spec_tokens > 0 the scheduler speculates (while at most
// spec_max_running sequences run); draft chunks feed their draft tokens.
Outcome drive(const std::vector<std::vector<int32_t>>& prompts, int64_t n, int64_t max_len, int64_t num_blocks,
              int64_t block_size, int64_t max_num_seqs, int64_t max_batch_tokens, bool ahead = false,
              int64_t spec_tokens = 0, int64_t spec_max_running = 32, TokenModel model = next_token) {
  BlockManager blocks(num_blocks, block_size);
  SchedulerLimits limits{n, max_len, {kEos}, max_num_seqs, max_batch_tokens, spec_tokens, spec_max_running};
  Scheduler s(blocks, limits);
  for (size_t p = 0; p < prompts.size(); ++p) EXPECT_EQ(s.add_prompt(1000 + p, prompts[p]), int64_t(p));
  std::vector<int32_t> slots(size_t(num_blocks * block_size), -1);
  const int64_t seats = std::max(max_num_seqs, n), budget = std::max(max_batch_tokens, seats);
  Outcome out;
  // Runs a plan on the simulated cache and samples its rows; `fed` (a plan
  // made ahead): the token at each chunk's first position, not yet committed.
  auto execute = [&](const StepPlan& plan, const std::vector<int32_t>* fed) {
    EXPECT_LE(int64_t(plan.chunks.size()), seats);
    EXPECT_LE(plan.num_tokens(), budget);
    EXPECT_LE(int64_t(plan.rows.size()), seats);
    // A draft chunk's position holds its draft; the positions past a
    // sequence's known tokens are its draft chunks' of this step.
    auto token = [&](size_t chunk, int64_t p) {
      const ScheduledChunk& c = plan.chunks[chunk];
      if (fed != nullptr && p == c.begin) return (*fed)[chunk];
      if (p < s.length(c.seq)) return s.token_at(c.seq, p);
      for (const ScheduledChunk& d : plan.chunks)
        if (d.seq == c.seq && d.draft >= 0 && d.begin == p) return d.draft;
      ADD_FAILURE() << "sequence " << c.seq << " has no token at " << p;
      return int32_t(-1);
    };
    // Copies in order, then the step's writes.
    for (const BlockCopy& c : plan.copies)
      std::copy_n(slots.begin() + c.src * block_size, block_size, slots.begin() + c.dst * block_size);
    std::set<int64_t> written;
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      const ScheduledChunk& c = plan.chunks[i];
      const BlockTable& table = s.table(c.seq);
      EXPECT_GE(c.count, 1);
      EXPECT_GE(int64_t(table.size()) * block_size, c.begin + c.count);
      for (int64_t p = c.begin; p < c.begin + c.count; ++p) {
        const int64_t slot = table[size_t(p / block_size)] * block_size + p % block_size;
        EXPECT_TRUE(written.insert(slot).second) << "two writes to slot " << slot;
        slots[size_t(slot)] = token(i, p);
      }
    }
    // Each sequence reads its own tokens at every cached position.
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      const ScheduledChunk& c = plan.chunks[i];
      const BlockTable& table = s.table(c.seq);
      for (int64_t p = 0; p < c.begin + c.count; ++p) {
        const int64_t slot = table[size_t(p / block_size)] * block_size + p % block_size;
        EXPECT_EQ(slots[size_t(slot)], token(i, p)) << "sequence " << c.seq << " position " << p;
      }
    }
    std::vector<int32_t> tokens;
    for (const SampleRow& r : plan.rows) {
      const ScheduledChunk& c = plan.chunks[size_t(r.chunk)];
      if (fed == nullptr && c.draft < 0) EXPECT_EQ(c.begin + c.count, s.length(c.seq)) << "a row of an unfinished prefill";
      tokens.push_back(model(r.prompt, r.sample, r.position));
    }
    return tokens;
  };
  auto commit = [&](const std::vector<int32_t>& tokens) {
    std::vector<float> logprobs;
    for (const int32_t t : tokens) logprobs.push_back(-float(t));
    s.commit(tokens, logprobs);
  };
  std::vector<int32_t> in_flight;  // the sampled tokens of the step planned ahead, uncommitted
  bool pending = false;
  int64_t guard = 0;
  while (!s.done() || pending) {
    EXPECT_LT(++guard, 100000) << "no progress";
    if (guard >= 100000) break;
    std::vector<int32_t> tokens = pending ? in_flight : execute(s.schedule(), nullptr);
    pending = false;
    if (ahead && s.can_plan_ahead()) {
      in_flight = execute(s.plan_ahead(), &tokens);
      pending = true;
      ++out.ahead;
    }
    commit(tokens);
  }
  EXPECT_EQ(blocks.num_free(), num_blocks) << "blocks leaked";
  EXPECT_EQ(s.num_finished(), s.num_responses());
  out.batch = s.result();
  out.stats = s.stats();
  return out;
}

void expect_same(const RolloutBatch& got, const RolloutBatch& want, const std::string& what) {
  EXPECT_EQ(got.prompt_uid, want.prompt_uid) << what;
  EXPECT_EQ(got.prompt_tokens, want.prompt_tokens) << what;
  EXPECT_EQ(got.response_prompt, want.response_prompt) << what;
  EXPECT_EQ(got.sample_index, want.sample_index) << what;
  EXPECT_EQ(got.response_offsets, want.response_offsets) << what;
  EXPECT_EQ(got.response_tokens, want.response_tokens) << what;
  EXPECT_EQ(got.sampling_logprobs, want.sampling_logprobs) << what;
  EXPECT_EQ(got.finish_reason, want.finish_reason) << what;
}

TEST(Scheduler, ResponsesDoNotDependOnLimitsOrPool) {
  const auto prompts = make_prompts({5, 9, 3, 12, 7, 1, 16});
  const int64_t n = 3, max_len = 11;
  const RolloutBatch want = expected(prompts, n, max_len);
  struct Case {
    int64_t blocks, block_size, seqs, tokens;
  };
  // Roomy; one sequence at a time; tight pools that force preemption;
  // tiny token budgets that chunk every prefill; blocks of one position.
  for (const Case c : {Case{200, 4, 64, 512}, Case{200, 4, 1, 1}, Case{8, 4, 64, 512}, Case{7, 4, 8, 3},
                       Case{60, 1, 5, 4}, Case{27, 1, 16, 64}, Case{12, 3, 6, 7}, Case{100, 16, 64, 2}}) {
    const std::string what = cat("blocks ", c.blocks, " of ", c.block_size, ", seqs ", c.seqs, ", tokens ", c.tokens);
    const Outcome run = drive(prompts, n, max_len, c.blocks, c.block_size, c.seqs, c.tokens);
    expect_same(run.batch, want, what);
    EXPECT_LE(run.stats.peak_blocks, c.blocks) << what;
    // Planning steps ahead (the engine's launch-ahead) changes nothing.
    const Outcome ahead = drive(prompts, n, max_len, c.blocks, c.block_size, c.seqs, c.tokens, true);
    expect_same(ahead.batch, want, what + ", planned ahead");
    EXPECT_LE(ahead.stats.peak_blocks, c.blocks) << what;
    EXPECT_EQ(ahead.stats.steps, run.stats.steps) << what;
  }
}

// Speculation keeps every response what plain decoding gives, whatever
// the limits and pools: with drafts that the model mostly rejects (the
// hash model), and with drafts it mostly takes (the cyclic model), where
// the round then takes fewer steps.
TEST(Scheduler, SpeculationKeepsTheResponses) {
  const auto prompts = make_prompts({5, 9, 3, 12, 7});
  const int64_t n = 3, max_len = 40;
  struct Case {
    int64_t blocks, block_size, seqs, tokens, spec, running;
  };
  for (const TokenModel model : {next_token, cyclic_token}) {
    const RolloutBatch want = expected(prompts, n, max_len, model);
    const Outcome plain = drive(prompts, n, max_len, 200, 4, 64, 512, false, 0, 32, model);
    EXPECT_EQ(plain.stats.drafted_tokens, 0);
    for (const Case c : {Case{200, 4, 64, 512, 4, 32}, Case{200, 4, 64, 512, 1, 32}, Case{200, 4, 64, 512, 8, 4},
                         Case{200, 1, 6, 7, 3, 32}, Case{14, 4, 64, 512, 4, 32}, Case{200, 4, 16, 9, 5, 16}}) {
      const std::string what = cat(model == cyclic_token ? "cyclic" : "hash", ": blocks ", c.blocks, " of ",
                                   c.block_size, ", seqs ", c.seqs, ", tokens ", c.tokens, ", spec ", c.spec,
                                   " while <= ", c.running, " run");
      for (const bool ahead : {false, true}) {
        const Outcome run = drive(prompts, n, max_len, c.blocks, c.block_size, c.seqs, c.tokens, ahead, c.spec,
                                  c.running, model);
        expect_same(run.batch, want, what);
        EXPECT_LE(run.stats.peak_blocks, c.blocks) << what;
        EXPECT_LE(run.stats.accepted_tokens, run.stats.drafted_tokens) << what;
        // Draft chunks are not sequences: the most running is plain's.
        if (c.blocks == 200 && c.block_size == 4 && c.seqs == 64 && c.tokens == 512)
          EXPECT_EQ(run.stats.peak_running, plain.stats.peak_running) << what;
        EXPECT_EQ(run.stats.sampled_tokens, run.batch.total_response_tokens()) << what;
        if (model == cyclic_token) {
          EXPECT_GT(run.stats.accepted_tokens, 0) << what;
          EXPECT_LT(run.stats.accepted_tokens, run.stats.drafted_tokens) << what;  // rejections too
          if (c.blocks == 200 && c.spec >= 4 && c.running == 32)
            EXPECT_LT(run.stats.steps, plain.stats.steps * 4 / 5) << what;
        }
        std::printf("%s%s: steps %lld (plain %lld), drafted %lld, accepted %lld\n", what.c_str(),
                    ahead ? ", ahead" : "", (long long)run.stats.steps, (long long)plain.stats.steps,
                    (long long)run.stats.drafted_tokens, (long long)run.stats.accepted_tokens);
      }
    }
  }
}

// A load that drains with no one waiting: most decode steps are planned
// ahead, the sequences that end while a step is in flight lose that step's
// row (counted as a response position, not as a sampled token), and the
// responses are those of the step-by-step schedule.
TEST(Scheduler, PlanningAheadKeepsTheResponses) {
  const auto prompts = make_prompts({5, 9, 3, 12});
  const int64_t n = 4, max_len = 30;
  const Outcome run = drive(prompts, n, max_len, 200, 4, 64, 512);
  const Outcome ahead = drive(prompts, n, max_len, 200, 4, 64, 512, true);
  expect_same(ahead.batch, expected(prompts, n, max_len), "planned ahead");
  EXPECT_GT(ahead.ahead, run.stats.steps / 2);
  EXPECT_EQ(ahead.stats.steps, run.stats.steps);
  EXPECT_EQ(ahead.stats.sampled_tokens, ahead.batch.total_response_tokens());
  EXPECT_GE(ahead.stats.response_positions, run.stats.response_positions);
  EXPECT_EQ(ahead.stats.prompt_positions, run.stats.prompt_positions);
}

TEST(Scheduler, PromptIsPrefilledOnceForAllSamples) {
  const auto prompts = make_prompts({10, 6});
  const int64_t n = 5;
  const Outcome run = drive(prompts, n, 8, 100, 4, 64, 512);
  EXPECT_EQ(run.stats.prompt_positions, 16);  // 10 + 6, not n times that
  EXPECT_EQ(run.stats.preemptions, 0);
  // The partial last prompt block (10 % 4, 6 % 4 != 0) is copied by all
  // samples but the last one to write it (unless a sample ended at once).
  EXPECT_LE(run.stats.block_copies, 2 * (n - 1));
  EXPECT_GE(run.stats.block_copies, 1);
  int64_t response_positions = 0;
  for (int64_t r = 0; r < run.batch.num_responses(); ++r) response_positions += run.batch.response_length(r) - 1;
  EXPECT_EQ(run.stats.response_positions, response_positions);  // the last token is never run
  EXPECT_EQ(run.stats.sampled_tokens, run.batch.total_response_tokens());
  // Attention reads each prompt's positions once at its prefill, then at
  // response token t of a sample the prompt and the t + 1 positions so far.
  int64_t kv_read = 16;
  for (int64_t r = 0; r < run.batch.num_responses(); ++r) {
    const int64_t P = int64_t(prompts[size_t(run.batch.response_prompt[size_t(r)])].size());
    for (int64_t t = 0; t + 1 < run.batch.response_length(r); ++t) kv_read += P + t + 1;
  }
  EXPECT_EQ(run.stats.kv_positions_read, kv_read);
}

TEST(Scheduler, TightPoolPreemptsAndRecomputes) {
  const auto prompts = make_prompts({6, 6, 6, 6});
  const Outcome run = drive(prompts, 4, 12, 6, 4, 64, 512);
  EXPECT_GT(run.stats.preemptions, 0);
  EXPECT_GT(run.stats.prompt_positions, 24);  // recomputation after preemption
  expect_same(run.batch, expected(prompts, 4, 12), "tight pool");
}

TEST(Scheduler, SeatsLimitTheBatch) {
  const auto prompts = make_prompts({4, 4, 4, 4, 4});
  const Outcome run = drive(prompts, 2, 6, 100, 4, 2, 512);  // one group at a time
  EXPECT_LE(run.stats.peak_running, 2);
  const Outcome wide = drive(prompts, 2, 6, 100, 4, 64, 512);
  EXPECT_GT(wide.stats.peak_running, 2);
  EXPECT_LT(wide.stats.steps, run.stats.steps);
}

TEST(Scheduler, LongPromptIsPrefilledInChunks) {
  const auto prompts = make_prompts({30});
  BlockManager blocks(20, 4);
  Scheduler s(blocks, SchedulerLimits{1, 2, {}, 4, 8});
  s.add_prompt(7, prompts[0]);
  std::vector<int64_t> chunk_sizes;
  while (!s.done()) {
    const StepPlan& plan = s.schedule();
    ASSERT_EQ(plan.chunks.size(), 1u);
    chunk_sizes.push_back(plan.chunks[0].count);
    std::vector<int32_t> tokens(plan.rows.size(), 5);
    std::vector<float> lp(plan.rows.size(), -1.0f);
    s.commit(tokens, lp);
  }
  EXPECT_EQ(chunk_sizes, (std::vector<int64_t>{8, 8, 8, 6, 1}));
  const RolloutBatch b = s.result();
  EXPECT_EQ(b.response_length(0), 2);
  EXPECT_EQ(b.finish_reason[0], FinishReason::length);
}

TEST(Scheduler, ZeroLengthResponsesNeedNoStep) {
  BlockManager blocks(4, 4);
  Scheduler s(blocks, SchedulerLimits{3, 0, {}, 4, 8});
  s.add_prompt(1, std::vector<int32_t>{1, 2, 3});
  EXPECT_TRUE(s.done());
  const RolloutBatch b = s.result();
  ASSERT_EQ(b.num_responses(), 3);
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(b.response_length(r), 0);
    EXPECT_EQ(b.finish_reason[size_t(r)], FinishReason::length);
  }
}

TEST(Scheduler, EosAtTheFirstTokenEndsTheSampleAtTheFork) {
  BlockManager blocks(8, 4);
  Scheduler s(blocks, SchedulerLimits{2, 5, {9}, 4, 64});
  s.add_prompt(1, std::vector<int32_t>{1, 2, 3, 4, 5});
  const StepPlan& plan = s.schedule();
  ASSERT_EQ(plan.rows.size(), 2u);
  s.commit(std::vector<int32_t>{9, 3}, std::vector<float>{-0.5f, -1.5f});
  EXPECT_EQ(s.num_finished(), 1);
  EXPECT_EQ(s.num_running(), 1);
  while (!s.done()) {
    const StepPlan& p = s.schedule();
    s.commit(std::vector<int32_t>(p.rows.size(), 4), std::vector<float>(p.rows.size(), -2.0f));
  }
  const RolloutBatch b = s.result();
  EXPECT_EQ(std::vector<int32_t>(b.response(0).begin(), b.response(0).end()), (std::vector<int32_t>{9}));
  EXPECT_EQ(b.finish_reason[0], FinishReason::eos);
  EXPECT_EQ(std::vector<int32_t>(b.response(1).begin(), b.response(1).end()), (std::vector<int32_t>{3, 4, 4, 4, 4}));
  EXPECT_EQ(b.finish_reason[1], FinishReason::length);
  EXPECT_EQ(std::vector<float>(b.logprobs(0).begin(), b.logprobs(0).end()), (std::vector<float>{-0.5f}));
  EXPECT_EQ(blocks.num_free(), 8);
}

TEST(Scheduler, APromptThatCanNeverFitIsAUserError) {
  BlockManager blocks(3, 4);
  Scheduler s(blocks, SchedulerLimits{1, 5, {}, 4, 64});
  // 8 + 5 - 1 = 12 positions fit 3 blocks of 4 exactly.
  s.add_prompt(1, std::vector<int32_t>(8, 1));
  try {
    s.add_prompt(2, std::vector<int32_t>(9, 1));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "rollout: a prompt of 9 tokens with max_response_length = 5 needs 4 KV-cache blocks of 4 positions, "
                 "but the KV-cache budget holds only 3 blocks: raise the KV-cache memory budget or shorten the "
                 "prompt or response");
  }
  // The fitting prompt runs to the end in its pool.
  while (!s.done()) {
    const StepPlan& p = s.schedule();
    s.commit(std::vector<int32_t>(p.rows.size(), 2), std::vector<float>(p.rows.size(), 0.0f));
  }
  EXPECT_EQ(s.result().response_length(0), 5);
}

TEST(SchedulerDeathTest, MisuseIsFatal) {
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([] {
                 BlockManager blocks(4, 4);
                 Scheduler s(blocks, SchedulerLimits{1, 5, {}, 4, 8});
                 s.add_prompt(1, std::vector<int32_t>{});
               }),
               "prompt 0 \\(uid 1\\) is empty");
  EXPECT_DEATH(die([] {
                 BlockManager blocks(4, 4);
                 Scheduler s(blocks, SchedulerLimits{1, 5, {}, 4, 8});
                 s.schedule();
               }),
               "nothing left to run");
  EXPECT_DEATH(die([] {
                 BlockManager blocks(4, 4);
                 Scheduler s(blocks, SchedulerLimits{1, 5, {}, 4, 8});
                 s.add_prompt(1, std::vector<int32_t>{1});
                 s.schedule();
                 s.commit(std::vector<int32_t>{}, std::vector<float>{});
               }),
               "0 tokens and 0 log-probs for 1 rows");
}

}  // namespace
}  // namespace dapo::rollout
