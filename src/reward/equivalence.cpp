// Answer equivalence (equivalence.h): structure first, then values.
#include "dapo/reward/equivalence.h"

#include <algorithm>
#include <array>

#include "dapo/reward/evaluate.h"
#include "dapo/reward/expr.h"
#include "dapo/reward/normalize.h"

namespace dapo::reward {
namespace {

constexpr int kPoints = 6;         // the last two with negated values
constexpr int kNegativeFrom = 4;
constexpr int kMinAgreeing = 3;    // points where both sides are defined and equal
constexpr int kMaxSigns = 4;  // \pm nodes per element: 2^4 candidates at most

// Generic positive non-integers: unlikely roots of any small polynomial.
constexpr std::array<std::pair<int, int>, 16> kPointValues = {{{13, 7}, {29, 11}, {5, 3}, {41, 19}, {23, 13},
                                                               {17, 5}, {37, 23}, {11, 29}, {47, 17}, {19, 31},
                                                               {7, 4}, {31, 9}, {43, 37}, {3, 11}, {53, 29},
                                                               {59, 13}}};

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

// Text that cannot hide an undefined value: no operators but + - *, no commands.
bool harmless(std::string_view s) {
  bool letters = false, digits = false;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (is_alpha(c)) {
      letters = true;
    } else if (c != '.' && c != ',' && c != '-' && c != '+' && c != '*' && c != '(' && c != ')' && c != '[' &&
               c != ']' && c != ' ' && c != ';') {
      return false;
    }
  }
  return !(letters && digits);  // "ln0" could be undefined; plain numbers and words cannot
}

bool words_only(std::string_view s) {
  bool any = false;
  for (char c : s) {
    if (is_alpha(c)) {
      any = true;
    } else if (c != ' ') {
      return false;
    }
  }
  return any;
}

// One side of a comparison: an element of an answer with its \pm signs chosen.
struct Item {
  const Ast* ast;
  int32_t node;
  std::vector<int32_t> pm_nodes;
  uint32_t mask = 0;
};

void find_pm(const Ast& ast, int32_t i, std::vector<int32_t>* out) {
  if (i < 0) return;
  const Node& n = ast.at(i);
  if (n.kind == NodeKind::plus_minus) out->push_back(i);
  find_pm(ast, n.a, out);
  if (n.kind != NodeKind::relation) find_pm(ast, n.b, out);
  for (uint32_t k = 0; k < n.count; ++k) find_pm(ast, ast.kid(n, k), out);
}

bool names_quantity(const Ast& ast, int32_t i);

// f(3), P(A), g(1, 2), P(X=2), a_1(x): a variable written right before its
// parenthesised argument(s) is the value of a function, a quantity whatever
// the argument. Not "f*(3)", "2(3)" (no variable in front) or "f(3)^2" (the
// factor after f is a power, not the parenthesis).
bool function_value(const Ast& ast, const Node& n) {
  if (n.kind != NodeKind::mul) return false;
  const Node& head = ast.at(n.a);
  const Node& arg = ast.at(n.b);
  if (head.kind != NodeKind::variable) return false;
  const size_t after = size_t(head.text.data() - ast.source.data()) + head.text.size();
  if (after >= ast.source.size() || ast.source[after] != '(') return false;
  return arg.paren || (arg.kind == NodeKind::tuple && arg.open == '(' && arg.close == ')');
}

// Whether a subtree only names a quantity: variables (a, a_5, \alpha) and
// function values (f(3), P(A)) joined by + - / and products (m+n, p+q, AB,
// mn, a/b, f(1)+f(2)), |..| of one (|z|), a known function of one (\sin x,
// \log_2 x). No number outside an argument, no power: "2x = 6" solves for x,
// "x^2 = 4" is not "4", and "7 = 7" or "3 = 7" name nothing.
bool names_quantity(const Ast& ast, int32_t i) {
  const Node& n = ast.at(i);
  switch (n.kind) {
    case NodeKind::variable:
      return true;
    case NodeKind::mul:
      if (function_value(ast, n)) return true;
      return names_quantity(ast, n.a) && names_quantity(ast, n.b);
    case NodeKind::add:
    case NodeKind::sub:
    case NodeKind::div:
      return names_quantity(ast, n.a) && names_quantity(ast, n.b);
    case NodeKind::abs:
    case NodeKind::func:
      return names_quantity(ast, n.a);
    default:
      return false;
  }
}

// "x = 5" -> 5 and "x \in [0, 1]" -> [0, 1]: the left side names what the
// answer is about. So does any name of a quantity with a constant other side:
// "m+n = 204" -> 204, "f(3) = 7" -> 7, "P(A) = \frac{1}{2}" -> 1/2, and
// "7 = f(3)" -> 7 (competition answers that restate the asked-for quantity).
// An equation with variables on both sides ("x+y = 2z", "f(x) = 2x+1") or
// a number on the named side ("2x = 6", "7 = 7") stays an equation.
int32_t right_side(const Ast& ast, int32_t i) {
  const Node& n = ast.at(i);
  if (n.kind != NodeKind::relation || n.count != 2) return i;
  const RelOp op = ast.ops[size_t(n.b)];
  if (op != RelOp::eq && op != RelOp::in) return i;
  const int32_t left = ast.kid(n, 0), right = ast.kid(n, 1);
  if (ast.at(left).kind == NodeKind::variable) return right;
  if (op != RelOp::eq) return i;
  if (ast.at(right).kind == NodeKind::variable) return left;  // 5 = x
  if (names_quantity(ast, left) && collect_variables(ast, right).empty()) return right;
  if (names_quantity(ast, right) && collect_variables(ast, left).empty()) return left;
  return i;
}

// The candidates an answer stands for: its list elements, each \pm expanded.
// False when an element has too many signs to expand.
bool candidates(const Ast& ast, std::vector<Item>* out) {
  std::vector<int32_t> elements;
  const Node& root = ast.at(ast.root);
  if (root.kind == NodeKind::list) {
    for (uint32_t k = 0; k < root.count; ++k) elements.push_back(ast.kid(root, k));
  } else {
    elements.push_back(ast.root);
  }
  for (int32_t e : elements) {
    Item item{&ast, right_side(ast, e), {}, 0};
    find_pm(ast, item.node, &item.pm_nodes);
    if (item.pm_nodes.size() > size_t(kMaxSigns)) return false;
    const uint32_t variants = 1u << item.pm_nodes.size();
    for (uint32_t m = 0; m < variants; ++m) {
      item.mask = m;
      out->push_back(item);
    }
  }
  return true;
}

class Comparer {
 public:
  bool equal(const Item& x, const Item& y) {
    const Node& a = x.ast->at(x.node);
    const Node& b = y.ast->at(y.node);
    const bool sa = structured(a.kind), sb = structured(b.kind);
    if (sa != sb) return false;
    if (!sa) return scalars_equal(x, y);
    if (a.kind != b.kind) return false;
    switch (a.kind) {
      case NodeKind::tuple:
        if (a.open != b.open || a.close != b.close || a.count != b.count) return false;
        for (uint32_t k = 0; k < a.count; ++k)
          if (!equal(child(x, k), child(y, k))) return false;
        return true;
      case NodeKind::set:
        return covers(x, y) && covers(y, x);
      case NodeKind::set_union:
        return a.count == b.count && covers(x, y) && covers(y, x);
      case NodeKind::relation:
        return relations_equal(x, y);
      case NodeKind::word:
        return iequals(a.text, b.text);
      default:
        return false;
    }
  }

