// Normalisation of an extracted answer (or a ground truth) into the canonical
// text that the expression parser reads and that exact-text comparison uses.
//
// Rules, in order (each is a pure function of its input; nothing is global):
//  0. Control characters (C0 other than whitespace, DEL) are dropped.
//  1. Unicode: U+2212 and dashes -> '-', middle dot / times -> '*', division
//     sign -> '/', superscript and subscript digits -> ^{..} / _{..}, vulgar
//     fractions -> \frac{a}{b}, pi, sqrt, infinity, <=, >=, !=, +-, set
//     symbols and common Greek letters -> their LaTeX commands, degree sign
//     dropped; invalid UTF-8 bytes dropped; then NFKC (full-width digits,
//     no-break spaces, ...).
//  2. LaTeX: $, \( \), \[ \], \left/\right/\big.., spacing commands (\! \, \;
//     \: \quad ~), \displaystyle dropped; \text, \mathrm, \mathbf, \boxed,
//     \fbox, \operatorname, ... unwrapped to their content; \dfrac \tfrac
//     \cfrac -> \frac; \cdot \times -> *, \div -> /; \le \ge -> <= >=;
//     \neq -> \ne; ^\circ and \% and % dropped; \$ dropped.
//  3. Spaces kept only between two letters/digits (they separate words and
//     numbers there), dropped elsewhere.
//  4. Trailing punctuation (. , ; :) dropped; what was counted dropped when
//     something precedes it: words in \text/\mathrm/... at the end right
//     after a number ("5\text{ m}", "12\text{ students}"; not "or", "and",
//     "to", "more", "less", "not"), and bare trailing unit words from a list
//     (cm, meters, dollars, degrees, ...; never a bare single letter, which
//     is a variable).
//  5. Thousands separators when the whole answer is one number
//     (1,000,000 and 1{,}000 and "1 000" -> 1000000 / 1000); "(A)" -> "A".
// The result is ASCII except for characters no rule knows (kept as UTF-8).
#pragma once

#include <string>
#include <string_view>

namespace dapo::reward {

std::string normalize_answer(std::string_view answer);

// The stages, exposed for tests.
std::string normalize_unicode(std::string_view text);  // rule 1
std::string strip_latex(std::string_view text);        // rules 2 and 3
std::string strip_trailing_units(std::string_view text);  // rule 4, units only

}  // namespace dapo::reward
