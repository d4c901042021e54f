// The Jinja parser: jinja2 3.1's parser.py (precedence, tuples, filters,
// tests, subscripts, call arguments, statements) for the statements chat
// templates use: if/elif/else, for (with else, an if filter), set (names,
// tuples, namespace attributes, blocks), macro, call, filter, with, print,
// break/continue (loopcontrols) and transformers' generation tag.
// block/extends/include/import/from/autoescape and recursive loops are
// refused with a message that says so. As jinja2 does when it compiles a
// template, an unknown filter or test is an error here, not at render time.
#include <algorithm>
#include <set>

#include "jinja_ast.h"

namespace dapo::data::jinja {
namespace {

constexpr int kMaxNesting = 200;
// Operators in one chain (a + b + ... ; a ~ b ~ ...): the tree of a chain is
// as deep as it is long, and evaluating or freeing it recurses that deep.
constexpr int kMaxChain = 1000;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::vector<StmtP> parse_template() { return subparse({}); }

 private:
  std::vector<Token> t_;
  size_t k_ = 0;
  int depth_ = 0;
  std::vector<std::string> tag_stack_;
  std::vector<std::vector<std::string>> end_stack_;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail("the template nests expressions more than " + std::to_string(kMaxNesting) + " deep");
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[k_]; }
  const Token& look() const { return t_[std::min(k_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& tok = t_[k_];
    if (k_ + 1 < t_.size()) ++k_;
    return tok;
  }

  [[noreturn]] void fail(const std::string& message) const { throw SyntaxError(message, cur().pos); }
  [[noreturn]] void fail(const std::string& message, Pos pos) const { throw SyntaxError(message, pos); }

  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case Tok::data: return "template data / text";
      case Tok::variable_begin: return "begin of print statement";
      case Tok::variable_end: return "end of print statement";
      case Tok::block_begin: return "begin of statement block";
      case Tok::block_end: return "end of statement block";
      case Tok::name:
      case Tok::op: return tok.text;
      case Tok::string: return "string";
      case Tok::integer: return "integer";
      case Tok::floating: return "float";
      case Tok::eof: return "end of template";
    }
    return "token";
  }

  bool is_name(const char* v) const { return cur().type == Tok::name && cur().text == v; }
  bool is_op(const char* v) const { return cur().type == Tok::op && cur().text == v; }
  bool skip_name(const char* v) {
    if (!is_name(v)) return false;
    next();
    return true;
  }
  bool skip_op(const char* v) {
    if (!is_op(v)) return false;
    next();
    return true;
  }
  void expect_op(const char* v) {
    if (!is_op(v)) fail(std::string("expected token '") + v + "', got '" + describe(cur()) + "'");
    next();
  }
  void expect_name(const char* v) {
    if (!is_name(v)) fail(std::string("expected token '") + v + "', got '" + describe(cur()) + "'");
    next();
  }
  const Token& expect_any_name() {
    if (cur().type != Tok::name) fail("expected token 'name', got '" + describe(cur()) + "'");
    return next();
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(std::string("expected token '") + what + "', got '" + describe(cur()) + "'");
    next();
  }
  bool at_end_tokens(const std::vector<std::string>& ends) const {
    return cur().type == Tok::name && std::find(ends.begin(), ends.end(), cur().text) != ends.end();
  }

  void chain_step(int& n) const {
    if (++n > kMaxChain) fail("an expression chains more than " + std::to_string(kMaxChain) + " operators");
  }

