// Continuous batching (scheduler.h): decodes first, then running prefills,
// then admissions; preemption of the youngest for blocks; forks of prompt
// groups into their samples when the prompt is in the cache.
#include "dapo/rollout/scheduler.h"

#include <algorithm>
#include <utility>

#include "dapo/core/error.h"

namespace dapo::rollout {

int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.count;
  return n;
}

void StepPlan::clear() {
  chunks.clear();
  copies.clear();
  rows.clear();
}

Scheduler::Scheduler(BlockManager& blocks, SchedulerLimits limits) : blocks_(blocks), limits_(std::move(limits)) {
  DAPO_CHECK(limits_.n >= 1, "Scheduler: n = ", limits_.n);
  DAPO_CHECK(limits_.max_response_length >= 0, "Scheduler: max_response_length = ", limits_.max_response_length);
  DAPO_CHECK(limits_.max_num_seqs >= 1 && limits_.max_batch_tokens >= 1, "Scheduler: max_num_seqs = ",
             limits_.max_num_seqs, ", max_batch_tokens = ", limits_.max_batch_tokens);
  // A group needs n seats at once, and every running decode one token.
  limits_.max_num_seqs = std::max(limits_.max_num_seqs, limits_.n);
  limits_.max_step_rows = std::max(limits_.max_step_rows, limits_.max_num_seqs);
  limits_.max_batch_tokens = std::max(limits_.max_batch_tokens, limits_.max_step_rows);
}

int64_t Scheduler::add_prompt(uint64_t uid, std::span<const int32_t> ids) {
  const int64_t index = int64_t(prompts_.size());
  DAPO_CHECK(!ids.empty(), "Scheduler: prompt ", index, " (uid ", uid, ") is empty");
  // The last sampled token of a response is never run through the model.
  const int64_t R = limits_.max_response_length;
  const int64_t positions = int64_t(ids.size()) + std::max<int64_t>(R, 1) - 1;
  if (blocks_.blocks_for(positions) > blocks_.num_blocks())
    throw UserError(cat("rollout: a prompt of ", ids.size(), " tokens with max_response_length = ", R, " needs ",
                        blocks_.blocks_for(positions), " KV-cache blocks of ", blocks_.block_size(),
                        " positions, but the KV-cache budget holds only ", blocks_.num_blocks(),
                        " blocks: raise the KV-cache memory budget or shorten the prompt or response"));
  prompts_.push_back({uid, std::vector<int32_t>(ids.begin(), ids.end())});
  if (limits_.spec_tokens > 0) proposer_.add_group(ids, limits_.n);
  responses_.resize(prompts_.size() * size_t(limits_.n));
  if (R == 0) {
    for (int64_t k = 0; k < limits_.n; ++k) {
      Response& r = responses_[size_t(index * limits_.n + k)];
      r.finished = true;
      r.finish = FinishReason::length;
    }
    finished_ += limits_.n;
    return index;
  }
  Seq group;
  group.prompt = index;
  seqs_.push_back(std::move(group));
  waiting_.push_back(int64_t(seqs_.size()) - 1);
  return index;
}

int64_t Scheduler::length(int64_t seq) const {
  const Seq& s = seqs_[size_t(seq)];
  const int64_t P = int64_t(prompts_[size_t(s.prompt)].ids.size());
  return s.sample < 0 ? P : P + int64_t(response_of(s).tokens.size());
}

int32_t Scheduler::token_at(int64_t seq, int64_t pos) const {
  const Seq& s = seqs_[size_t(seq)];
  const std::vector<int32_t>& prompt = prompts_[size_t(s.prompt)].ids;
  if (pos < int64_t(prompt.size())) return prompt[size_t(pos)];
  DAPO_CHECK(s.sample >= 0, "token_at(", seq, ", ", pos, ") past the prompt of a group");
  return response_of(s).tokens[size_t(pos - int64_t(prompt.size()))];
}

void Scheduler::add_chunk(int64_t seq, int64_t count, int64_t& budget) {
  Seq& s = seqs_[size_t(seq)];
  const bool ok = blocks_.prepare_write(s.table, s.computed, s.computed + count, plan_.copies);
  DAPO_CHECK(ok, "Scheduler: blocks vanished between the check and the write");
  plan_.chunks.push_back({seq, s.computed, count});
  s.scheduled_step = stats_.steps;
  s.drafts.clear();
  budget -= count;
  const int64_t P = int64_t(prompts_[size_t(s.prompt)].ids.size());
  const int64_t in_prompt = std::clamp<int64_t>(P - s.computed, 0, count);
  stats_.prompt_positions += in_prompt;
  stats_.response_positions += count - in_prompt;
}

