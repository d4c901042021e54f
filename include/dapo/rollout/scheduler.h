// Continuous batching for the generation engine, with no model inside: which
// sequences run which positions at each step, and what happens to them once
// the step's tokens are sampled. The engine runs the plan through the model
// and the sampler; tests drive the scheduler with made-up tokens.
//
// Sequences. A prompt enters as ONE prefill sequence (its "group"); when
// its prompt positions are all in the cache, the step's logits row is
// sampled n times and the group forks into its n samples, which share every
// prompt block (BlockManager::fork): a prompt is prefilled once whatever n.
// The first write of a sample into a shared, partly filled block copies it
// first (copy-on-write). A sample stops when it samples an EOS id (finish
// reason eos) or reaches max_response_length tokens (length); its blocks
// are freed at once and its seat goes to the next waiting sequence.
//
// One step (schedule):
//  1. running sequences with one new token (decodes), oldest first;
//  2. running sequences still prefilling, oldest first, chunks limited by
//     the step's token budget (chunked prefill);
//  3. waiting sequences, first come first served, while a seat (at most
//     max_num_seqs sequences decode at once; a group takes n seats), the
//     token budget and the free blocks allow; a prompt that does not fit
//     waits, and nothing behind it overtakes it.
// A running sequence that needs a block when none is free preempts the
// youngest running sequences that have not been scheduled in this step
// (their blocks are freed; they go back to the front of the queue and are
// recomputed from their tokens when readmitted), or waits itself if it is
// the youngest. The oldest sequence therefore always progresses, and as
// every sequence fits the pool on its own (checked by add_prompt), the
// scheduler never deadlocks and never fails for lack of blocks.
//
// Determinism: decisions depend only on the prompts, the limits, the pool
// and the sampled tokens; tp ranks, which sample the same tokens, make the
// same decisions. Which step a token is computed in never changes its
// random draw (keyed by prompt uid, sample index and response position).
//
// Speculative decoding (spec_tokens > 0), exact. In the tail of a round
// (at most spec_max_running sequences running, none waiting), a decoding
// sample with an n-gram draft d_1..d_k (rollout/ngram_proposer.h) runs k
// more chunks of one position in the same step: chunk j feeds d_j at the
// position after chunk j - 1's and shares the sample's block table, so it
// attends to the positions before it, drafts included (their cache writes
// come first in every layer). Each chunk has its row, sampled with the
// random draw of its response position, as a plain decode would. Row j's
// token x_j is the target's own draw given the drafts before it; it is
// kept while every earlier draft equals the token the target drew there
// (d_j == x_{j-1}): the kept tokens are then exactly the ones plain
// decoding would sample, with the same random draws, so the distribution
// is the target's whatever the drafts (for a point-mass draft this is the
// rejection rule of Leviathan et al. 2023 with the residual draw coupled to
// the target's). The step keeps x_0..x_m, m the first j where d_{j+1} !=
// x_j (or k); the cache positions of rejected drafts are written over
// later. Speculation pauses for kSpecPauseSteps steps, then twice as long
// each time again, when few drafts were accepted (it costs a host round
// trip per step: no plan ahead) or no sequence found one.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "dapo/rollout/block_manager.h"
#include "dapo/rollout/ngram_proposer.h"
#include "dapo/rollout/rollout_batch.h"

