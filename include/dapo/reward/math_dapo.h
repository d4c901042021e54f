// The DAPO paper's own reward: verl's verl/utils/reward_score/math_dapo.py
// compute_score(solution_str, ground_truth) with its defaults
// (strict_box_verify=False, pause_tokens_index=None), reproduced exactly -
// quirks included - so that rewards, and so runs, compare with verl's.
// tests/fixtures/reward/math_dapo/ holds cases scored by verl's function.
//
// Contract (what verl does, which is not always what one would guess):
//  - Only the last 300 characters of the response are read, counted in
//    Unicode code points as Python slices str, not in bytes.
//  - The answer is the last match of (?i)Answer\s*:\s*([^\n]+) in that
//    window, with Python's Unicode-aware \s and case folding (U+017F LONG S
//    matches 's'); \boxed{} is not looked for. `\s*` after the colon may
//    cross newlines, and "Answer:" followed only by blanks yields the last
//    blank that is not '\n' as the answer (so pred is "").
//  - No match: the answer is the literal "[INVALID]", normalised like any
//    other - pred is then "[INVALID]", and a ground truth that normalises to
//    "[INVALID]" scores +1.
//  - Answer and ground truth go through the same normalize_final_answer
//    (text after the last '=', fixed substitution and removal lists applied
//    in order, one regex pass each, '$' dropped, commas dropped only when the
//    rest is all str.isdigit() digits, str.strip()) and are compared as
//    strings: +1 and acc when equal, -1 otherwise. pred is the normalised
//    answer. '\r' (CRLF text) is not stripped before the digit test, so
//    "1,000\r" stays "1,000".
//  - Unicode tables (whitespace, isdigit) are those of Python 3.11
//    (Unicode 14.0), the version the fixtures were made with.
//  - Invalid UTF-8: each byte that is not part of a valid (shortest-form,
//    non-surrogate, <= U+10FFFF) sequence is one character, as Python's
//    errors="surrogateescape" decoding gives; such a character is neither
//    blank, digit nor letter, and stays one character even when the
//    normaliser's splicing puts it next to bytes it would form a valid
//    sequence with. pred carries those bytes through unchanged.
//
// Pure, thread-safe, linear time in the input (hand-written matching, no
// regex engine, so no backtracking blow-up).
#pragma once

#include <string>
#include <string_view>

#include "dapo/reward/verifier.h"

namespace dapo::reward {

// Verdict.pred is verl's "pred": the normalised answer, "[INVALID]" when the
// response has no "Answer:" line in its last 300 characters.
Verdict verify_math_dapo(std::string_view response, std::string_view ground_truth);

namespace math_dapo_detail {
// The steps, for tests.
std::string last_chars(std::string_view text, std::size_t n);  // text[-n:]
std::string find_answer(std::string_view window);  // the last match's group, or "[INVALID]"
std::string normalize_final_answer(std::string_view answer);
bool is_space(char32_t c);  // Python str.isspace() / re \s
bool is_digit(char32_t c);  // Python str.isdigit()
}  // namespace math_dapo_detail

}  // namespace dapo::reward