  // Every element of x has an equal element in y (both n-ary nodes).
  bool covers(const Item& x, const Item& y) {
    const Node& a = x.ast->at(x.node);
    const Node& b = y.ast->at(y.node);
    for (uint32_t i = 0; i < a.count; ++i) {
      bool found = false;
      for (uint32_t j = 0; j < b.count && !found; ++j) found = equal(child(x, i), child(y, j));
      if (!found) return false;
    }
    return true;
  }

 private:
  static bool structured(NodeKind k) {
    return k == NodeKind::tuple || k == NodeKind::set || k == NodeKind::set_union || k == NodeKind::relation ||
           k == NodeKind::word || k == NodeKind::list;
  }

  static Item child(const Item& x, uint32_t k) {
    Item c = x;
    c.node = x.ast->kid(x.ast->at(x.node), k);
    return c;
  }

  // Relations with > / >= read right to left become < / <=.
  struct Chain {
    std::vector<RelOp> ops;
    std::vector<Item> operands;
  };
  static Chain chain(const Item& x) {
    const Node& n = x.ast->at(x.node);
    Chain c;
    for (uint32_t k = 0; k < n.count; ++k) c.operands.push_back(child(x, k));
    for (uint32_t k = 0; k + 1 < n.count; ++k) c.ops.push_back(x.ast->ops[size_t(n.b) + k]);
    const bool greater = !c.ops.empty() && std::all_of(c.ops.begin(), c.ops.end(), [](RelOp op) {
      return op == RelOp::gt || op == RelOp::ge;
    });
    if (greater) {
      std::reverse(c.operands.begin(), c.operands.end());
      std::reverse(c.ops.begin(), c.ops.end());
      for (auto& op : c.ops) op = op == RelOp::gt ? RelOp::lt : RelOp::le;
    }
    return c;
  }
  bool relations_equal(const Item& x, const Item& y) {
    const Chain a = chain(x), b = chain(y);
    if (a.ops != b.ops) return false;
    bool same = true;
    for (size_t k = 0; k < a.operands.size() && same; ++k) same = equal(a.operands[k], b.operands[k]);
    if (same) return true;
    // a = b is b = a.
    if (a.ops.size() == 1 && (a.ops[0] == RelOp::eq || a.ops[0] == RelOp::ne))
      return equal(a.operands[0], b.operands[1]) && equal(a.operands[1], b.operands[0]);
    return false;
  }

