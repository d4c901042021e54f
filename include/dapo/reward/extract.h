// Which answer a response commits to.
//
// Rules (issue #4): the content of the last "Answer:" line (case-insensitive,
// markdown bold and a full-width colon allowed, "The final answer is" and
// "I hope it is correct." trimmed off), else the last \boxed{...} or
// \fbox{...} with balanced braces, else nothing - and nothing is wrong.
// An "Answer:" line is one that starts with the marker (after spaces,
// markdown * _ # > - and the words "Final"/"The"): "the answer: we need..."
// in the reasoning is no commitment. Only when there is no box either does
// a marker in the middle of a line count ("So the answer: 5").
// An "Answer:" line with nothing after the colon does not count (the answer
// then usually follows in a box). A last box whose braces never close (a
// response cut off mid-answer) gives nothing: an earlier box is not the
// final commitment.
//
// Several boxes that end the response together - separated only by spaces,
// punctuation, math delimiters, "or"/"and" - are one answer with several
// candidates: their distinct contents are joined with ", " so that they
// match a reference that lists the same answers and never a single one.
//
// The scan runs from the end of the response (memrchr), so its cost does not
// grow with the reasoning text in front of the answer.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dapo::reward {

enum class AnswerSource { none, answer_line, boxed };

struct ExtractedAnswer {
  AnswerSource source = AnswerSource::none;
  std::string text;     // raw (not normalised); empty when source == none
  int candidates = 0;   // distinct boxed answers in the final group (1 for an answer line)
};

ExtractedAnswer extract_answer(std::string_view response);

// Building blocks, exposed for tests.
// The trimmed content of the last marker that starts its line (any marker
// when `anywhere`); nullopt when there is none or it is empty.
std::optional<std::string_view> last_answer_line(std::string_view response, bool anywhere = false);
std::optional<std::string_view> last_boxed(std::string_view text);            // content of the last box

}  // namespace dapo::reward
