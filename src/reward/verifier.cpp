// verify_math: extraction + equivalence, scored as DAPO does (+1 / -1).
#include "dapo/reward/verifier.h"

#include "dapo/reward/equivalence.h"
#include "dapo/reward/extract.h"

namespace dapo::reward {

Verdict verify_math(std::string_view response, std::string_view ground_truth) {
  Verdict v;
  ExtractedAnswer answer = extract_answer(response);
  if (answer.source == AnswerSource::none) return v;
  v.acc = answers_equivalent(answer.text, ground_truth);
  v.score = v.acc ? 1.0 : -1.0;
  v.pred = std::move(answer.text);
  return v;
}

}  // namespace dapo::reward
