// Recursive-descent parser of the answer grammar (expr.h) and the canonical
// printer. The parser reads characters directly, not a token list, because
// LaTeX arguments are single characters when unbraced (\frac12).
#include "dapo/reward/expr.h"

#include <algorithm>

namespace dapo::reward {
namespace {

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

struct FuncName {
  std::string_view name;
  Func func;
};
constexpr FuncName kFunctions[] = {
    {"sin", Func::sin},       {"cos", Func::cos},       {"tan", Func::tan},       {"cot", Func::cot},
    {"sec", Func::sec},       {"csc", Func::csc},       {"arcsin", Func::arcsin}, {"arccos", Func::arccos},
    {"arctan", Func::arctan}, {"sinh", Func::sinh},     {"cosh", Func::cosh},     {"tanh", Func::tanh},
    {"ln", Func::ln},         {"log", Func::log},       {"exp", Func::exp},       {"lg", Func::log}};

constexpr std::string_view kGreek[] = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
    "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi",
    "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Upsilon", "Phi", "Psi", "Omega"};

std::optional<Func> function_named(std::string_view name) {
  for (const auto& f : kFunctions)
    if (f.name == name) return f.func;
  return std::nullopt;
}

const char* function_text(Func f) {
  for (const auto& x : kFunctions)
    if (x.func == f) return x.name.data();
  return "?";
}

class Parser {
 public:
  explicit Parser(Ast* ast) : ast_(*ast), s_(ast->source) {}

  bool parse() {
    std::vector<int32_t> items;
    if (!parse_items(&items)) return false;
    skip();
    if (pos_ != s_.size() || failed_) return false;
    ast_.root = items.size() == 1 ? items[0] : nary(NodeKind::list, items);
    return !failed_ && ast_.root >= 0;
  }

 private:
  // RAII depth counter: deep nesting fails instead of exhausting the stack.
  struct Deeper {
    explicit Deeper(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) p->failed_ = true;
    }
    ~Deeper() { --p->depth_; }
    Parser* p;
  };

  int32_t add(Node n) {
    if (failed_ || ast_.nodes.size() >= kMaxNodes) return fail();
    ast_.nodes.push_back(n);
    return int32_t(ast_.nodes.size() - 1);
  }
  int32_t fail() {
    failed_ = true;
    return -1;
  }
  // Children that failed have set failed_; -1 as a child otherwise means "none".
  int32_t make(NodeKind k, int32_t a = -1, int32_t b = -1, uint8_t op = 0) {
    if (failed_) return -1;
    Node n;
    n.kind = k;
    n.a = a;
    n.b = b;
    n.op = op;
    return add(n);
  }
  int32_t nary(NodeKind k, const std::vector<int32_t>& items, char open = 0, char close = 0) {
    Node n;
    n.kind = k;
    n.open = open;
    n.close = close;
    n.first = uint32_t(ast_.kids.size());
    n.count = uint32_t(items.size());
    ast_.kids.insert(ast_.kids.end(), items.begin(), items.end());
    return add(n);
  }