void Scheduler::preempt(size_t running_index) {
  const int64_t seq = running_[running_index];
  Seq& s = seqs_[size_t(seq)];
  blocks_.free(s.table);
  s.computed = 0;
  running_seats_ -= seats(s);
  running_.erase(running_.begin() + std::ptrdiff_t(running_index));
  waiting_.push_front(seq);
  ++stats_.preemptions;
}

bool Scheduler::schedule_running(size_t i, int64_t count, bool shrink, int64_t& budget) {
  Seq& s = seqs_[size_t(running_[i])];
  while (blocks_.blocks_needed(s.table, s.computed, s.computed + count) > blocks_.num_free()) {
    // The youngest sequence not yet scheduled in this step gives way.
    size_t victim = running_.size();
    for (size_t j = running_.size(); j-- > i + 1;) {
      if (seqs_[size_t(running_[j])].scheduled_step != stats_.steps) {
        victim = j;
        break;
      }
    }
    if (victim < running_.size()) {
      preempt(victim);
      continue;
    }
    // Nobody younger to take blocks from: a shorter chunk, or wait a step
    // (keeping what is cached) until older sequences free blocks.
    if (shrink) count = blocks_.writable_positions(s.table, s.computed, count);
    if (!shrink || count == 0) return false;
    break;
  }
  add_chunk(running_[i], count, budget);
  return true;
}

bool Scheduler::admit(int64_t& budget) {
  if (waiting_.empty() || budget <= 0) return false;
  const int64_t seq = waiting_.front();
  const Seq& s = seqs_[size_t(seq)];
  if (running_seats_ + seats(s) > limits_.max_num_seqs) return false;
  const int64_t remaining = length(seq) - s.computed;
  int64_t count = std::min(remaining, budget);
  int64_t reserve = 0;
  if (!running_.empty()) {
    // Headroom for the running sequences' next blocks, and for the first
    // writes of the samples a completed prefill forks into, so that an
    // admission does not cause preemptions right away.
    reserve = std::max<int64_t>(1, blocks_.num_blocks() / 100);
    if (s.sample < 0 && count == remaining) reserve += limits_.n;
  }
  if (blocks_.blocks_needed(s.table, s.computed, s.computed + count) + reserve > blocks_.num_free()) {
    if (!running_.empty()) return false;
    count = blocks_.writable_positions(s.table, s.computed, count);  // >= 1: the whole pool is free
    DAPO_CHECK(count >= 1, "Scheduler: an empty pool cannot hold one position");
  }
  waiting_.pop_front();
  running_.push_back(seq);
  running_seats_ += seats(seqs_[size_t(seq)]);
  add_chunk(seq, count, budget);
  return true;
}

const StepPlan& Scheduler::schedule() {
  DAPO_CHECK(!done(), "Scheduler::schedule() with nothing left to run");
  DAPO_CHECK(!has_ahead_ && !plan_is_ahead_, "Scheduler::schedule() before the steps planned ahead are committed");
  begin_step();
  plan_.clear();
  int64_t budget = limits_.max_batch_tokens;
  // 1. decodes, 2. running prefills (preempt() only removes entries after i).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      const int64_t seq = running_[i];
      const int64_t remaining = length(seq) - seqs_[size_t(seq)].computed;
      DAPO_CHECK(remaining >= 1, "Scheduler: running sequence ", seq, " has nothing to compute");
      if ((pass == 0) != (remaining == 1)) continue;
      schedule_running(i, std::min(remaining, budget), pass == 1, budget);
    }
  }
  // 3. admissions.
  while (admit(budget)) {
  }
  DAPO_CHECK(!plan_.chunks.empty(), "Scheduler: empty step with ", running_.size(), " running and ",
             waiting_.size(), " waiting");
  // 4. drafts after the decodes, in the tail of the round.
  if (speculating()) add_drafts(budget);
  // Sequences whose known tokens are all cached after this step sample the
  // next one from the logits of their chunk's last position; a draft chunk
  // samples the token after its draft (its response position: the
  // decode's, plus its place among the drafts).
  for (size_t c = 0; c < plan_.chunks.size(); ++c) {
    const ScheduledChunk& chunk = plan_.chunks[c];
    if (chunk.draft >= 0) {
      const Seq& s = seqs_[size_t(chunk.seq)];
      plan_.rows.push_back(
          {int64_t(c), s.prompt, s.sample, int64_t(response_of(s).tokens.size()) + chunk.begin - s.computed});
      continue;
    }
    seqs_[size_t(chunk.seq)].first_row = -1;
    if (chunk.begin + chunk.count != length(chunk.seq)) continue;
    Seq& s = seqs_[size_t(chunk.seq)];
    s.first_row = int64_t(plan_.rows.size());
    if (s.sample < 0) {
      for (int64_t k = 0; k < limits_.n; ++k) plan_.rows.push_back({int64_t(c), s.prompt, k, 0});
    } else {
      plan_.rows.push_back({int64_t(c), s.prompt, s.sample, int64_t(response_of(s).tokens.size())});
    }
  }
  const int64_t sequences = std::count_if(plan_.chunks.begin(), plan_.chunks.end(),
                                          [](const ScheduledChunk& c) { return c.draft < 0; });
  stats_.peak_running = std::max(stats_.peak_running, sequences);
  count_kv_reads(plan_);
  stats_.block_copies += int64_t(plan_.copies.size());
  stats_.peak_blocks = blocks_.peak_used();
  return plan_;
}