  static Value evaluate(const Item& x, const std::vector<std::string>& vars, int point) {
    Evaluator ev(*x.ast);
    ev.choose_signs(x.pm_nodes, x.mask);
    for (size_t v = 0; v < vars.size(); ++v) {
      const auto [p, q] = kPointValues[(size_t(point) * 5 + v) % kPointValues.size()];
      ev.bind(vars[v], Value::of(Rational::make(BigInt(point >= kNegativeFrom ? -p : p), BigInt(q))));
    }
    return ev.eval(x.node);
  }

  bool scalars_equal(const Item& x, const Item& y) {
    auto same_tree = [&] {
      return x.pm_nodes.empty() && y.pm_nodes.empty() && canonical(*x.ast, x.node) == canonical(*y.ast, y.node);
    };
    std::vector<std::string> vars = collect_variables(*x.ast, x.node);
    for (auto& v : collect_variables(*y.ast, y.node)) vars.push_back(std::move(v));
    std::sort(vars.begin(), vars.end());
    vars.erase(std::unique(vars.begin(), vars.end()), vars.end());

    const int points = vars.empty() ? 1 : kPoints;
    int agreed = 0;
    bool undefined_somewhere = false, unknown = false;
    for (int p = 0; p < points; ++p) {
      const Value a = evaluate(x, vars, p), b = evaluate(y, vars, p);
      const bool ua = a.kind == ValueKind::undefined, ub = b.kind == ValueKind::undefined;
      if (ua || ub) {
        // Without variables an undefined side decides; with them, a point
        // outside one side's domain (sqrt of a negative) says nothing.
        if (vars.empty()) return false;
        undefined_somewhere = true;
        continue;
      }
      if (a.kind == ValueKind::unknown || b.kind == ValueKind::unknown) {
        unknown = true;
        break;
      }
      if (!values_equal(a, b)) return false;
      ++agreed;
    }
    if (unknown) return !undefined_somewhere && same_tree();
    if (vars.empty()) return agreed == 1;
    return agreed >= kMinAgreeing || (agreed >= 1 && same_tree());
  }
};

}  // namespace

bool normalized_equivalent(std::string_view pred, std::string_view truth) {
  if (pred.empty() || truth.empty()) return false;
  if (pred == truth && harmless(pred)) return true;
  const bool wp = words_only(pred), wt = words_only(truth);
  if (wp && wt) return iequals(pred, truth);

  Ast a, b;
  if (!parse_answer(pred, &a) || !parse_answer(truth, &b)) return pred == truth;
  {
    // "1, 2, 3" against \{1, 2, 3\}: a list of answers is the set of them.
    const NodeKind ka = a.at(a.root).kind, kb = b.at(b.root).kind;
    if ((ka == NodeKind::list && kb == NodeKind::set) || (ka == NodeKind::set && kb == NodeKind::list)) {
      Comparer cmp;
      const Item x{&a, a.root, {}, 0}, y{&b, b.root, {}, 0};
      return cmp.covers(x, y) && cmp.covers(y, x);
    }
  }
  std::vector<Item> ca, cb;
  if (!candidates(a, &ca) || !candidates(b, &cb)) return false;
  if (ca.size() != cb.size()) return false;
  Comparer cmp;
  if (ca.size() == 1) return cmp.equal(ca[0], cb[0]);
  // Multisets: each candidate of the prediction takes one distinct match.
  std::vector<bool> used(cb.size(), false);
  for (const Item& x : ca) {
    bool found = false;
    for (size_t j = 0; j < cb.size() && !found; ++j) {
      if (used[j] || !cmp.equal(x, cb[j])) continue;
      used[j] = true;
      found = true;
    }
    if (!found) return false;
  }
  return true;
}

bool answers_equivalent(std::string_view pred, std::string_view truth) {
  return normalized_equivalent(normalize_answer(pred), normalize_answer(truth));
}

}  // namespace dapo::reward
