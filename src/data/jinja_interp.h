// The interpreter of dapo's Jinja subset (internal to src/data/jinja_*.cpp):
// scopes, the render state with its limits, and the built-ins it dispatches
// to (filters and tests in jinja_filters.cpp; str/dict/list methods, the
// globals and % / str.format formatting in jinja_methods.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dapo/data/jinja.h"
#include "jinja_ast.h"
#include "jinja_value.h"

namespace dapo::data::jinja {

// Variables of one scope, and the scope it was opened in. The template's
// top level holds the render context's variables; each for-loop iteration,
// macro call and with block opens its own (jinja2's scoping: a set inside a
// loop body is gone at the next iteration).
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};
using ScopeP = std::shared_ptr<Scope>;

enum class Flow { normal, break_, continue_ };

class Interp {
 public:
  Interp(const RenderLimits& limits, std::string template_name) : limits_(limits), name_(std::move(template_name)) {}

  std::string render(const std::vector<StmtP>& body, const ScopeP& top);

  Value eval(const Expr& e, const ScopeP& scope);
  Flow exec(const std::vector<StmtP>& body, const ScopeP& scope, std::string& out);

  // The operations of the template language, for the built-ins.
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs args);
  Value apply_filter(const std::string& name, const Value& input, CallArgs args);
  bool apply_test(const std::string& name, const Value& input, CallArgs args);
  // A step of a loop (the for statement's iterations, and the items a
  // filter goes through): RenderError past limits.max_steps.
  void tick(int64_t steps = 1);
  // RenderError when a string being built passes limits.max_output_bytes.
  void check_size(size_t bytes) const;
  const RenderLimits& limits() const { return limits_; }
  const std::string& template_name() const { return name_; }
  int& call_depth() { return call_depth_; }

 private:
  RenderLimits limits_;
  std::string name_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  std::optional<Value> block_input_;  // the body of a filter block / filtered set block

  Value eval_binop(const Expr& e, const ScopeP& scope);
  Value eval_compare(const Expr& e, const ScopeP& scope);
  Value eval_call(const Expr& e, const ScopeP& scope);
  CallArgs eval_args(const Expr& e, const ScopeP& scope);
  Value eval_slice(const Value& obj, const Expr& slice, const ScopeP& scope);
  void assign(const Expr& target, const Value& v, const ScopeP& scope);
  Flow exec_for(const Stmt& s, const ScopeP& scope, std::string& out);
  Value make_macro(const Stmt& s, const ScopeP& scope, std::optional<Value> caller = std::nullopt);
  void write(std::string& out, std::string_view text);
};

// A RenderError naming the position: rethrown by the interpreter with the
// line and column of the innermost node that failed.
class PositionedError : public std::runtime_error {
 public:
  PositionedError(const std::string& message, Pos pos) : std::runtime_error(message), pos(pos) {}
  Pos pos;
};

// The template's raise_exception(message): reported as the template's own words.
class TemplateRaised : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A function or bound method the template can call.
class Builtin : public Object {
 public:
  using Fn = std::function<Value(Interp&, CallArgs&)>;
  Builtin(std::string name, Fn fn, std::string owner = {})
      : name_(std::move(name)), owner_(std::move(owner)), fn_(std::move(fn)) {}
  std::string type_name() const override { return owner_.empty() ? "builtin_function_or_method" : "method"; }
  bool callable() const override { return true; }
  Value call(Interp& in, CallArgs args) override { return fn_(in, args); }
  std::string repr() const override {
    return owner_.empty() ? "<built-in function " + name_ + ">"
                          : "<built-in method " + name_ + " of " + owner_ + " object>";
  }

 private:
  std::string name_, owner_;
  Fn fn_;
};

// Binding call arguments to a Python signature: `names` in order; a
// missing one is nullopt. TypeError-style RenderError for too many
// positional arguments or an unknown or repeated keyword.
std::vector<std::optional<Value>> bind_args(const CallArgs& args, const std::vector<std::string>& names,
                                            const std::string& function);

// ---- built-ins -----------------------------------------------------------------------

Value run_filter(Interp& in, const std::string& name, const Value& input, CallArgs& args);
bool run_test(Interp& in, const std::string& name, const Value& input, CallArgs& args);
// The method `name` of a str, dict or list (a bound Builtin), or nullopt.
// Methods that would modify a list or dict give an undefined that raises
// jinja2's SecurityError message when used.
std::optional<Value> find_method(const Value& self, const std::string& name);
// The globals: range, dict, namespace, joiner, cycler, raise_exception, strftime_now.
void add_globals(Scope& scope);
// Python's binary operators (+ - * / // % **) on two values.
Value binop(Interp& in, const std::string& op, const Value& a, const Value& b);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);
// Python's `fmt % args`.
std::string percent_format(Interp& in, const std::string& fmt, const Value& args);
// Python's str.format.
std::string str_format(Interp& in, const std::string& fmt, const CallArgs& args);

}  // namespace dapo::data::jinja