  void skip() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  char peek() {
    skip();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  std::string_view word_at(size_t p) const {
    size_t e = p;
    while (e < s_.size() && is_alpha(s_[e])) ++e;
    return s_.substr(p, e - p);
  }
  // The name of the command at the cursor ("frac" for "\frac"), or "".
  std::string_view peek_command() {
    skip();
    if (pos_ + 1 < s_.size() && s_[pos_] == '\\' && is_alpha(s_[pos_ + 1])) return word_at(pos_ + 1);
    return {};
  }
  bool at_separator_word() {
    skip();
    const std::string_view w = word_at(pos_);
    return w == "or" || w == "and";
  }

  // Items separated by ',', ';', "or", "and".
  bool parse_items(std::vector<int32_t>* items) {
    while (true) {
      const int32_t item = parse_union();
      if (item < 0 || failed_) return false;
      items->push_back(item);
      if (eat(',') || eat(';')) continue;
      if (at_separator_word()) {
        pos_ += word_at(pos_).size();
        continue;
      }
      return true;
    }
  }

  int32_t parse_union() {
    std::vector<int32_t> parts{parse_relation()};
    while (parts.back() >= 0 && peek_command() == "cup") {
      pos_ += 4;
      parts.push_back(parse_relation());
    }
    for (int32_t p : parts)
      if (p < 0) return fail();
    return parts.size() == 1 ? parts[0] : nary(NodeKind::set_union, parts);
  }

  std::optional<RelOp> eat_relop() {
    const char c = peek();
    if (c == '<' || c == '>') {
      const bool or_equal = pos_ + 1 < s_.size() && s_[pos_ + 1] == '=';
      pos_ += or_equal ? 2 : 1;
      return c == '<' ? (or_equal ? RelOp::le : RelOp::lt) : (or_equal ? RelOp::ge : RelOp::gt);
    }
    if (c == '=') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '=') ++pos_;  // "==" is "="
      return RelOp::eq;
    }
    const std::string_view cmd = peek_command();
    if (cmd == "ne" || cmd == "in") {
      pos_ += 1 + cmd.size();
      return cmd == "ne" ? RelOp::ne : RelOp::in;
    }
    return std::nullopt;
  }

  int32_t parse_relation() {
    std::vector<int32_t> operands{parse_sum()};
    if (operands[0] < 0) return fail();
    const uint32_t first_op = uint32_t(ast_.ops.size());
    while (const auto op = eat_relop()) {
      ast_.ops.push_back(*op);
      operands.push_back(parse_sum());
      if (operands.back() < 0) return fail();
    }
    if (operands.size() == 1) return operands[0];
    const int32_t r = nary(NodeKind::relation, operands);
    if (r >= 0) ast_.nodes[size_t(r)].b = int32_t(first_op);
    return r;
  }

  int32_t parse_sum() {
    int32_t left = parse_term();
    while (left >= 0) {
      const char c = peek();
      if (c == '+' || c == '-') {
        ++pos_;
        left = make(c == '+' ? NodeKind::add : NodeKind::sub, left, parse_term());
        continue;
      }
      const std::string_view cmd = peek_command();
      if (cmd == "pm" || cmd == "mp") {
        pos_ += 3;
        left = make(NodeKind::plus_minus, left, parse_term(), cmd == "mp");
        continue;
      }
      break;
    }
    return left;
  }

  // Whether an implicit factor starts at the cursor; a digit there ("2 3",
  // "x 2") makes the whole answer fail: juxtaposed numbers are ambiguous.
  bool implicit_factor_follows() {
    const char c = peek();
    if (is_digit(c) || c == '.') {
      failed_ = true;
      return false;
    }
    if (c == '(' || c == '{') return true;
    if (c == '|') return abs_depth_ == 0;
    if (is_alpha(c)) return !at_separator_word();
    if (c == '\\') {
      const std::string_view cmd = peek_command();
      if (cmd.empty()) return false;
      return cmd == "frac" || cmd == "sqrt" || cmd == "binom" || cmd == "pi" || cmd == "infty" ||
             function_named(cmd) || std::find(std::begin(kGreek), std::end(kGreek), cmd) != std::end(kGreek);
    }
    return false;
  }

  int32_t parse_term() {
    int32_t left = parse_unary();
    while (left >= 0 && !failed_) {
      const char c = peek();
      if (c == '*' || c == '/') {
        ++pos_;
        left = make(c == '*' ? NodeKind::mul : NodeKind::div, left, parse_unary());
      } else if (implicit_factor_follows()) {
        left = make(NodeKind::mul, left, parse_power());
      } else {
        break;
      }
    }
    return failed_ ? -1 : left;
  }

  int32_t parse_unary() {
    Deeper guard(this);
    if (failed_) return fail();
    const char c = peek();
    if (c == '-') {
      ++pos_;
      return make(NodeKind::neg, parse_unary());
    }
    if (c == '+') {
      ++pos_;
      return parse_unary();
    }
    const std::string_view cmd = peek_command();
    if (cmd == "pm" || cmd == "mp") {
      pos_ += 3;
      const int32_t operand = parse_unary();
      if (operand < 0) return fail();
      Node n;
      n.kind = NodeKind::plus_minus;
      n.a = -1;
      n.b = operand;
      n.op = cmd == "mp";
      return add(n);
    }
    return parse_power();
  }

  int32_t parse_power() {
    int32_t base = parse_postfix();
    if (base >= 0 && peek() == '^') {
      ++pos_;
      base = make(NodeKind::pow, base, parse_unary());
    }
    return base;
  }

  int32_t parse_postfix() {
    int32_t p = parse_primary();
    while (p >= 0 && peek() == '!') {
      ++pos_;
      p = make(NodeKind::factorial, p);
    }
    return p;
  }

  int32_t parse_number() {
    const size_t start = pos_;
    size_t digits = 0, significant = 0;
    bool dot = false, leading = true;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (is_digit(c)) {
        ++digits;
        if (c != '0') leading = false;
        if (!leading) ++significant;
      } else if (c == '.' && !dot) {
        dot = true;
      } else {
        break;
      }
      ++pos_;
    }
    Node n;
    n.kind = NodeKind::number;
    n.text = s_.substr(start, pos_ - start);
    if (pos_ + 9 < s_.size() && s_.compare(pos_, 10, "\\overline{") == 0 && dot) {
      const size_t b = pos_ + 10;
      size_t e = b;
      while (e < s_.size() && is_digit(s_[e])) ++e;
      if (e == b || e >= s_.size() || s_[e] != '}') return fail();
      n.repeat = s_.substr(b, e - b);
      pos_ = e + 1;
    } else if (n.text.back() == '.') {
      return fail();  // "5." inside an expression
    }
    if (digits == 0) return fail();
    // Scientific notation: a digit (after an optional sign) right after 'e'.
    if (pos_ + 1 < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t k = pos_ + 1;
      bool negative = false;
      if (s_[k] == '+' || s_[k] == '-') negative = s_[k++] == '-';
      if (k < s_.size() && is_digit(s_[k])) {
        int64_t e = 0;
        while (k < s_.size() && is_digit(s_[k])) {
          e = std::min<int64_t>(e * 10 + (s_[k] - '0'), 1000000000);
          ++k;
        }
        n.exp10 = int32_t(negative ? -e : e);
        pos_ = k;
        dot = true;  // sci notation is a measured value like a decimal
      }
    }
    n.approx = dot && n.repeat.empty() && significant >= 15;
    return add(n);
  }

  // A LaTeX argument: {group}, or one digit, letter or command.
  int32_t parse_arg() {
    Deeper guard(this);
    if (failed_) return fail();
    const char c = peek();
    if (c == '{') {
      ++pos_;
      std::vector<int32_t> items;
      const int saved = abs_depth_;
      abs_depth_ = 0;
      if (!parse_items(&items) || !eat('}') || items.size() != 1) return fail();
      abs_depth_ = saved;
      return items[0];
    }
    if (is_digit(c)) {
      Node n;
      n.kind = NodeKind::number;
      n.text = s_.substr(pos_++, 1);
      return add(n);
    }
    if (is_alpha(c)) {
      Node n;
      n.kind = s_[pos_] == 'e' ? NodeKind::euler : NodeKind::variable;
      n.text = s_.substr(pos_++, 1);
      return add(n);
    }
    if (c == '\\') return parse_command();
    return fail();
  }

  // "_1", "_{10}", "_n" after a variable: extends its name.
  void take_subscript(Node* n, size_t name_start) {
    if (pos_ >= s_.size() || s_[pos_] != '_') return;
    size_t k = pos_ + 1;
    if (k < s_.size() && s_[k] == '{') {
      const size_t close = s_.find('}', k);
      if (close == std::string_view::npos) {
        failed_ = true;
        return;
      }
      k = close + 1;
    } else if (k < s_.size() && is_digit(s_[k])) {
      while (k < s_.size() && is_digit(s_[k])) ++k;
    } else if (k < s_.size() && is_alpha(s_[k])) {
      ++k;
    } else {
      failed_ = true;
      return;
    }
    pos_ = k;
    n->kind = NodeKind::variable;
    n->text = s_.substr(name_start, pos_ - name_start);
  }

  int32_t parse_letters() {
    const std::string_view w = word_at(pos_);
    if (w == "or" || w == "and") return fail();
    if (const auto f = function_named(w)) {
      pos_ += w.size();
      return parse_function(*f);
    }
    if (w == "sqrt") {
      pos_ += 4;
      return make(NodeKind::root, peek() == '(' ? parse_primary() : parse_arg());
    }
    if (w == "pi") {
      pos_ += 2;
      return make(NodeKind::pi);
    }
    if (w == "inf" || w == "infty" || w == "infinity") {
      pos_ += w.size();
      return make(NodeKind::infinity);
    }
    if (w.size() >= 4) {
      Node n;
      n.kind = NodeKind::word;
      n.text = w;
      pos_ += w.size();
      return add(n);
    }
    // xy = x * y; the last letter may carry a subscript.
    int32_t product = -1;
    for (size_t k = 0; k < w.size(); ++k) {
      Node n;
      n.kind = w[k] == 'e' ? NodeKind::euler : NodeKind::variable;
      n.text = s_.substr(pos_, 1);
      const size_t start = pos_++;
      if (k + 1 == w.size()) take_subscript(&n, start);
      const int32_t v = add(n);
      product = product < 0 ? v : make(NodeKind::mul, product, v);
    }
    return product;
  }

  int32_t parse_function(Func f) {
    int32_t power = -1, base = -1;
    if (peek() == '^') {
      ++pos_;
      power = parse_arg();
      if (power < 0) return fail();
      const Node& p = ast_.at(power);
      // \sin^{-1} is the inverse function, not a reciprocal.
      if (p.kind == NodeKind::neg && ast_.at(p.a).kind == NodeKind::number && ast_.at(p.a).text == "1") {
        if (f == Func::sin || f == Func::cos || f == Func::tan) {
          f = f == Func::sin ? Func::arcsin : (f == Func::cos ? Func::arccos : Func::arctan);
          power = -1;
        }
      }
    }
    if (peek() == '_') {
      if (f != Func::log) return fail();
      ++pos_;
      base = parse_arg();
      if (base < 0) return fail();
    }
    int32_t arg = -1;
    if (peek() == '(') {
      arg = parse_primary();
    } else {
      // \sin 2x = sin(2x): a run of factors, up to the next function.
      arg = parse_power();
      while (arg >= 0 && !failed_) {
        const std::string_view cmd = peek_command();
        if (!cmd.empty() && function_named(cmd)) break;
        skip();
        if (is_alpha(peek()) && function_named(word_at(pos_))) break;
        if (!implicit_factor_follows()) break;
        arg = make(NodeKind::mul, arg, parse_power());
      }
    }
    if (arg < 0 || failed_) return fail();
    int32_t node = make(NodeKind::func, arg, base, uint8_t(f));
    if (power >= 0) node = make(NodeKind::pow, node, power);
    return node;
  }

  int32_t parse_command() {
    const std::string_view name = peek_command();
    if (name.empty()) return fail();
    const size_t name_start = pos_;
    pos_ += 1 + name.size();
    if (name == "frac") {
      const int32_t a = parse_arg();
      return make(NodeKind::div, a, a < 0 ? -1 : parse_arg());
    }
    if (name == "binom") {
      const int32_t a = parse_arg();
      return make(NodeKind::binom, a, a < 0 ? -1 : parse_arg());
    }
    if (name == "sqrt") {
      int32_t index = -1;
      if (eat('[')) {
        index = parse_sum();
        if (index < 0 || !eat(']')) return fail();
      }
      const int32_t a = parse_arg();
      if (a < 0) return fail();
      return make(NodeKind::root, a, index);
    }
    if (name == "pi") return make(NodeKind::pi);
    if (name == "infty") return make(NodeKind::infinity);
    if (name == "emptyset") return nary(NodeKind::set, {});
    if (const auto f = function_named(name)) return parse_function(*f);
    if (std::find(std::begin(kGreek), std::end(kGreek), name) != std::end(kGreek)) {
      Node n;
      n.kind = NodeKind::variable;
      n.text = s_.substr(name_start, pos_ - name_start);
      take_subscript(&n, name_start);
      return add(n);
    }
    return fail();
  }

  int32_t parse_bracketed(char open) {
    const int saved = abs_depth_;
    abs_depth_ = 0;
    std::vector<int32_t> items;
    if (!parse_items(&items)) return fail();
    abs_depth_ = saved;
    const char close = peek();
    if (open == '{') {
      if (!eat('}')) return fail();
      return items.size() == 1 ? items[0] : nary(NodeKind::set, items, '{', '}');
    }
    if (close != ')' && close != ']') return fail();
    ++pos_;
    if (items.size() == 1) {
      if ((open == '(') != (close == ')')) return fail();  // "(a]" is no interval
      if (open == '(') ast_.nodes[size_t(items[0])].paren = true;
      return items[0];
    }
    return nary(NodeKind::tuple, items, open, close);
  }

  int32_t parse_primary() {
    Deeper guard(this);
    if (failed_) return fail();
    const char c = peek();
    if (is_digit(c) || c == '.') {
      const int32_t number = parse_number();
      if (number < 0) return fail();
      // A mixed number: 3\frac{1}{2} = 3 + 1/2 when both parts are integers.
      const Node& n = ast_.at(number);
      if (n.text.find('.') == std::string_view::npos && n.exp10 == 0 && peek_command() == "frac") {
        const size_t save = pos_;
        const size_t nodes = ast_.nodes.size();
        pos_ += 5;
        const int32_t num = parse_arg();
        const int32_t den = num < 0 ? -1 : parse_arg();
        auto integer = [&](int32_t k) {
          return k >= 0 && ast_.at(k).kind == NodeKind::number &&
                 ast_.at(k).text.find('.') == std::string_view::npos && ast_.at(k).exp10 == 0;
        };
        if (!failed_ && integer(num) && integer(den)) return make(NodeKind::add, number, make(NodeKind::div, num, den));
        pos_ = save;
        ast_.nodes.resize(nodes);
        failed_ = false;
      }
      return number;
    }
    if (c == '(' || c == '[' || c == '{') {
      ++pos_;
      return parse_bracketed(c);
    }
    if (c == '|') {
      ++pos_;
      ++abs_depth_;
      const int32_t inner = parse_sum();
      --abs_depth_;
      if (inner < 0 || !eat('|')) return fail();
      return make(NodeKind::abs, inner);
    }
    if (is_alpha(c)) return parse_letters();
    if (c == '\\') {
      if (pos_ + 1 < s_.size() && s_[pos_ + 1] == '{') {  // \{ ... \}
        pos_ += 2;
        std::vector<int32_t> items;
        skip();
        if (s_.compare(pos_, 2, "\\}") == 0) {
          pos_ += 2;
          return nary(NodeKind::set, {});
        }
        const int saved = abs_depth_;
        abs_depth_ = 0;
        if (!parse_items(&items)) return fail();
        abs_depth_ = saved;
        skip();
        if (s_.compare(pos_, 2, "\\}") != 0) return fail();
        pos_ += 2;
        return nary(NodeKind::set, items, '{', '}');
      }
      return parse_command();
    }
    return fail();
  }

  Ast& ast_;
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  int abs_depth_ = 0;
  bool failed_ = false;
};

