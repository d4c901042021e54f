// Where a response's tokens sit in a packed training sequence, so that the
// per-token loss mask and advantages line up with the model's log-probs.
//
// A packed sequence is prompt (P tokens) followed by response (R tokens),
// L = P + R positions. The model scores next tokens: logprob[t] is
// log pi(tokens[t+1] | tokens[..t]) (targets[t] = tokens[t+1]; the last
// position has no target). The response tokens are tokens[P .. P+R), so
// their log-probs sit at positions [P-1, P+R-1) of the sequence; every
// per-token array of the loss (mask, advantages, old log-probs) uses those
// positions and is zero / unused elsewhere.
#pragma once

#include <cstdint>
#include <span>

namespace dapo::rl {

struct TokenRange {
  int64_t begin = 0;  // first position (within the sequence) whose target is a response token
  int64_t end = 0;    // one past the last
};

// Requires P >= 1 (the first response token needs a predicting position)
// and R >= 0 (DAPO_CHECK).
TokenRange response_positions(int64_t prompt_len, int64_t response_len);

// seq_mask: (P+R), overwritten: 1 at the response positions when in_loss,
// else 0 everywhere (a response masked out by overlong filtering).
void fill_response_mask(int64_t prompt_len, int64_t response_len, bool in_loss, std::span<uint8_t> seq_mask);

// seq_values: (P+R), overwritten: `value` at the response positions, 0
// elsewhere (the response's advantage broadcast over its tokens).
void fill_response_values(int64_t prompt_len, int64_t response_len, float value, std::span<float> seq_values);

// seq_values: (P+R), overwritten: per_token[j] (R values, e.g. the
// old log-probs of the response tokens) at response position j, 0 elsewhere.
void scatter_response_values(int64_t prompt_len, std::span<const float> per_token, std::span<float> seq_values);

}  // namespace dapo::rl
