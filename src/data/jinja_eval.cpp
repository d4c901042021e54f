// The interpreter: expressions and statements of the parsed template,
// evaluated with jinja2's semantics under ImmutableSandboxedEnvironment
// (attribute lookup tries the Python attribute, then the item; item lookup
// the item, then the attribute; anything missing is Undefined), with
// Python's operators, and jinja2's scoping (each loop iteration and macro
// call has its own scope; if blocks do not). Also the public Template API.
#include <cmath>

#include "dapo/core/error.h"
#include "jinja_interp.h"

namespace dapo::data::jinja {

// ---- scopes ----------------------------------------------------------------------------

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it)
      if (it->first == name) return &it->second;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

namespace {

ScopeP child(const ScopeP& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

[[noreturn]] void overflow() { throw RenderError("integer overflow (dapo's Jinja integers are 64-bit)"); }

// ---- objects: loop, macro -----------------------------------------------------------------

class LoopObj : public Object, public std::enable_shared_from_this<LoopObj> {
 public:
  std::shared_ptr<const std::vector<Value>> items;
  int64_t index0 = 0;
  std::shared_ptr<std::optional<std::vector<Value>>> last_changed = std::make_shared<std::optional<std::vector<Value>>>();

  int64_t length() const { return int64_t(items->size()); }
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(length()) + ">";
  }
  std::optional<Value> getattr(const std::string& name) const override {
    const int64_t n = length();
    if (name == "index") return Value::integer(index0 + 1);
    if (name == "index0") return Value::integer(index0);
    if (name == "revindex") return Value::integer(n - index0);
    if (name == "revindex0") return Value::integer(n - index0 - 1);
    if (name == "first") return Value::boolean(index0 == 0);
    if (name == "last") return Value::boolean(index0 == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem")
      return index0 > 0 ? (*items)[size_t(index0 - 1)] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return index0 + 1 < n ? (*items)[size_t(index0 + 1)] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const int64_t i = index0;
      return Value::object(std::make_shared<Builtin>("cycle", [i](Interp&, CallArgs& a) {
        if (a.args.empty()) throw RenderError("no items for cycling given");
        return a.args[size_t(i % int64_t(a.args.size()))];
      }));
    }
    if (name == "changed") {
      auto state = last_changed;
      return Value::object(std::make_shared<Builtin>("changed", [state](Interp&, CallArgs& a) {
        if (state->has_value()) {
          const auto& old = **state;
          bool same = old.size() == a.args.size();
          for (size_t k = 0; same && k < old.size(); ++k) same = py_equal(old[k], a.args[k]);
          if (same) return Value::boolean(false);
        }
        *state = a.args;
        return Value::boolean(true);
      }));
    }
    return std::nullopt;
  }
};

class MacroObj : public Object {
 public:
  MacroObj(const Stmt* def, ScopeP closure, std::optional<Value> caller, std::string name)
      : def_(def), closure_(std::move(closure)), caller_(std::move(caller)), name_(std::move(name)) {}
  std::string type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  std::string repr() const override { return "<Macro " + repr_string(name_) + ">"; }
  std::optional<Value> getattr(const std::string& name) const override {
    if (name == "name") return Value::string(name_);
    return std::nullopt;
  }