bool Scheduler::take(size_t row, int32_t token, float logprob) {
  const SampleRow& r = plan_.rows[row];
  Response& resp = responses_[size_t(r.prompt * limits_.n + r.sample)];
  DAPO_CHECK(!resp.finished && int64_t(resp.tokens.size()) == r.position, "Scheduler::commit: row ", row,
             " does not continue its response");
  resp.tokens.push_back(token);
  resp.logprobs.push_back(logprob);
  if (limits_.spec_tokens > 0) proposer_.append(r.prompt, r.sample, token);
  const bool eos = std::find(limits_.eos_ids.begin(), limits_.eos_ids.end(), token) != limits_.eos_ids.end();
  if (eos || int64_t(resp.tokens.size()) >= limits_.max_response_length) {
    resp.finished = true;
    resp.finish = eos ? FinishReason::eos : FinishReason::length;
    ++finished_;
    return true;
  }
  return false;
}

bool Scheduler::can_plan_ahead() const {
  if (has_ahead_ || plan_.chunks.empty() || !waiting_.empty() || speculating()) return false;
  if (plan_.rows.size() != plan_.chunks.size() || running_.size() != plan_.chunks.size()) return false;
  int64_t need = 0;
  for (size_t i = 0; i < plan_.chunks.size(); ++i) {
    const ScheduledChunk& c = plan_.chunks[i];
    const SampleRow& r = plan_.rows[i];
    const Seq& s = seqs_[size_t(c.seq)];
    if (c.count != 1 || s.sample < 0 || r.chunk != int64_t(i) || running_[i] != c.seq) return false;
    if (response_of(s).finished || r.position + 1 >= limits_.max_response_length) return false;
    need += blocks_.blocks_needed(s.table, c.begin + 1, c.begin + 2);
  }
  return need <= blocks_.num_free();
}

const StepPlan& Scheduler::plan_ahead() {
  DAPO_CHECK(can_plan_ahead(), "Scheduler::plan_ahead() where can_plan_ahead() is false");
  begin_step();
  ahead_.clear();
  for (size_t i = 0; i < plan_.chunks.size(); ++i) {
    const ScheduledChunk& c = plan_.chunks[i];
    Seq& s = seqs_[size_t(c.seq)];
    const bool ok = blocks_.prepare_write(s.table, c.begin + 1, c.begin + 2, ahead_.copies);
    DAPO_CHECK(ok, "Scheduler: blocks vanished between the check and the write");
    ahead_.chunks.push_back({c.seq, c.begin + 1, 1});
    const SampleRow& r = plan_.rows[i];
    ahead_.rows.push_back({int64_t(i), r.prompt, r.sample, r.position + 1});
    s.scheduled_step = stats_.steps;
    s.first_row = int64_t(i);
  }
  stats_.response_positions += int64_t(ahead_.chunks.size());
  count_kv_reads(ahead_);
  stats_.block_copies += int64_t(ahead_.copies.size());
  stats_.peak_blocks = blocks_.peak_used();
  has_ahead_ = true;
  return ahead_;
}