namespace dapo::rollout {

struct SchedulerLimits {
  int64_t n = 1;                    // samples per prompt
  int64_t max_response_length = 1;  // tokens per response (>= 0)
  std::vector<int32_t> eos_ids;     // sampling one of these ends a response
  int64_t max_num_seqs = 256;       // sequences per step; raised to n
  int64_t max_batch_tokens = 4096;  // new positions per step; raised to max_num_seqs
  int64_t spec_tokens = 0;          // draft tokens per sample and step; 0: no speculation
  int64_t spec_max_running = 8;    // speculate while at most this many sequences run
  int64_t max_step_rows = 0;        // chunks and sampled rows per step; raised to max_num_seqs
};

// Positions [begin, begin + count) of sequence `seq` run in this step.
// draft >= 0: a speculative chunk (count 1) whose input token is this
// draft, not yet the sequence's.
struct ScheduledChunk {
  int64_t seq = 0;
  int64_t begin = 0;
  int64_t count = 0;
  int32_t draft = -1;
};

// One token to sample after the step: from the logits of chunk `chunk`'s
// last position, for response `sample` of prompt `prompt`, as its token
// number `position` (the random draw's counter).
struct SampleRow {
  int64_t chunk = 0;
  int64_t prompt = 0;
  int64_t sample = 0;
  int64_t position = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<BlockCopy> copies;  // to run, in order, before the forward
  std::vector<SampleRow> rows;
  int64_t num_tokens() const;
  void clear();
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t prompt_positions = 0;    // prompt positions run through the model (recomputation included)
  int64_t response_positions = 0;  // response positions run through the model (recomputation included)
  int64_t sampled_tokens = 0;
  int64_t preemptions = 0;
  int64_t block_copies = 0;        // copy-on-write copies
  int64_t peak_running = 0;        // most sequences in one step
  int64_t peak_blocks = 0;         // most blocks in use at once
  // Cached positions the steps' attention reads: per scheduled chunk, its
  // context at its end (what a roofline of the run counts as KV traffic).
  int64_t kv_positions_read = 0;
  int64_t spec_steps = 0;        // steps with draft chunks
  int64_t drafted_tokens = 0;    // draft chunks run
  int64_t accepted_tokens = 0;   // drafts equal to the target's token: positions gained
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler and be used by nothing else.
  Scheduler(BlockManager& blocks, SchedulerLimits limits);

  // Queues prompt `uid` (its ids are copied) and returns its index. With
  // max_response_length = 0 its n responses are complete at once (empty,
  // finish reason length). An empty prompt is a bug (DAPO_CHECK). A prompt
  // that cannot fit the pool together with a full response is a UserError:
  // no schedule could ever run it.
  int64_t add_prompt(uint64_t uid, std::span<const int32_t> ids);

  bool done() const { return running_.empty() && waiting_.empty(); }
  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t num_finished() const { return finished_; }
  int64_t num_responses() const { return int64_t(prompts_.size()) * limits_.n; }

  // Plans the next step (not done() is required). Blocks for the planned
  // positions are allocated (or copied) here.
  const StepPlan& schedule();
  // The token at `pos` of sequence `seq` (prompt, then response).
  int32_t token_at(int64_t seq, int64_t pos) const;
  const BlockTable& table(int64_t seq) const { return seqs_[size_t(seq)].table; }
  int64_t length(int64_t seq) const;
  // Takes the sampled token and its log-prob for each row of the oldest
  // uncommitted plan; appends them, ends responses, forks groups whose
  // prefill completed.
  void commit(std::span<const int32_t> tokens, std::span<const float> logprobs);

  // Planning ahead, so that the engine can launch step N + 1 while step N
  // runs. With step N planned and not committed, can_plan_ahead() tells
  // whether step N + 1 is sure to decode the same sequences one position
  // further unless some of them end with N's token: N decodes every
  // running sequence (one row each, rows in chunk order), nothing waits, no
  // response reaches max_response_length with N's token, N + 1's blocks are
  // free without preempting, and no plan is ahead already. plan_ahead()
  // then plans N + 1 (its blocks and copy-on-writes allocated here): chunk
  // and row r continue chunk and row r of N, whose sampled token is N + 1's
  // input at that row (token_at cannot give it before N is committed: the
  // engine feeds it on the device). commit() takes N's tokens first, then
  // N + 1's; a sequence that ended with N's token still has its row in
  // N + 1, whose token is dropped. Ahead or not, the responses are the same.
  bool can_plan_ahead() const;
  const StepPlan& plan_ahead();

  // Whether the next schedule() may speculate (spec_tokens > 0, the tail of
  // the round, not pausing). While it may, can_plan_ahead() is false: a
  // speculative step needs the tokens of the step before it on the host.
  bool speculating() const;

