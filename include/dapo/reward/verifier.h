// The rule-based math verifier of DAPO: extract the answer a response commits
// to (extract.h), normalise it and the reference (normalize.h), and decide
// equivalence (equivalence.h). Score +1 when equal, -1 otherwise - also when
// nothing was extracted - as in the DAPO paper.
//
// Pure function of its inputs, thread-safe, bounded in time and memory for
// any input (see the guards in expr.h and evaluate.h).
#pragma once

#include <string>
#include <string_view>

namespace dapo::reward {

struct Verdict {
  double score = -1.0;  // +1 correct, -1 wrong
  bool acc = false;     // score > 0
  std::string pred;     // the extracted answer as written (trimmed); "" when none
};

Verdict verify_math(std::string_view response, std::string_view ground_truth);

}  // namespace dapo::reward