void Scheduler::commit_decodes(std::span<const int32_t> tokens, std::span<const float> logprobs) {
  std::vector<int64_t> ended;
  for (size_t row = 0; row < plan_.rows.size(); ++row) {
    const int64_t seq = plan_.chunks[size_t(plan_.rows[row].chunk)].seq;
    Seq& s = seqs_[size_t(seq)];
    if (response_of(s).finished) continue;  // ended with the previous step's token: this one is dropped
    s.computed += 1;
    ++stats_.sampled_tokens;
    if (take(row, tokens[row], logprobs[row])) {
      blocks_.free(s.table);
      running_seats_ -= 1;
      ended.push_back(seq);
    }
  }
  if (!ended.empty())
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](int64_t q) { return std::find(ended.begin(), ended.end(), q) != ended.end(); }),
                   running_.end());
  // The plan ahead, if any, becomes the oldest uncommitted one.
  plan_.clear();
  if (has_ahead_) std::swap(plan_, ahead_);
  plan_is_ahead_ = has_ahead_;
  has_ahead_ = false;
}

void Scheduler::commit(std::span<const int32_t> tokens, std::span<const float> logprobs) {
  DAPO_CHECK(tokens.size() == plan_.rows.size() && logprobs.size() == plan_.rows.size(), "Scheduler::commit: ",
             tokens.size(), " tokens and ", logprobs.size(), " log-probs for ", plan_.rows.size(), " rows");
  // With a step planned ahead (or this one planned ahead), rows are
  // decodes of distinct samples, one per chunk in order.
  if (has_ahead_ || plan_is_ahead_) return commit_decodes(tokens, logprobs);
  int64_t drafted = 0, accepted = 0;
  for (const ScheduledChunk& c : plan_.chunks) {
    if (c.draft >= 0) ++drafted;
    else seqs_[size_t(c.seq)].computed += c.count;
  }
  // Appends a row's token; returns whether its response is now complete.
  auto take = [&](size_t row) { return this->take(row, tokens[row], logprobs[row]); };
  stats_.sampled_tokens += int64_t(plan_.rows.size()) - drafted;  // drafts: + the accepted ones below
  // The rows of a sequence start at its first_row (set by schedule()).
  auto first_row = [&](int64_t seq) -> int64_t {
    const Seq& s = seqs_[size_t(seq)];
    return s.scheduled_step == stats_.steps ? s.first_row : -1;
  };
  std::vector<int64_t> next_running;
  next_running.reserve(running_.size() + size_t(limits_.n));
  for (const int64_t seq : running_) {
    const int64_t r0 = first_row(seq);
    if (r0 < 0) {
      next_running.push_back(seq);
      continue;
    }
    if (seqs_[size_t(seq)].sample >= 0) {
      // The decode's token, then each draft's while the draft before it was
      // the token the target drew there (scheduler.h: exact speculation).
      Seq& s = seqs_[size_t(seq)];
      bool ended = take(size_t(r0));
      for (size_t j = 0; j < s.drafts.size() && !ended; ++j) {
        if (response_of(s).tokens.back() != s.drafts[j]) break;
        s.computed += 1;
        ++accepted;
        ++stats_.sampled_tokens;
        ended = take(size_t(r0) + 1 + j);
      }
      if (ended) {
        blocks_.free(s.table);
        running_seats_ -= 1;
      } else {
        if (!s.drafts.empty()) blocks_.truncate(s.table, s.computed + 1);
        next_running.push_back(seq);
      }
      continue;
    }
    // A group whose prompt is cached: its samples take its place, sharing
    // its blocks; the group itself lets go of them.
    for (int64_t k = 0; k < limits_.n; ++k) {
      if (take(size_t(r0 + k))) {
        running_seats_ -= 1;
        continue;
      }
      Seq sample;
      sample.prompt = seqs_[size_t(seq)].prompt;
      sample.sample = k;
      sample.computed = seqs_[size_t(seq)].computed;
      sample.table = blocks_.fork(seqs_[size_t(seq)].table);
      seqs_.push_back(std::move(sample));
      next_running.push_back(int64_t(seqs_.size()) - 1);
    }
    blocks_.free(seqs_[size_t(seq)].table);
  }
  running_ = std::move(next_running);
  plan_.clear();
  update_speculation(drafted, accepted);
}

void Scheduler::begin_step() {
  ++stats_.steps;
  if (spec_pause_ > 0) --spec_pause_;
}

void Scheduler::count_kv_reads(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) stats_.kv_positions_read += c.begin + c.count;
}

bool Scheduler::speculating() const {
  return limits_.spec_tokens > 0 && spec_pause_ == 0 && waiting_.empty() && !running_.empty() &&
         int64_t(running_.size()) <= limits_.spec_max_running;
}