  // Every response, ordered by prompt, then sample (done() required).
  RolloutBatch result() const;
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerLimits& limits() const { return limits_; }

 private:
  struct Prompt {
    uint64_t uid = 0;
    std::vector<int32_t> ids;
  };
  struct Response {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    FinishReason finish = FinishReason::length;
    bool finished = false;
  };
  struct Seq {
    int64_t prompt = 0;
    int64_t sample = -1;  // -1: the prompt's group (prefill, then fork)
    int64_t computed = 0; // positions in the cache
    BlockTable table;
    int64_t scheduled_step = -1;  // the last step that ran some of its positions
    int64_t first_row = -1;       // in that step: its first SampleRow, -1 for none
    std::vector<int32_t> drafts;  // in that step: its draft chunks' tokens
  };
  static constexpr int64_t kSpecWindow = 32;      // speculative steps between two looks at the acceptance
  static constexpr int64_t kSpecPauseSteps = 256;  // steps without speculation after a poor window,
                                                   // doubling while windows stay poor (to 4,096)
  static constexpr int64_t kSpecDryLimit = 16;    // speculative-eligible steps without a draft before a pause
  static constexpr double kSpecMinAcceptance = 0.2;  // accepted / drafted below this in a window: pause

  int64_t seats(const Seq& s) const { return s.sample < 0 ? limits_.n : 1; }
  Response& response_of(const Seq& s) { return responses_[size_t(s.prompt * limits_.n + s.sample)]; }
  const Response& response_of(const Seq& s) const { return responses_[size_t(s.prompt * limits_.n + s.sample)]; }
  // Tries to schedule `count` (or, when `shrink`, fewer but >= 1) new
  // positions of running_[i], preempting younger unscheduled sequences for
  // blocks. Returns false when running_[i] was preempted itself.
  bool schedule_running(size_t i, int64_t count, bool shrink, int64_t& budget);
  void add_chunk(int64_t seq, int64_t count, int64_t& budget);
  void preempt(size_t running_index);
  bool admit(int64_t& budget);
  // Appends row `row` of plan_'s token; returns whether its response is now complete.
  bool take(size_t row, int32_t token, float logprob);
  // Adds draft chunks and rows after every decode of plan_ (speculating()).
  void add_drafts(int64_t& budget);
  // After a committed step: the acceptance window, pauses.
  void update_speculation(int64_t drafted, int64_t accepted);
  // A new step (scheduled or planned ahead): its count, the pause's clock.
  void begin_step();
  // Adds the positions `plan`'s attention reads to kv_positions_read.
  void count_kv_reads(const StepPlan& plan);
  void pause_speculation();
  // commit() of a plan that decodes one position of distinct samples, row r
  // from chunk r (what can_plan_ahead() requires and plan_ahead() makes).
  void commit_decodes(std::span<const int32_t> tokens, std::span<const float> logprobs);

  BlockManager& blocks_;
  SchedulerLimits limits_;
  std::vector<Prompt> prompts_;
  std::vector<Response> responses_;  // (prompts * n)
  std::vector<Seq> seqs_;
  std::vector<int64_t> running_;    // seq ids, oldest admission first
  std::deque<int64_t> waiting_;     // seq ids, next to admit first
  int64_t running_seats_ = 0;
  int64_t finished_ = 0;
  StepPlan plan_;         // the oldest uncommitted plan
  StepPlan ahead_;        // the plan after it, when has_ahead_
  bool has_ahead_ = false;
  bool plan_is_ahead_ = false;  // plan_ came from plan_ahead()
  SchedulerStats stats_;
  NgramProposer proposer_;
  int64_t spec_pause_ = 0;              // steps left without speculation
  int64_t spec_next_pause_ = kSpecPauseSteps;
  int64_t spec_dry_ = 0;                // eligible steps in a row without a draft
  int64_t window_steps_ = 0, window_drafted_ = 0, window_accepted_ = 0;
};

}  // namespace dapo::rollout