  Value call(Interp& in, CallArgs a) override {
    if (++in.call_depth() > in.limits().max_call_depth) {
      --in.call_depth();
      throw RenderError("macros nest more than " + std::to_string(in.limits().max_call_depth) +
                        " calls deep (RenderLimits::max_call_depth)");
    }
    struct Depth {
      Interp& in;
      ~Depth() { --in.call_depth(); }
    } depth{in};
    const ScopeP scope = child(closure_);
    const auto& params = def_->params;
    const size_t n = params.size(), nd = def_->defaults.size();
    std::vector<std::optional<Value>> bound(n);
    std::vector<Value> varargs;
    for (size_t k = 0; k < a.args.size(); ++k) {
      if (k < n)
        bound[k] = a.args[k];
      else
        varargs.push_back(a.args[k]);
    }
    std::vector<std::pair<Value, Value>> kwargs;
    std::optional<Value> caller = caller_;
    for (auto& [key, v] : a.kwargs) {
      bool matched = false;
      for (size_t k = 0; k < n; ++k)
        if (params[k] == key) {
          if (bound[k]) throw RenderError("macro " + repr_string(name_) + " got multiple values for argument " + repr_string(key));
          bound[k] = v;
          matched = true;
        }
      if (matched) continue;
      if (key == "caller") {
        caller = v;
        continue;
      }
      kwargs.emplace_back(Value::string(key), v);
    }
    for (size_t k = 0; k < n; ++k) {
      if (!bound[k]) {
        if (k >= n - nd)
          bound[k] = in.eval(*def_->defaults[k - (n - nd)], scope);
        else
          bound[k] = Value::undefined("parameter " + repr_string(params[k]) + " was not provided");
      }
      scope->set(params[k], *bound[k]);
    }
    scope->set("varargs", Value::make_list(std::move(varargs), SeqKind::tuple));
    scope->set("kwargs", Value::make_dict(std::move(kwargs)));
    if (caller) scope->set("caller", *caller);
    std::string out;
    in.exec(def_->body, scope, out);
    return Value::string(std::move(out));
  }

