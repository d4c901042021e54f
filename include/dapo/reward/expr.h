// The answer grammar: a recursive-descent parser from normalised answer text
// (normalize.h) to a small syntax tree, and its canonical printed form.
//
// What it reads (LaTeX and plain text alike):
//  - numbers: integers of any length, decimals, 1.5e-3 (a digit right after
//    'e' makes scientific notation: 2e-3 is 0.002, not 2e - 3), repeating
//    decimals 0.1\overline{6}; mixed numbers 3\frac{1}{2} (an integer written
//    right before a fraction of two integers is 3 + 1/2, as in competition
//    answers);
//  - + - * / ^ (right-associative; 2^10 takes the whole number, 2^-3 a signed
//    exponent), postfix !, implicit multiplication (2x, 2\pi r, (a)(b));
//    1/2x is (1/2) x; two numbers side by side ("2 3") are not a product and
//    fail;
//  - \frac \sqrt \sqrt[n] \binom with braced or single-character arguments
//    (\frac12), | | absolute values, \pm and \mp;
//  - functions \sin ... \tanh, \ln, \log (base 10; \log_b for base b), \exp,
//    also without the backslash; \sin^2 x; \sin 2x means sin(2x);
//  - constants \pi, e (also "pi"); \infty; variables: single letters (with subscripts
//    x_1, a_{10}) and Greek letters. A run of 2-3 letters is a product of
//    variables (xy); 4 or more letters make a word (text), and the words
//    "or" / "and" separate candidate answers;
//  - relations = < > <= >= \ne \in (chains too), lists (a, b), tuples and
//    intervals with their bracket kinds ((a, b], [a, b)), sets \{a, b\},
//    \emptyset, unions with \cup.
// Anything else - an unknown command, unbalanced brackets, "2 3", "..." -
// is not an expression: parse_answer returns false and the answer can only
// match by its text. Guards: input of at most kMaxParseBytes, kMaxNodes
// nodes and kMaxDepth nested levels, so every call is bounded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dapo::reward {

enum class NodeKind : uint8_t {
  number,      // text: digits with optional '.', repeat: repeating digits, exp10: scientific exponent
  variable,    // text: its name ("x", "x_1", "\alpha")
  pi,
  euler,       // e
  infinity,
  word,        // text: a word that is not an expression
  neg,         // -a
  add,         // a + b
  sub,         // a - b
  mul,         // a * b
  div,         // a / b
  pow,         // a ^ b
  factorial,   // a!
  root,        // a: radicand, b: index (-1: square root)
  func,        // op: Func, a: argument, b: base of \log_b (-1: none)
  abs,         // |a|
  binom,       // binom(a, b)
  plus_minus,  // a +- b; a == -1: +-b; op: 1 for \mp
  relation,    // operands kids[first..first+count), ops ast.ops[b .. b+count-1)
  tuple,       // open/close brackets, elements in kids: (a, b), [a, b), ...
  set,         // \{ ... \} (count 0: the empty set)
  list,        // bare list: a, b or "a or b"
  set_union,   // a \cup b \cup ...
};

enum class Func : uint8_t { sin, cos, tan, cot, sec, csc, arcsin, arccos, arctan, sinh, cosh, tanh, ln, log, exp };
enum class RelOp : uint8_t { eq, ne, lt, le, gt, ge, in };

struct Node {
  NodeKind kind = NodeKind::number;
  uint8_t op = 0;
  char open = 0, close = 0;
  bool approx = false;  // a number written with >= 15 significant digits
  bool paren = false;   // a lone expression written in ( ): the argument of f(3)
  int32_t a = -1, b = -1;
  uint32_t first = 0, count = 0;  // children in Ast::kids
  int32_t exp10 = 0;
  std::string_view text, repeat;  // views into Ast::source
};

// Nodes view into `source`, so an Ast stays where it was parsed: not copyable
// or movable (a moved short string would move its characters).
struct Ast {
  Ast() = default;
  Ast(const Ast&) = delete;
  Ast& operator=(const Ast&) = delete;

  std::string source;  // the text the views of the nodes point into
  std::vector<Node> nodes;
  std::vector<int32_t> kids;
  std::vector<RelOp> ops;
  int32_t root = -1;

  const Node& at(int32_t i) const { return nodes[size_t(i)]; }
  int32_t kid(const Node& n, uint32_t k) const { return kids[n.first + k]; }
};

inline constexpr size_t kMaxParseBytes = 8192;
inline constexpr size_t kMaxNodes = 4096;
inline constexpr int kMaxDepth = 200;  // recursion levels (a parenthesis costs two)
inline constexpr size_t kMaxLiteralDigits = 1200;  // longer numbers compare by their digits only

// Parses into *ast (its previous content is dropped); false when the text is
// not an expression of the grammar (then ast->root is -1).
bool parse_answer(std::string_view normalized, Ast* ast);

// A printed form in which equal trees print equally: numbers without
// leading/trailing zeros, operators prefix with parentheses.
std::string canonical(const Ast& ast, int32_t node);

// The name of a variable as compared: its text without braces ("x_{1}" -> "x_1").
std::string variable_name(std::string_view text);

// Variable names in the subtree, sorted, without duplicates.
std::vector<std::string> collect_variables(const Ast& ast, int32_t node);

}  // namespace dapo::reward