// Each decoding sample's draft (at most spec_tokens, within its response's
// length, the step's seats and tokens and the free blocks) as chunks of one
// position right after its decode chunk: schedule() adds rows in chunk
// order, so draft j's row is the decode row's first_row + j.
void Scheduler::add_drafts(int64_t& budget) {
  std::vector<ScheduledChunk> chunks;
  chunks.swap(plan_.chunks);
  // The step's rows before drafts (a group whose prefill completes samples
  // n): chunks and rows both stay within the seats.
  int64_t rows = 0;
  for (const ScheduledChunk& c : chunks)
    if (c.begin + c.count == length(c.seq)) rows += seqs_[size_t(c.seq)].sample < 0 ? limits_.n : 1;
  const int64_t seats_left = limits_.max_step_rows - std::max(int64_t(chunks.size()), rows);
  // Drafts leave every running sequence a block for its next position, so
  // that they never cause a preemption.
  const int64_t keep_free = int64_t(running_.size());
  std::vector<int32_t> draft(size_t(limits_.spec_tokens));
  int64_t drafted = 0;
  for (const ScheduledChunk& c : chunks) {
    plan_.chunks.push_back(c);
    Seq& s = seqs_[size_t(c.seq)];
    if (c.count != 1 || s.sample < 0 || c.begin + 1 != length(c.seq)) continue;
    const int64_t room = std::min({limits_.max_response_length - int64_t(response_of(s).tokens.size()) - 1,
                                   limits_.spec_tokens, budget, seats_left - drafted});
    if (room <= 0) continue;
    const int64_t m = proposer_.propose(s.prompt, s.sample, std::span<int32_t>(draft.data(), size_t(room)));
    if (m == 0 || blocks_.blocks_needed(s.table, c.begin + 1, c.begin + 1 + m) + keep_free > blocks_.num_free())
      continue;
    const bool ok = blocks_.prepare_write(s.table, c.begin + 1, c.begin + 1 + m, plan_.copies);
    DAPO_CHECK(ok, "Scheduler: blocks vanished between the check and the write");
    for (int64_t j = 1; j <= m; ++j) plan_.chunks.push_back({c.seq, c.begin + j, 1, draft[size_t(j - 1)]});
    s.drafts.assign(draft.begin(), draft.begin() + m);
    budget -= m;
    drafted += m;
  }
  if (drafted > 0) {
    ++stats_.spec_steps;
    stats_.drafted_tokens += drafted;
    spec_dry_ = 0;
  } else if (++spec_dry_ >= kSpecDryLimit) {
    pause_speculation();
  }
}

void Scheduler::pause_speculation() {
  spec_pause_ = spec_next_pause_;
  spec_next_pause_ = std::min<int64_t>(2 * spec_next_pause_, 16 * kSpecPauseSteps);
  spec_dry_ = 0;
  window_steps_ = window_drafted_ = window_accepted_ = 0;
}

// Speculation pays when its drafts are taken: a window of speculative
// steps whose drafts were accepted less than kSpecMinAcceptance of the
// time pauses it (a pause keeps launch-ahead, whose plans never draft).
void Scheduler::update_speculation(int64_t drafted, int64_t accepted) {
  if (drafted == 0) return;
  stats_.accepted_tokens += accepted;
  ++window_steps_;
  window_drafted_ += drafted;
  window_accepted_ += accepted;
  if (window_steps_ < kSpecWindow) return;
  if (double(window_accepted_) < kSpecMinAcceptance * double(window_drafted_)) return pause_speculation();
  spec_next_pause_ = kSpecPauseSteps;
  window_steps_ = window_drafted_ = window_accepted_ = 0;
}

RolloutBatch Scheduler::result() const {
  DAPO_CHECK(done(), "Scheduler::result() before every response is complete");
  RolloutBatch batch;
  for (const Prompt& p : prompts_) batch.add_prompt(p.uid, p.ids);
  for (size_t p = 0; p < prompts_.size(); ++p) {
    for (int64_t k = 0; k < limits_.n; ++k) {
      const Response& r = responses_[p * size_t(limits_.n) + size_t(k)];
      DAPO_CHECK(r.finished, "Scheduler: response ", k, " of prompt ", p, " is not finished");
      batch.add_response(int64_t(p), k, r.tokens, r.logprobs, r.finish);
    }
  }
  return batch;
}

}  // namespace dapo::rollout