 private:
  const Stmt* def_;
  ScopeP closure_;
  std::optional<Value> caller_;
  std::string name_;
};

// Python's integer // and % (floor semantics).
int64_t floordiv(int64_t a, int64_t b) {
  if (b == -1 && a == INT64_MIN) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t pymod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Python's float divmod.
void float_divmod(double vx, double wx, double& div, double& mod) {
  mod = std::fmod(vx, wx);
  div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0.0) {
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    div = floordiv;
  } else {
    div = std::copysign(0.0, vx / wx);
  }
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw RenderError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value repeat(Interp& in, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    in.check_size(seq.s.size() * size_t(times));
    std::string out;
    out.reserve(seq.s.size() * size_t(times));
    for (int64_t k = 0; k < times; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  in.tick(int64_t(seq.list->items.size()) * times);
  std::vector<Value> out;
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->items.begin(), seq.list->items.end());
  return Value::make_list(std::move(out), seq.list->seq);
}

bool plain_seq(const Value& v) { return v.is_list() && (v.list->seq == SeqKind::list || v.list->seq == SeqKind::tuple); }

}  // namespace

Value binop(Interp& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "%" && a.is_string()) return Value::string(percent_format(in, a.s, b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool ints = a.is_int() && b.is_int();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      in.check_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (plain_seq(a) && plain_seq(b) && a.list->seq == b.list->seq) {
      std::vector<Value> out = a.list->items;
      out.insert(out.end(), b.list->items.begin(), b.list->items.end());
      in.tick(int64_t(out.size()));
      return Value::make_list(std::move(out), a.list->seq);
    }
    if (a.is_string()) throw RenderError("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (plain_seq(a))
      throw RenderError("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || plain_seq(a)) && b.is_int()) return repeat(in, a, b.as_int());
    if ((b.is_string() || plain_seq(b)) && a.is_int()) return repeat(in, b, a.as_int());
    if (a.is_string() || plain_seq(a) || b.is_string() || plain_seq(b))
      throw RenderError("can't multiply sequence by non-int of type '" +
                        type_name(a.is_string() || plain_seq(a) ? b : a) + "'");
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.as_double() == 0.0) throw RenderError(ints ? "division by zero" : "float division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) unsupported(op, a, b);
    if (ints) {
      if (b.as_int() == 0) throw RenderError("integer division or modulo by zero");
      return Value::integer(op == "//" ? floordiv(a.as_int(), b.as_int()) : pymod(a.as_int(), b.as_int()));
    }
    if (b.as_double() == 0.0) throw RenderError(op == "//" ? "float floor division by zero" : "float modulo");
    double div, mod;
    float_divmod(a.as_double(), b.as_double(), div, mod);
    return Value::floating(op == "//" ? div : mod);
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) overflow();
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value::integer(r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (x == 0.0 && y < 0) throw RenderError("0.0 cannot be raised to a negative power");
    if (x < 0 && std::floor(y) != y)
      throw RenderError("a negative number to a fractional power is complex, which dapo's Jinja subset does not have");
    return Value::floating(std::pow(x, y));
  }
  throw RenderError("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::undefined: return false;
    case Kind::string:
      if (!item.is_string())
        throw RenderError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Kind::list:
      for (const Value& v : container.list->items)
        if (py_equal(v, item)) return true;
      return false;
    case Kind::dict:
      if (!hashable(item)) throw RenderError("unhashable type: '" + type_name(item) + "'");
      return container.dict->find(item) != nullptr;
    default: throw RenderError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

// ---- the interpreter ---------------------------------------------------------------------------

void Interp::tick(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    throw RenderError("the template ran more than " + std::to_string(limits_.max_steps) +
                      " loop steps (RenderLimits::max_steps)");
}

void Interp::check_size(size_t bytes) const {
  if (int64_t(bytes) > limits_.max_output_bytes)
    throw RenderError("the template's output passed " + std::to_string(limits_.max_output_bytes) +
                      " bytes (RenderLimits::max_output_bytes)");
}

void Interp::write(std::string& out, std::string_view text) {
  out.append(text);
  check_size(out.size());
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::undefined: fail_undefined(obj);
    case Kind::dict:
      if (auto m = find_method(obj, name)) return *m;
      if (const Value* v = obj.dict->find(name)) return *v;
      return undefined_attr(obj, name);
    case Kind::string:
    case Kind::list:
      if (auto m = find_method(obj, name)) return *m;
      return undefined_attr(obj, name);
    case Kind::object:
      if (auto v = obj.obj->getattr(name)) return *v;
      return undefined_attr(obj, name);
    default: return undefined_attr(obj, name);
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (key.is_int() && (obj.is_string() || indexable(obj))) {
    const int64_t len = obj.is_string() ? utf8_length(obj.s) : int64_t(obj.list->items.size());
    int64_t i = key.as_int();
    if (i < 0) i += len;
    if (i < 0 || i >= len) return undefined_item(obj, key);
    if (obj.is_list()) return obj.list->items[size_t(i)];
    const std::u32string u = to_u32(obj.s);
    return Value::string(to_utf8(u.substr(size_t(i), 1)));
  }
  if (obj.is_dict() && hashable(key))
    if (const Value* v = obj.dict->find(key)) return *v;
  if (key.is_string()) return getattr(obj, key.s);  // the attribute fallback
  return undefined_item(obj, key);
}

Value Interp::eval_slice(const Value& obj, const Expr& slice, const ScopeP& scope) {
  // jinja2 compiles a slice to a plain Python subscript (no sandbox
  // getitem): every failure is an error, not an undefined.
  std::optional<int64_t> part[3];
  for (int k = 0; k < 3; ++k) {
    if (!slice.items[size_t(k)]) continue;
    const Value v = eval(*slice.items[size_t(k)], scope);
    if (v.is_none()) continue;
    if (!v.is_int()) {
      if (obj.is_undefined()) fail_undefined(obj);
      throw RenderError("slice indices must be integers or None or have an __index__ method");
    }
    part[k] = v.as_int();
  }
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) throw RenderError("unhashable type: 'slice'");
  if (!(obj.is_string() || indexable(obj))) throw RenderError("'" + type_name(obj) + "' object is not subscriptable");
  const int64_t step = part[2].value_or(1);
  if (step == 0) throw RenderError("slice step cannot be zero");
  std::u32string u;
  if (obj.is_string()) u = to_u32(obj.s);
  const int64_t len = obj.is_string() ? int64_t(u.size()) : int64_t(obj.list->items.size());
  const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  auto norm = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t start = norm(part[0], step > 0 ? lower : upper);
  const int64_t stop = norm(part[1], step > 0 ? upper : lower);
  std::vector<int64_t> idx;
  if (step > 0)
    for (int64_t i = start; i < stop; i += step) idx.push_back(i);
  else
    for (int64_t i = start; i > stop; i += step) idx.push_back(i);
  tick(int64_t(idx.size()));
  if (obj.is_string()) {
    std::u32string out;
    for (const int64_t i : idx) out += u[size_t(i)];
    return Value::string(to_utf8(out));
  }
  if (obj.list->seq == SeqKind::range) {  // a range's slice is a range
    const ListData& r = *obj.list;
    return Value::make_range(r.start + start * r.step, r.start + stop * r.step, r.step * step);
  }
  std::vector<Value> out;
  for (const int64_t i : idx) out.push_back(obj.list->items[size_t(i)]);
  return Value::make_list(std::move(out), obj.list->seq);
}

Value Interp::call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.is_object() && callee.obj->callable()) return callee.obj->call(*this, std::move(args));
  throw RenderError("'" + type_name(callee) + "' object is not callable");
}

Value Interp::apply_filter(const std::string& name, const Value& input, CallArgs args) {
  return run_filter(*this, name, input, args);
}

bool Interp::apply_test(const std::string& name, const Value& input, CallArgs args) {
  return run_test(*this, name, input, args);
}

CallArgs Interp::eval_args(const Expr& e, const ScopeP& scope) {
  CallArgs a;
  for (const auto& item : e.items) a.args.push_back(eval(*item, scope));
  if (e.dyn_args) {
    for (Value& v : iterate(eval(*e.dyn_args, scope))) a.args.push_back(std::move(v));
  }
  for (const auto& [key, item] : e.kwargs) a.kwargs.emplace_back(key, eval(*item, scope));
  if (e.dyn_kwargs) {
    const Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict()) throw RenderError("argument after ** must be a mapping, not " + type_name(d));
    for (const auto& [k, v] : d.dict->items) {
      if (!k.is_string()) throw RenderError("keywords must be strings");
      a.kwargs.emplace_back(k.s, v);
    }
  }
  return a;
}

Value Interp::eval_compare(const Expr& e, const ScopeP& scope) {
  Value left = eval(*e.a, scope);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.items[k], scope);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "eq") {
      r = py_equal(left, right);
    } else if (op == "ne") {
      r = !py_equal(left, right);
    } else if (op == "in") {
      r = contains(right, left);
    } else if (op == "notin") {
      r = !contains(right, left);
    } else {
      const char* sym = op == "lt" ? "<" : op == "lteq" ? "<=" : op == "gt" ? ">" : ">=";
      const int c = py_compare(left, right, sym);
      r = op == "lt" ? c == -1 : op == "lteq" ? (c == -1 || c == 0) : op == "gt" ? c == 1 : (c == 1 || c == 0);
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interp::eval(const Expr& e, const ScopeP& scope) {
  if (++eval_depth_ > 2000) {
    --eval_depth_;
    throw PositionedError("the template's expressions nest too deeply", e.pos);
  }
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{eval_depth_};
  try {
    switch (e.kind) {
      case EK::constant: return e.value;
      case EK::name: {
        if (const Value* v = scope->find(e.name)) return *v;
        return Value::undefined(repr_string(e.name) + " is undefined");
      }
      case EK::nsref: throw RenderError("a namespace attribute is only a target of set");
      case EK::getattr: return getattr(eval(*e.a, scope), e.name);
      case EK::getitem: {
        const Value obj = eval(*e.a, scope);
        if (e.b->kind == EK::slice) return eval_slice(obj, *e.b, scope);
        return getitem(obj, eval(*e.b, scope));
      }
      case EK::slice: throw RenderError("a slice outside a subscript");
      case EK::list:
      case EK::tuple: {
        std::vector<Value> items;
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value::make_list(std::move(items), e.kind == EK::tuple ? SeqKind::tuple : SeqKind::list);
      }
      case EK::dict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          Value key = eval(*e.items[k], scope);
          Value v = eval(*e.items[k + 1], scope);
          if (!hashable(key))
            throw RenderError("unhashable type: '" + type_name(key) + "'");
          bool replaced = false;
          for (auto& kv : items)
            if (py_equal(kv.first, key)) {
              kv.second = v;
              replaced = true;
            }
          if (!replaced) items.emplace_back(std::move(key), std::move(v));
        }
        return Value::make_dict(std::move(items));
      }
      case EK::call: {
        const Value callee = eval(*e.a, scope);
        return call(callee, eval_args(e, scope));
      }
      case EK::filter: {
        Value input;
        if (e.a) {
          input = eval(*e.a, scope);
        } else if (block_input_) {
          input = *block_input_;
        }
        return apply_filter(e.name, input, eval_args(e, scope));
      }
      case EK::test: {
        const Value input = eval(*e.a, scope);
        return Value::boolean(apply_test(e.name, input, eval_args(e, scope)));
      }
      case EK::neg:
      case EK::pos: {
        const Value v = eval(*e.a, scope);
        if (v.is_undefined()) fail_undefined(v);
        if (v.is_float()) return Value::floating(e.kind == EK::neg ? -v.f : v.f);
        if (v.is_int()) {
          if (e.kind == EK::pos) return Value::integer(v.as_int());
          if (v.as_int() == INT64_MIN) overflow();
          return Value::integer(-v.as_int());
        }
        throw RenderError(std::string("bad operand type for unary ") + (e.kind == EK::neg ? "-" : "+") + ": '" +
                          type_name(v) + "'");
      }
      case EK::not_: return Value::boolean(!truthy(eval(*e.a, scope)));
      case EK::and_: {
        Value l = eval(*e.a, scope);
        if (!truthy(l)) return l;
        return eval(*e.b, scope);
      }
      case EK::or_: {
        Value l = eval(*e.a, scope);
        if (truthy(l)) return l;
        return eval(*e.b, scope);
      }
      case EK::binop: {
        const Value l = eval(*e.a, scope);
        const Value r = eval(*e.b, scope);
        return binop(*this, e.name, l, r);
      }
      case EK::concat: {
        std::string out;
        for (const auto& item : e.items) {
          out += py_str(eval(*item, scope));
          check_size(out.size());
        }
        return Value::string(std::move(out));
      }
      case EK::compare: return eval_compare(e, scope);
      case EK::cond: {
        if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
      }
    }
  } catch (const RenderError& err) {
    throw PositionedError(err.what(), e.pos);
  }
  return Value::undefined();
}