  static ExprP make(EK kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- templates and statements ----------------------------------------------------

  std::vector<StmtP> subparse(const std::vector<std::string>& end_tokens) {
    std::vector<StmtP> body;
    StmtP out;
    auto flush = [&] {
      if (out) body.push_back(std::move(out));
    };
    auto piece = [&](Pos pos) -> Stmt& {
      if (!out) {
        out = std::make_unique<Stmt>();
        out->kind = SK::output;
        out->pos = pos;
      }
      return *out;
    };
    if (!end_tokens.empty()) end_stack_.push_back(end_tokens);
    while (cur().type != Tok::eof) {
      const Token& tok = cur();
      if (tok.type == Tok::data) {
        piece(tok.pos).output.push_back({tok.text, nullptr});
        next();
      } else if (tok.type == Tok::variable_begin) {
        const Pos pos = tok.pos;
        next();
        ExprP e = parse_tuple(false, true, {}, false);
        expect(Tok::variable_end, "end of print statement");
        piece(pos).output.push_back({{}, std::move(e)});
      } else if (tok.type == Tok::block_begin) {
        flush();
        next();
        if (!end_tokens.empty() && at_end_tokens(end_tokens)) {
          end_stack_.pop_back();
          return body;
        }
        body.push_back(parse_statement());
        expect(Tok::block_end, "end of statement block");
      } else {
        fail("unexpected '" + describe(tok) + "'");
      }
    }
    flush();
    if (!end_tokens.empty()) end_stack_.pop_back();
    return body;
  }

  std::vector<StmtP> parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
    skip_op(":");
    expect(Tok::block_end, "end of statement block");
    std::vector<StmtP> result = subparse(end_tokens);
    if (cur().type == Tok::eof) fail_eof(end_tokens);
    if (drop_needle) next();
    return result;
  }

  [[noreturn]] void fail_eof(const std::vector<std::string>& ends) const {
    std::string msg = "Unexpected end of template.";
    std::vector<std::string> expected;
    for (const auto& e : end_stack_)
      for (const auto& x : e) expected.push_back("'" + x + "'");
    for (const auto& x : ends) expected.push_back("'" + x + "'");
    if (!expected.empty()) {
      msg += " Jinja was looking for the following tags: ";
      for (size_t k = 0; k < expected.size(); ++k) msg += (k ? " or " : "") + expected[k];
      msg += ".";
    }
    if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
    throw SyntaxError(msg, cur().pos);
  }