std::string canonical_number(const Node& n) {
  std::string_view t = n.text;
  const size_t dot = t.find('.');
  std::string_view whole = t.substr(0, dot), frac = dot == std::string_view::npos ? "" : t.substr(dot + 1);
  while (!whole.empty() && whole.front() == '0') whole.remove_prefix(1);
  if (n.repeat.empty())
    while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
  std::string out = whole.empty() ? "0" : std::string(whole);
  if (!frac.empty() || !n.repeat.empty()) out += "." + std::string(frac);
  if (!n.repeat.empty()) out += "(" + std::string(n.repeat) + ")";
  if (n.exp10) out += "e" + std::to_string(n.exp10);
  return out;
}

void print(const Ast& ast, int32_t i, std::string* out) {
  const Node& n = ast.at(i);
  auto two = [&](const char* op) {
    *out += '(';
    *out += op;
    *out += ' ';
    print(ast, n.a, out);
    *out += ' ';
    print(ast, n.b, out);
    *out += ')';
  };
  auto all = [&](const char* head, const char* tail) {
    *out += head;
    for (uint32_t k = 0; k < n.count; ++k) {
      if (k) *out += ',';
      print(ast, ast.kid(n, k), out);
    }
    *out += tail;
  };
  switch (n.kind) {
    case NodeKind::number: *out += canonical_number(n); break;
    case NodeKind::variable: *out += variable_name(n.text); break;
    case NodeKind::pi: *out += "\\pi"; break;
    case NodeKind::euler: *out += "e"; break;
    case NodeKind::infinity: *out += "\\infty"; break;
    case NodeKind::word:
      for (char c : n.text) *out += char((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
      break;
    case NodeKind::neg:
      *out += "(- ";
      print(ast, n.a, out);
      *out += ')';
      break;
    case NodeKind::add: two("+"); break;
    case NodeKind::sub: two("-"); break;
    case NodeKind::mul: two("*"); break;
    case NodeKind::div: two("/"); break;
    case NodeKind::pow: two("^"); break;
    case NodeKind::binom: two("binom"); break;
    case NodeKind::factorial:
      *out += "(! ";
      print(ast, n.a, out);
      *out += ')';
      break;
    case NodeKind::root:
      *out += "(root ";
      print(ast, n.a, out);
      if (n.b >= 0) {
        *out += ' ';
        print(ast, n.b, out);
      }
      *out += ')';
      break;
    case NodeKind::func:
      *out += '(';
      *out += function_text(Func(n.op));
      *out += ' ';
      print(ast, n.a, out);
      if (n.b >= 0) {
        *out += ' ';
        print(ast, n.b, out);
      }
      *out += ')';
      break;
    case NodeKind::abs:
      *out += "(abs ";
      print(ast, n.a, out);
      *out += ')';
      break;
    case NodeKind::plus_minus:
      *out += n.op ? "(-+ " : "(+- ";
      if (n.a >= 0) print(ast, n.a, out);
      *out += ' ';
      print(ast, n.b, out);
      *out += ')';
      break;
    case NodeKind::relation: {
      *out += "(rel";
      for (uint32_t k = 0; k < n.count; ++k) {
        if (k) *out += " " + std::to_string(int(ast.ops[size_t(n.b) + k - 1]));
        *out += ' ';
        print(ast, ast.kid(n, k), out);
      }
      *out += ')';
      break;
    }
    case NodeKind::tuple: {
      const char head[2] = {n.open, 0}, tail[2] = {n.close, 0};
      all(head, tail);
      break;
    }
    case NodeKind::set: all("{", "}"); break;
    case NodeKind::list: all("[list ", "]"); break;
    case NodeKind::set_union: all("[cup ", "]"); break;
  }
}

}  // namespace

bool parse_answer(std::string_view normalized, Ast* ast) {
  ast->source = std::string(normalized);
  ast->nodes.clear();
  ast->kids.clear();
  ast->ops.clear();
  ast->root = -1;
  if (normalized.empty() || normalized.size() > kMaxParseBytes) return false;
  Parser parser(ast);
  if (!parser.parse()) {
    ast->root = -1;
    return false;
  }
  return true;
}

std::string variable_name(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text)
    if (c != '{' && c != '}') out += c;
  return out;
}

std::string canonical(const Ast& ast, int32_t node) {
  std::string out;
  print(ast, node, &out);
  return out;
}

std::vector<std::string> collect_variables(const Ast& ast, int32_t node) {
  std::vector<std::string> names;
  std::vector<int32_t> stack{node};
  while (!stack.empty()) {
    const int32_t i = stack.back();
    stack.pop_back();
    if (i < 0) continue;
    const Node& n = ast.at(i);
    if (n.kind == NodeKind::variable) names.push_back(variable_name(n.text));
    stack.push_back(n.a);
    if (n.kind != NodeKind::relation) stack.push_back(n.b);
    for (uint32_t k = 0; k < n.count; ++k) stack.push_back(ast.kid(n, k));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace dapo::reward