void Interp::assign(const Expr& target, const Value& v, const ScopeP& scope) {
  if (target.kind == EK::name) {
    scope->set(target.name, v);
    return;
  }
  if (target.kind == EK::nsref) {
    const Value* ns = scope->find(target.name);
    if (!ns || !ns->is_object() || !ns->obj->set_attr(target.attr, v))
      throw RenderError("cannot assign attribute on non-namespace object");
    return;
  }
  if (target.kind == EK::tuple) {
    const std::vector<Value> items = iterate(v);
    const size_t n = target.items.size();
    if (items.size() < n)
      throw RenderError("not enough values to unpack (expected " + std::to_string(n) + ", got " +
                        std::to_string(items.size()) + ")");
    if (items.size() > n) throw RenderError("too many values to unpack (expected " + std::to_string(n) + ")");
    for (size_t k = 0; k < n; ++k) assign(*target.items[k], items[k], scope);
    return;
  }
  throw RenderError("cannot assign to this expression");
}

Value Interp::make_macro(const Stmt& s, const ScopeP& scope, std::optional<Value> caller) {
  return Value::object(std::make_shared<MacroObj>(&s, scope, std::move(caller), s.kind == SK::macro ? s.name : "caller"));
}

Flow Interp::exec_for(const Stmt& s, const ScopeP& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  tick(int64_t(items.size()));
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& item : items) {
      const ScopeP test_scope = child(scope);
      assign(*s.target, item, test_scope);
      if (truthy(eval(*s.cond, test_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body, child(scope), out);
    return Flow::normal;
  }
  auto loop = std::make_shared<LoopObj>();
  loop->items = std::make_shared<const std::vector<Value>>(std::move(items));
  const Value loop_value = Value::object(loop);
  for (size_t k = 0; k < loop->items->size(); ++k) {
    tick();
    const ScopeP iter = child(scope);
    loop->index0 = int64_t(k);
    iter->set("loop", loop_value);
    assign(*s.target, (*loop->items)[k], iter);
    if (exec(s.body, iter, out) == Flow::break_) break;
  }
  return Flow::normal;
}

Flow Interp::exec(const std::vector<StmtP>& body, const ScopeP& scope, std::string& out) {
  for (const StmtP& sp : body) {
    const Stmt& s = *sp;
    try {
      switch (s.kind) {
        case SK::output:
          for (const OutputPiece& p : s.output) {
            if (p.expr)
              write(out, py_str(eval(*p.expr, scope)));
            else
              write(out, p.text);
          }
          break;
        case SK::if_: {
          const Flow f = truthy(eval(*s.expr, scope)) ? exec(s.body, scope, out) : exec(s.else_body, scope, out);
          if (f != Flow::normal) return f;
          break;
        }
        case SK::for_: exec_for(s, scope, out); break;
        case SK::set: assign(*s.target, eval(*s.expr, scope), scope); break;
        case SK::set_block: {
          std::string buf;
          exec(s.body, child(scope), buf);
          Value v = Value::string(std::move(buf));
          if (s.filter) {
            std::optional<Value> saved = block_input_;
            block_input_ = v;
            v = eval(*s.filter, scope);
            block_input_ = saved;
          }
          assign(*s.target, v, scope);
          break;
        }
        case SK::macro: scope->set(s.name, make_macro(s, scope)); break;
        case SK::call_block: {
          const Value caller = make_macro(s, scope);
          const Expr& c = *s.expr;
          const Value callee = eval(*c.a, scope);
          CallArgs args = eval_args(c, scope);
          args.kwargs.emplace_back("caller", caller);
          write(out, py_str(call(callee, std::move(args))));
          break;
        }
        case SK::filter_block: {
          std::string buf;
          exec(s.body, child(scope), buf);
          std::optional<Value> saved = block_input_;
          block_input_ = Value::string(std::move(buf));
          const Value v = eval(*s.filter, scope);
          block_input_ = saved;
          write(out, py_str(v));
          break;
        }
        case SK::with: {
          const ScopeP inner = child(scope);
          std::vector<Value> values;
          for (const auto& [target, value] : s.assigns) values.push_back(eval(*value, scope));
          for (size_t k = 0; k < s.assigns.size(); ++k) assign(*s.assigns[k].first, values[k], inner);
          const Flow f = exec(s.body, inner, out);
          if (f != Flow::normal) return f;
          break;
        }
        case SK::break_: return Flow::break_;
        case SK::continue_: return Flow::continue_;
        case SK::scope: {
          const Flow f = exec(s.body, child(scope), out);
          if (f != Flow::normal) return f;
          break;
        }
      }
    } catch (const RenderError& err) {
      throw PositionedError(err.what(), s.pos);
    }
  }
  return Flow::normal;
}

std::string Interp::render(const std::vector<StmtP>& body, const ScopeP& top) {
  std::string out;
  exec(body, top, out);
  return out;
}

// ---- Template -----------------------------------------------------------------------------------

struct Template::Impl {
  std::string name;
  std::vector<StmtP> body;
};

namespace {

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 512) throw RenderError("the context is nested more than 512 levels deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) throw RenderError("the context holds an integer above 2^63 - 1");
      return Value::integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(Value::string(it.key()), from_json(it.value(), depth + 1));
      return Value::make_dict(std::move(items));
    }
    default: throw RenderError("the context holds a JSON value of a type templates do not take");
  }
}

std::string where(const std::string& name, Pos pos) {
  return name + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.col);
}

}  // namespace

Template Template::parse(std::string_view source, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->name = std::move(name);
  try {
    impl->body = jinja::parse(lex(source));
  } catch (const SyntaxError& e) {
    throw UserError(cat(where(impl->name, e.pos), ": ", e.what()));
  }
  return Template(std::move(impl));
}

const std::string& Template::name() const { return impl_->name; }

std::string Template::render(const nlohmann::ordered_json& context, const RenderLimits& limits) const {
  if (!context.is_object()) throw UserError(cat(impl_->name, ": the render context must be a JSON object"));
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  auto top = child(globals);
  Interp in(limits, impl_->name);
  try {
    for (auto it = context.begin(); it != context.end(); ++it) top->set(it.key(), from_json(it.value(), 0));
    return in.render(impl_->body, top);
  } catch (const PositionedError& e) {
    throw UserError(cat(where(impl_->name, e.pos), ": ", e.what()));
  } catch (const RenderError& e) {
    throw UserError(cat(impl_->name, ": ", e.what()));
  }
}

}  // namespace dapo::data::jinja
