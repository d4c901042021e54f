// What `dapo inspect` prints about a rollout dump: a summary of the step's
// generations, a few samples in full, or every response as JSONL. Pure
// functions of a RolloutDump (read_rollout_dump), so tests compare the
// exact text.
//
// Order: groups by (round, position) - the prompt loader's order, the
// same whatever the number of ranks that wrote the dump - and responses by
// sample index within their group.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dapo/dump/rollout_dump.h"

namespace dapo::dump {

// Indices into dump.groups in (round, position) order (stable for ties).
std::vector<size_t> generation_order(const RolloutDump& dump);

// The step at a glance: group counts (generated, kept by dynamic sampling,
// trained; by outcome and by round), accuracy (all responses and trained
// ones), score and reward, response length (mean, p50, p90, max; nearest-rank
// percentiles), a score histogram (each distinct value when there are at
// most 10, else 10 equal bins), finish reasons, and accuracy per data
// source. Ends with a newline.
std::string dump_summary(const RolloutDump& dump);

// k samples in full (prompt, response, extracted answer, ground truth,
// score, reward, advantage, finish reason), taken round-robin over the
// groups in generation order - sample 0 of every group, then sample 1, ...
// - so k <= groups shows k different prompts. k larger than the number of
// responses shows them all.
std::string dump_samples(const RolloutDump& dump, int64_t k);

// One JSON object per response (with its prompt's fields), in generation
// order. Fields: step, uid (unsigned), round, position, trained, outcome,
// data_source, prompt, prompt_ids, ground_truth, sample_index, response,
// response_ids, pred, finish_reason, length, score, acc, reward, in_loss,
// advantage (null when not trained), old_logprobs (null when not trained),
// sampling_logprobs (the rollout engine's; null when the dump has none).
// Invalid UTF-8 in texts (a response cut inside a character) becomes U+FFFD.
void write_dump_jsonl(const RolloutDump& dump, std::ostream& out);

}  // namespace dapo::dump