  StmtP stmt(SK kind, Pos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  StmtP parse_statement() {
    DepthGuard guard(*this);
    const Token& tok = cur();
    if (tok.type != Tok::name) fail("tag name expected");
    const std::string name = tok.text;
    const Pos pos = tok.pos;
    tag_stack_.push_back(name);
    struct Pop {
      std::vector<std::string>& s;
      ~Pop() { s.pop_back(); }
    } pop{tag_stack_};
    if (name == "for") return parse_for();
    if (name == "if") return parse_if();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with();
    if (name == "print") {
      next();
      StmtP s = stmt(SK::output, pos);
      while (cur().type != Tok::block_end) {
        if (!s->output.empty()) expect_op(",");
        s->output.push_back({{}, parse_expression(true)});
      }
      return s;
    }
    if (name == "break" || name == "continue") {
      next();
      bool in_loop = false;
      for (const auto& t : tag_stack_)
        if (t == "for") in_loop = true;
      if (!in_loop) fail("'" + name + "' outside of a loop", pos);  // jinja2 checks this when compiling
      return stmt(name == "break" ? SK::break_ : SK::continue_, pos);
    }
    if (name == "generation") {
      next();
      StmtP s = stmt(SK::scope, pos);
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    static const std::set<std::string> unsupported = {"block", "extends", "include", "import", "from", "autoescape",
                                                      "raw", "do", "trans", "pluralize", "debug"};
    if (unsupported.count(name))
      fail("the tag '" + name + "' is not supported by dapo's Jinja subset (chat templates do not need it)", pos);
    std::string msg = "Encountered unknown tag '" + name + "'.";
    if (!end_stack_.empty()) {
      msg += " Jinja was looking for the following tags: ";
      const auto& e = end_stack_.back();
      for (size_t k = 0; k < e.size(); ++k) msg += (k ? " or '" : "'") + e[k] + "'";
      msg += ".";
    }
    fail(msg, pos);
  }

  StmtP parse_for() {
    const Pos pos = cur().pos;
    next();
    StmtP s = stmt(SK::for_, pos);
    s->target = parse_assign_target(true, false, {"in"}, false);
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported by dapo's Jinja subset");
    s->body = parse_statements({"endfor", "else"}, false);
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtP parse_if() {
    const Pos pos = cur().pos;
    next();
    StmtP result = stmt(SK::if_, pos);
    Stmt* node = result.get();
    while (true) {
      node->expr = parse_tuple(false, false, {}, false);
      node->body = parse_statements({"elif", "else", "endif"}, false);
      const Token& tok = next();
      if (tok.text == "elif") {
        StmtP elif = stmt(SK::if_, cur().pos);
        Stmt* raw = elif.get();
        node->else_body.push_back(std::move(elif));
        node = raw;
        continue;
      }
      if (tok.text == "else") node->else_body = parse_statements({"endif"}, true);
      break;
    }
    return result;
  }

  StmtP parse_set() {
    const Pos pos = cur().pos;
    next();
    ExprP target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      StmtP s = stmt(SK::set, pos);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    StmtP s = stmt(SK::set_block, pos);
    s->target = std::move(target);
    s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      s.params.push_back(expect_any_name().text);
      if (skip_op("=")) {
        s.defaults.push_back(parse_expression(true));
      } else if (!s.defaults.empty()) {
        fail("non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  StmtP parse_macro() {
    const Pos pos = cur().pos;
    next();
    StmtP s = stmt(SK::macro, pos);
    s->name = expect_any_name().text;
    parse_signature(*s);
    s->body = parse_statements({"endmacro"}, true);
    return s;
  }

  StmtP parse_call_block() {
    const Pos pos = cur().pos;
    next();
    StmtP s = stmt(SK::call_block, pos);
    if (is_op("(")) parse_signature(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != EK::call) fail("expected call", pos);
    s->body = parse_statements({"endcall"}, true);
    return s;
  }

  StmtP parse_filter_block() {
    const Pos pos = cur().pos;
    next();
    StmtP s = stmt(SK::filter_block, pos);
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtP parse_with() {
    const Pos pos = cur().pos;
    next();
    StmtP s = stmt(SK::with, pos);
    while (cur().type != Tok::block_end) {
      if (!s->assigns.empty()) expect_op(",");
      ExprP target = parse_assign_target(true, false, {}, false);
      expect_op("=");
      s->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  ExprP parse_assign_target(bool with_tuple, bool name_only, const std::vector<std::string>& extra_end,
                            bool with_namespace) {
    ExprP target;
    if (name_only) {
      const Token& tok = expect_any_name();
      target = make(EK::name, tok.pos);
      target->name = tok.text;
    } else if (with_tuple) {
      target = parse_tuple(true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    check_assignable(*target);
    return target;
  }

  void check_assignable(const Expr& e) const {
    if (e.kind == EK::name) {
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" ||
          e.name == "None")
        fail("can't assign to 'const'", e.pos);
      return;
    }
    if (e.kind == EK::nsref) return;
    if (e.kind == EK::tuple) {
      for (const auto& item : e.items) check_assignable(*item);
      return;
    }
    const char* what = e.kind == EK::constant ? "const" : e.kind == EK::getattr ? "getattr" : "expression";
    fail(std::string("can't assign to '") + what + "'", e.pos);
  }

  // ---- expressions ------------------------------------------------------------------

  ExprP parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprP parse_condexpr() {
    DepthGuard guard(*this);
    Pos pos = cur().pos;
    ExprP expr1 = parse_or();
    int chain = 0;
    while (skip_name("if")) {
      chain_step(chain);
      ExprP expr2 = parse_or();
      ExprP expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      ExprP c = make(EK::cond, pos);
      c->a = std::move(expr2);
      c->b = std::move(expr1);
      c->c = std::move(expr3);
      expr1 = std::move(c);
      pos = cur().pos;
    }
    return expr1;
  }

  ExprP binary(EK kind, ExprP left, ExprP right, Pos pos, std::string name = {}) {
    ExprP e = make(kind, pos);
    e->a = std::move(left);
    e->b = std::move(right);
    e->name = std::move(name);
    return e;
  }

  ExprP parse_or() {
    Pos pos = cur().pos;
    ExprP left = parse_and();
    int chain = 0;
    while (skip_name("or")) {
      chain_step(chain);
      ExprP right = parse_and();
      left = binary(EK::or_, std::move(left), std::move(right), pos);
      pos = cur().pos;
    }
    return left;
  }

  ExprP parse_and() {
    Pos pos = cur().pos;
    ExprP left = parse_not();
    int chain = 0;
    while (skip_name("and")) {
      chain_step(chain);
      ExprP right = parse_not();
      left = binary(EK::and_, std::move(left), std::move(right), pos);
      pos = cur().pos;
    }
    return left;
  }

  ExprP parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const Pos pos = next().pos;
      ExprP e = make(EK::not_, pos);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprP parse_compare() {
    Pos pos = cur().pos;
    ExprP expr = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprP> operands;
    int chain = 0;
    while (true) {
      chain_step(chain);
      static const std::pair<const char*, const char*> cmp[] = {{"==", "eq"}, {"!=", "ne"}, {"<", "lt"},
                                                                {"<=", "lteq"}, {">", "gt"}, {">=", "gteq"}};
      const char* op = nullptr;
      if (cur().type == Tok::op)
        for (const auto& [text, name] : cmp)
          if (cur().text == text) op = name;
      if (op) {
        next();
        ops.push_back(op);
        operands.push_back(parse_math1());
      } else if (skip_name("in")) {
        ops.push_back("in");
        operands.push_back(parse_math1());
      } else if (is_name("not") && look().type == Tok::name && look().text == "in") {
        next();
        next();
        ops.push_back("notin");
        operands.push_back(parse_math1());
      } else {
        break;
      }
      pos = cur().pos;
    }
    if (ops.empty()) return expr;
    ExprP e = make(EK::compare, pos);
    e->a = std::move(expr);
    e->ops = std::move(ops);
    e->items = std::move(operands);
    return e;
  }

  ExprP parse_math1() {
    Pos pos = cur().pos;
    ExprP left = parse_concat();
    int chain = 0;
    while (is_op("+") || is_op("-")) {
      chain_step(chain);
      const std::string op = next().text;
      ExprP right = parse_concat();
      left = binary(EK::binop, std::move(left), std::move(right), pos, op);
      pos = cur().pos;
    }
    return left;
  }

  ExprP parse_concat() {
    const Pos pos = cur().pos;
    std::vector<ExprP> args;
    args.push_back(parse_math2());
    int chain = 0;
    while (skip_op("~")) {
      chain_step(chain);
      args.push_back(parse_math2());
    }
    if (args.size() == 1) return std::move(args[0]);
    ExprP e = make(EK::concat, pos);
    e->items = std::move(args);
    return e;
  }

  ExprP parse_math2() {
    Pos pos = cur().pos;
    ExprP left = parse_pow();
    int chain = 0;
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain_step(chain);
      const std::string op = next().text;
      ExprP right = parse_pow();
      left = binary(EK::binop, std::move(left), std::move(right), pos, op);
      pos = cur().pos;
    }
    return left;
  }

  ExprP parse_pow() {
    Pos pos = cur().pos;
    ExprP left = parse_unary(true);
    int chain = 0;
    while (skip_op("**")) {
      chain_step(chain);
      ExprP right = parse_unary(true);
      left = binary(EK::binop, std::move(left), std::move(right), pos, "**");
      pos = cur().pos;
    }
    return left;
  }

  ExprP parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Pos pos = cur().pos;
    ExprP node;
    if (is_op("-") || is_op("+")) {
      const bool neg = next().text == "-";
      node = make(neg ? EK::neg : EK::pos, pos);
      node->a = parse_unary(false);
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprP parse_primary(bool with_namespace) {
    DepthGuard guard(*this);
    const Token& tok = cur();
    const Pos pos = tok.pos;
    if (tok.type == Tok::name) {
      const std::string name = next().text;
      if (name == "true" || name == "True" || name == "false" || name == "False") {
        ExprP e = make(EK::constant, pos);
        e->value = Value::boolean(name == "true" || name == "True");
        return e;
      }
      if (name == "none" || name == "None") {
        ExprP e = make(EK::constant, pos);
        e->value = Value::none();
        return e;
      }
      if (with_namespace && is_op(".")) {
        next();
        ExprP e = make(EK::nsref, pos);
        e->name = name;
        e->attr = expect_any_name().text;
        return e;
      }
      ExprP e = make(EK::name, pos);
      e->name = name;
      return e;
    }
    if (tok.type == Tok::string) {
      std::string buf;
      while (cur().type == Tok::string) buf += next().text;
      ExprP e = make(EK::constant, pos);
      e->value = Value::string(std::move(buf));
      return e;
    }
    if (tok.type == Tok::integer || tok.type == Tok::floating) {
      const Token& t = next();
      ExprP e = make(EK::constant, pos);
      e->value = t.type == Tok::integer ? Value::integer(t.ival) : Value::floating(t.fval);
      return e;
    }
    if (is_op("(")) {
      next();
      ExprP e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    fail("unexpected '" + describe(tok) + "'");
  }

  ExprP parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                    bool explicit_parentheses, bool with_namespace = false) {
    Pos pos = cur().pos;
    std::vector<ExprP> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
      pos = cur().pos;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail("Expected an expression, got '" + describe(cur()) + "'");
    }
    ExprP e = make(EK::tuple, pos);
    e->items = std::move(args);
    return e;
  }

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    if (cur().type == Tok::variable_end || cur().type == Tok::block_end || is_op(")")) return true;
    return at_end_tokens(extra_end);
  }

  ExprP parse_list() {
    const Pos pos = cur().pos;
    expect_op("[");
    ExprP e = make(EK::list, pos);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprP parse_dict() {
    const Pos pos = cur().pos;
    expect_op("{");
    ExprP e = make(EK::dict, pos);
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->items.push_back(parse_expression(true));
      expect_op(":");
      e->items.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprP parse_postfix(ExprP node) {
    int chain = 0;
    while (true) {
      chain_step(chain);
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprP parse_filter_expr(ExprP node) {
    int chain = 0;
    while (true) {
      chain_step(chain);
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprP parse_subscript(ExprP node) {
    DepthGuard guard(*this);
    const Token& tok = next();
    const Pos pos = tok.pos;
    if (tok.text == ".") {
      const Token& attr = next();
      if (attr.type == Tok::name) {
        ExprP e = make(EK::getattr, pos);
        e->a = std::move(node);
        e->name = attr.text;
        return e;
      }
      if (attr.type != Tok::integer) fail("expected name or number", attr.pos);
      ExprP e = make(EK::getitem, pos);
      e->a = std::move(node);
      e->b = make(EK::constant, attr.pos);
      e->b->value = Value::integer(attr.ival);
      return e;
    }
    std::vector<ExprP> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprP e = make(EK::getitem, pos);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = make(EK::tuple, pos);
      e->b->items = std::move(args);
    }
    return e;
  }

  ExprP parse_subscribed() {
    const Pos pos = cur().pos;
    std::vector<ExprP> args;
    if (is_op(":")) {
      next();
      args.push_back(nullptr);
    } else {
      ExprP node = parse_expression(true);
      if (!is_op(":")) return node;
      next();
      args.push_back(std::move(node));
    }
    if (is_op(":")) {
      args.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      args.push_back(parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(","))
        args.push_back(parse_expression(true));
      else
        args.push_back(nullptr);
    } else {
      args.push_back(nullptr);
    }
    ExprP e = make(EK::slice, pos);
    e->items = std::move(args);
    return e;
  }

  void parse_call_args(Expr& e) {
    const Pos pos = cur().pos;
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", pos);
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!e.dyn_args && !e.dyn_kwargs);
        next();
        e.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!e.dyn_kwargs);
        next();
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::name && look().type == Tok::op && look().text == "=") {
        ensure(!e.dyn_kwargs);
        const std::string key = next().text;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprP parse_call(ExprP node) {
    DepthGuard guard(*this);
    ExprP e = make(EK::call, node->pos);  // errors point at the callee
    e->a = std::move(node);
    parse_call_args(*e);
    return e;
  }

  ExprP parse_filter(ExprP node, bool start_inline) {
    int chain = 0;
    while (is_op("|") || start_inline) {
      chain_step(chain);
      DepthGuard guard(*this);
      if (!start_inline) next();
      const Token& tok = expect_any_name();
      std::string name = tok.text;
      const Pos pos = tok.pos;
      while (is_op(".")) {
        next();
        name += "." + expect_any_name().text;
      }
      ExprP e = make(EK::filter, pos);
      e->a = std::move(node);
      e->name = name;
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
      start_inline = false;
    }
    return node;
  }

  ExprP parse_test(ExprP node) {
    DepthGuard guard(*this);
    const Pos pos = next().pos;
    const bool negated = skip_name("not");
    const Token& tok = expect_any_name();
    std::string name = tok.text;
    while (is_op(".")) {
      next();
      name += "." + expect_any_name().text;
    }
    ExprP e = make(EK::test, tok.pos);
    e->a = std::move(node);
    e->name = name;
    const Tok t = cur().type;
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t == Tok::name || t == Tok::string || t == Tok::integer || t == Tok::floating || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      ExprP arg = parse_primary(false);
      e->items.push_back(parse_postfix(std::move(arg)));
    }
    if (!negated) return e;
    ExprP n = make(EK::not_, pos);
    n->a = std::move(e);
    return n;
  }
};

// jinja2's compiler checks that every filter and test exists, except in the
// "soft" frames of if statements and conditional expressions, where a
// missing one is an error only when it runs (jinja2 >= 3.0). The same walk
// here: names this subset lacks fail the parse outside those frames.
class NameCheck {
 public:
  void stmts(const std::vector<StmtP>& body, bool soft) {
    for (const StmtP& s : body) stmt(*s, soft);
  }

 private:
  static void fail_name(const Expr& e) {
    const bool filter = e.kind == EK::filter;
    if (filter ? is_jinja_filter(e.name) : is_jinja_test(e.name))
      throw SyntaxError(std::string("the ") + (filter ? "filter" : "test") + " '" + e.name +
                            "' is not supported by dapo's Jinja subset",
                        e.pos);
    throw SyntaxError(std::string("No ") + (filter ? "filter" : "test") + " named '" + e.name + "'.", e.pos);
  }

  void expr(const Expr* e, bool soft) {
    if (!e) return;
    if (e->kind == EK::cond) soft = true;
    if (!soft && ((e->kind == EK::filter && !is_supported_filter(e->name)) ||
                  (e->kind == EK::test && !is_supported_test(e->name))))
      fail_name(*e);
    expr(e->a.get(), soft);
    expr(e->b.get(), soft);
    expr(e->c.get(), soft);
    for (const auto& item : e->items) expr(item.get(), soft);
    for (const auto& kw : e->kwargs) expr(kw.second.get(), soft);
    expr(e->dyn_args.get(), soft);
    expr(e->dyn_kwargs.get(), soft);
  }

  void stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case SK::output:
        for (const OutputPiece& p : s.output) expr(p.expr.get(), soft);
        return;
      case SK::if_:
        expr(s.expr.get(), true);
        stmts(s.body, true);
        stmts(s.else_body, true);
        return;
      case SK::for_:
        expr(s.expr.get(), soft);
        expr(s.target.get(), false);
        expr(s.cond.get(), false);
        stmts(s.body, false);
        stmts(s.else_body, false);
        return;
      case SK::set:
        expr(s.expr.get(), soft);
        return;
      case SK::call_block:
        expr(s.expr.get(), soft);
        for (const auto& d : s.defaults) expr(d.get(), false);
        stmts(s.body, false);
        return;
      case SK::with:
        for (const auto& [target, value] : s.assigns) expr(value.get(), soft);
        stmts(s.body, false);
        return;
      default:  // set block, macro, filter block, generation: frames of their own
        expr(s.filter.get(), false);
        for (const auto& d : s.defaults) expr(d.get(), false);
        stmts(s.body, false);
        return;
    }
  }
};

}  // namespace

std::vector<StmtP> parse(std::vector<Token> tokens) {
  std::vector<StmtP> body = Parser(std::move(tokens)).parse_template();
  NameCheck().stmts(body, false);
  return body;
}

}  // namespace dapo::data::jinja
