// Whether a predicted answer equals the reference answer.
//
// After normalisation (normalize.h), in order:
//  1. identical text that cannot hide an undefined value (digits, signs,
//     separators, brackets, words) is equal;
//  2. two answers made of words only compare as text, ignoring case
//     ("Monday" = "monday"; "ab" vs "ba" are words here, not products);
//  3. otherwise both are parsed (expr.h); if either does not parse, only
//     identical text is equal;
//  4. "x = 5", "5 = x" and "x \in S" compare by the side that is not a
//     lone variable, and so does an equation one side of which only names a
//     quantity and the other has no variable. A name: variables and
//     function values (f(3), P(A), P(X=2), g(1, 2): a variable right
//     before its parenthesised arguments) joined by + - / and products,
//     |..| or a known function of one ("m+n = 204", "f(3) = 7",
//     "p+q = \frac{7}{2}", "7 = f(3)", "\sin x = 1/2"). "2x = 6", "x^2 = 4",
//     "f(3)^2 = 49", "f*(3) = 7" and "7 = 7" stay equations (a number, power
//     or explicit product on the named side solves for something else, and
//     numbers name nothing). So a reference written "m+n = 204" also
//     accepts "204", as "x = 5" accepts "5"; a bare list ("1, 2", "1 or 2") and \pm (2 \pm \sqrt{3}
//     is two answers) compare as multisets, so several candidates never
//     match a single reference (a bare list does equal the set of its
//     elements); tuples and intervals compare element by element and their
//     brackets must agree ((1, 2] != (1, 2)); sets and unions compare
//     unordered; relations by operator (x > 1 is 1 < x) and operands;
//  5. expressions without variables compare by value (evaluate.h: exactly,
//     or within a relative 1e-12 when floating point is involved; undefined
//     and unknown values are never equal); expressions with variables are
//     evaluated exactly at six fixed generic rational points (13/7, 29/11,
//     ..., different per variable; the last two negative, so |x| != x) and
//     must agree wherever both are defined, at three points at least. Trees
//     that print identically (canonical()) are equal unless their value is
//     undefined, so 9^{9^{9^9}} (never computed) equals itself but 1/0 does
//     not.
// Decimals: written with fewer than 15 significant digits they are exact
// (0.5 = 1/2 exactly, but 0.333 and 0.3333333333 are not 1/3); with 15 or
// more they are taken as floating-point values (0.333333333333333 = 1/3).
// Known limits: i is a variable, not the imaginary unit; \log is base 10;
// a trigonometric value that is 0 only in exact arithmetic (sin(pi)) does
// not equal 0; degrees are dropped, not converted (30^\circ != \pi/6);
// values beyond kMaxBits (about 1233 digits) are only equal as identical
// trees; "f(x) = 2x+1" (a right side with variables) keeps its left side.
#pragma once

#include <string_view>

namespace dapo::reward {

// Raw answers (normalised here).
bool answers_equivalent(std::string_view pred, std::string_view truth);

// Answers already normalised with normalize_answer().
bool normalized_equivalent(std::string_view pred, std::string_view truth);

}  // namespace dapo::reward
