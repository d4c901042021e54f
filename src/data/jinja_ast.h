// Tokens and syntax tree of dapo's Jinja interpreter (internal to
// src/data/jinja_*.cpp). The lexer and the parser follow jinja2 3.1's
// (lexer.py, parser.py) rule by rule, with the options transformers sets:
// trim_blocks, lstrip_blocks, keep_trailing_newline off, the loopcontrols
// extension (break, continue) and its own {% generation %} tag.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "jinja_value.h"

namespace dapo::data::jinja {

// Line and column (1-based; the column counts characters) in the template.
struct Pos {
  int line = 1;
  int col = 1;
};

// A template the lexer or parser refuses (jinja2's TemplateSyntaxError, or
// syntax this subset does not take).
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(const std::string& message, Pos pos) : std::runtime_error(message), pos(pos) {}
  Pos pos;
};

enum class Tok : uint8_t {
  data,
  variable_begin,
  variable_end,
  block_begin,
  block_end,
  name,
  string,
  integer,
  floating,
  op,  // text: "+", "//", "==", "(", ...
  eof,
};

struct Token {
  Tok type = Tok::eof;
  std::string text;  // data, name, decoded string literal, operator
  int64_t ival = 0;
  double fval = 0.0;
  Pos pos;
};

// The tokens of `source` (newlines normalised to \n, one trailing newline
// dropped, whitespace control applied), ending with an eof token.
std::vector<Token> lex(std::string_view source);

// ---- syntax tree ------------------------------------------------------------------

struct Expr;
struct Stmt;
using ExprP = std::unique_ptr<Expr>;
using StmtP = std::unique_ptr<Stmt>;

enum class EK : uint8_t {
  constant,  // value
  name,      // name
  nsref,     // name.attr as an assignment target: name, attr in `attr`
  getattr,   // a.name
  getitem,   // a[b]
  slice,     // items: start, stop, step (null when absent)
  list,      // items
  tuple,     // items
  dict,      // items: key, value, key, value, ...
  call,      // a(items..., kwargs..., *dyn_args, **dyn_kwargs)
  filter,    // a | name(items..., kwargs...); a null in a filter block
  test,      // a is name(items..., kwargs...)
  neg,       // -a
  pos,       // +a
  not_,      // not a
  and_,      // a and b
  or_,       // a or b
  binop,     // a name b; name: + - * / // % **
  concat,    // items joined with ~
  compare,   // a ops[0] items[0] ops[1] items[1] ...; ops: eq ne lt lteq gt gteq in notin
  cond,      // b if a else c (c may be null)
};

struct Expr {
  EK kind = EK::constant;
  Pos pos;
  Value value;
  std::string name;
  std::string attr;
  ExprP a, b, c;
  std::vector<ExprP> items;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  ExprP dyn_args, dyn_kwargs;
  std::vector<std::string> ops;
};

enum class SK : uint8_t {
  output,        // pieces: text (expr null) or an expression
  if_,           // expr: test; body; else_body (an elif is an if in else_body)
  for_,          // target in expr [if cond]: body, else_body
  set,           // target = expr
  set_block,     // target (| filter) = body
  macro,         // name(params = defaults): body
  call_block,    // call (a call expression) with caller(params = defaults): body
  filter_block,  // filter (a filter expression with no input): body
  with,          // assigns: target = value, ...; body
  break_,
  continue_,
  scope,         // {% generation %}: body rendered as it is
};

struct OutputPiece {
  std::string text;
  ExprP expr;
};

struct Stmt {
  SK kind = SK::output;
  Pos pos;
  std::vector<OutputPiece> output;
  ExprP expr, target, cond, filter;
  std::vector<StmtP> body, else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // for the last defaults.size() params
  std::vector<std::pair<ExprP, ExprP>> assigns;
};

// The statements of the template. Throws SyntaxError.
std::vector<StmtP> parse(std::vector<Token> tokens);

// Filter and test names (jinja_filters.cpp): those this subset runs, and
// those jinja2 has (for the message of a known but unsupported one).
bool is_supported_filter(std::string_view name);
bool is_jinja_filter(std::string_view name);
bool is_supported_test(std::string_view name);
bool is_jinja_test(std::string_view name);

}  // namespace dapo::data::jinja
