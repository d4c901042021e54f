// The values of dapo's Jinja interpreter (internal to src/data/jinja_*.cpp):
// Python's objects as Jinja templates see them - None, bool, int, float,
// str, list/tuple, dict, jinja2's Undefined - plus objects (namespace(),
// the `loop` variable, functions and bound methods, macros). Lists and dicts
// are immutable once built (ImmutableSandboxedEnvironment refuses append,
// update, ...) and shared by pointer; a namespace is the one mutable object.
//
// The Python semantics that templates can observe are kept: str() and
// repr() of every value (float repr, quote choice of str repr, tuple
// commas, dict_items([...])), json.dumps as transformers' tojson calls it,
// ==/< between mixed types, truthiness, bool being an int. Strings are
// UTF-8; indexing, slicing and len() count code points as Python does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dapo::data::jinja {

// An error of the template at run time (Python's TypeError, jinja2's
// UndefinedError, SecurityError, TemplateError from raise_exception, ...).
// The interpreter adds the template's name and the line of the node.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value;
struct ListData;
struct DictData;
class Object;
class Interp;

enum class Kind : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, object };

// How a sequence prints and behaves: [a], (a,), dict_items([...]) and the
// other views; a generator (what jinja2's map, select, ... return) iterates
// but has no len(), cannot be indexed and is always true.
// range(...) keeps its items and its start, stop, step (its repr).
enum class SeqKind : uint8_t { list, tuple, dict_items, dict_keys, dict_values, generator, range };

struct Value {
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // string; for undefined: the message its misuse raises ("" -> generic)
  std::shared_ptr<const ListData> list;
  std::shared_ptr<const DictData> dict;
  std::shared_ptr<Object> obj;

  static Value undefined(std::string message = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(std::vector<Value> items, SeqKind seq = SeqKind::list);
  static Value make_dict(std::vector<std::pair<Value, Value>> items);
  static Value make_range(int64_t start, int64_t stop, int64_t step);  // len <= the caller's bound
  static Value object(std::shared_ptr<Object> o);

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_none() const { return kind == Kind::none; }
  bool is_bool() const { return kind == Kind::boolean; }
  // Python int, bool included (isinstance(True, int)).
  bool is_int() const { return kind == Kind::integer || kind == Kind::boolean; }
  bool is_float() const { return kind == Kind::floating; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind == Kind::string; }
  bool is_list() const { return kind == Kind::list; }  // list, tuple or dict view
  bool is_dict() const { return kind == Kind::dict; }
  bool is_object() const { return kind == Kind::object; }

  int64_t as_int() const { return kind == Kind::boolean ? int64_t(b) : i; }  // is_int()
  double as_double() const { return kind == Kind::floating ? f : double(as_int()); }  // is_number()
};

struct ListData {
  std::vector<Value> items;
  SeqKind seq = SeqKind::list;
  int64_t start = 0, stop = 0, step = 1;  // range
};

// A sequence that takes an integer index: list, tuple, range.
inline bool indexable(const Value& v) {
  return v.kind == Kind::list &&
         (v.list->seq == SeqKind::list || v.list->seq == SeqKind::tuple || v.list->seq == SeqKind::range);
}

// Insertion-ordered, as Python's dict; keys compared with Python ==.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

// Arguments of a call: positional, then keyword (name, value) in call order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Objects other than the plain data values.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;  // Python's type name, for messages
  // `obj.name`: nullopt when there is no such attribute.
  virtual std::optional<Value> getattr(const std::string& name) const {
    (void)name;
    return std::nullopt;
  }
  virtual bool callable() const { return false; }
  virtual Value call(Interp& in, CallArgs args);
  virtual std::string repr() const { return "<" + type_name() + " object>"; }
  // namespace(): `{% set ns.attr = v %}`; false for other objects.
  virtual bool set_attr(const std::string& name, Value v) {
    (void)name;
    (void)v;
    return false;
  }
};

// ---- Python semantics (jinja_value.cpp) ---------------------------------------

// Python's type name: 'str', 'int', 'NoneType', 'list', 'dict', ...
std::string type_name(const Value& v);
// jinja2's object_type_repr: "None", "dict object", "str object", ...
std::string object_type_repr(const Value& v);
bool truthy(const Value& v);
// Whether Python can hash v (a dict key, a set member): not lists, dicts or
// dict views, nor tuples holding them.
bool hashable(const Value& v);
std::string py_str(const Value& v);    // str(v); "" for undefined
std::string py_repr(const Value& v);   // repr(v)
std::string repr_string(std::string_view s);
std::string float_repr(double d);
bool py_equal(const Value& a, const Value& b);
// a < b as Python orders them (numbers, str, sequences); RenderError when
// the types cannot be ordered. Returns -1, 0, 1.
int py_compare(const Value& a, const Value& b, const char* op);
// The items `for x in v` visits: a sequence's items, a dict's keys, a
// string's characters; nothing for undefined. RenderError otherwise.
std::vector<Value> iterate(const Value& v);
// len(v); RenderError when v has no length.
int64_t py_len(const Value& v);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python
// writes it. indent < 0: none; item_sep/key_sep empty: Python's defaults.
struct JsonOptions {
  bool ensure_ascii = false;
  int64_t indent = -1;
  std::string indent_text;  // indent given as a string (used when non-empty)
  std::optional<std::string> item_sep, key_sep;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// Undefined with jinja2's message for `obj.name` / `obj[key]`.
Value undefined_attr(const Value& obj, const std::string& name);
Value undefined_item(const Value& obj, const Value& key);
// The message raised when an undefined value is used.
std::string undefined_message(const Value& v);
[[noreturn]] void fail_undefined(const Value& v);

// ---- Unicode (jinja_value.cpp) -----------------------------------------------------

std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);
bool py_isspace(char32_t c);
bool py_isprintable(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isdecimal(char32_t c);
bool py_isnumeric(char32_t c);
bool py_iscased_lower(char32_t c);  // category Ll (cased, lowercase)
bool py_iscased_upper(char32_t c);  // Lu or Lt
std::u32string py_lower(std::u32string_view s);
std::u32string py_upper(std::u32string_view s);
char32_t py_title_char(char32_t c);
int64_t utf8_length(std::string_view s);  // code points

}  // namespace dapo::data::jinja
