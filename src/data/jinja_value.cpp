// Python's semantics of the Jinja values: str/repr, json.dumps, ==, <,
// truthiness, len and iteration, and the Unicode character classes of str
// methods (through utf8proc's tables).
#include "jinja_value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "dapo/core/py_text.h"

namespace dapo::data::jinja {

// ---- construction ---------------------------------------------------------------

Value Value::undefined(std::string message) {
  Value v;
  v.s = std::move(message);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::none;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::boolean;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::integer;
  v.i = x;
  return v;
}
Value Value::floating(double x) {
  Value v;
  v.kind = Kind::floating;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::string;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(std::vector<Value> items, SeqKind seq) {
  Value v;
  v.kind = Kind::list;
  auto d = std::make_shared<ListData>();
  d->items = std::move(items);
  d->seq = seq;
  v.list = std::move(d);
  return v;
}
Value Value::make_dict(std::vector<std::pair<Value, Value>> items) {
  Value v;
  v.kind = Kind::dict;
  auto d = std::make_shared<DictData>();
  d->items = std::move(items);
  v.dict = std::move(d);
  return v;
}
Value Value::make_range(int64_t start, int64_t stop, int64_t step) {
  std::vector<Value> items;
  if (step > 0)
    for (int64_t k = start; k < stop; k += step) items.push_back(Value::integer(k));
  else
    for (int64_t k = start; k > stop; k += step) items.push_back(Value::integer(k));
  Value v = make_list(std::move(items), SeqKind::range);
  auto d = std::const_pointer_cast<ListData>(v.list);
  d->start = start;
  d->stop = stop;
  d->step = step;
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind = Kind::object;
  v.obj = std::move(o);
  return v;
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.s == key) return &v;
  return nullptr;
}

Value Object::call(Interp&, CallArgs) { throw RenderError("'" + type_name() + "' object is not callable"); }

// ---- type names and undefined ------------------------------------------------------

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list:
      switch (v.list->seq) {
        case SeqKind::list: return "list";
        case SeqKind::tuple: return "tuple";
        case SeqKind::dict_items: return "dict_items";
        case SeqKind::dict_keys: return "dict_keys";
        case SeqKind::dict_values: return "dict_values";
        case SeqKind::generator: return "generator";
        case SeqKind::range: return "range";
      }
      return "list";
    case Kind::dict: return "dict";
    case Kind::object: return v.obj->type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object()) {
    const std::string t = v.obj->type_name();
    if (t == "Namespace") return "jinja2.utils.Namespace object";
    if (t == "LoopContext") return "jinja2.runtime.LoopContext object";
    if (t == "Macro") return "jinja2.runtime.Macro object";
    return t + " object";
  }
  return type_name(v) + " object";
}

Value undefined_attr(const Value& obj, const std::string& name) {
  return Value::undefined(repr_string(object_type_repr(obj)) + " has no attribute " + repr_string(name));
}

Value undefined_item(const Value& obj, const Value& key) {
  if (key.is_string()) return undefined_attr(obj, key.s);
  return Value::undefined(object_type_repr(obj) + " has no element " + py_repr(key));
}

std::string undefined_message(const Value& v) { return v.s.empty() ? "value is undefined" : v.s; }

void fail_undefined(const Value& v) { throw RenderError(undefined_message(v)); }

// ---- truthiness, str, repr ------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return v.b;
    case Kind::integer: return v.i != 0;
    case Kind::floating: return v.f != 0.0;
    case Kind::string: return !v.s.empty();
    case Kind::list: return v.list->seq == SeqKind::generator || !v.list->items.empty();
    case Kind::dict: return !v.dict->items.empty();
    case Kind::object: return true;
  }
  return false;
}

bool hashable(const Value& v) {
  if (v.is_dict()) return false;
  if (!v.is_list()) return true;
  switch (v.list->seq) {
    case SeqKind::tuple:
      for (const Value& item : v.list->items)
        if (!hashable(item)) return false;
      return true;
    case SeqKind::range:
    case SeqKind::generator: return true;
    default: return false;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string out;
  if (sci[0] == '-') {
    out = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exp = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (digits == "0") exp = 0;
  const int decpt = exp + 1;  // value = 0.DIGITS x 10^decpt
  const int n = int(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    char e_buf[16];
    std::snprintf(e_buf, sizeof e_buf, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += e_buf;
  } else if (decpt <= 0) {
    out += "0." + std::string(size_t(-decpt), '0') + digits;
  } else if (decpt >= n) {
    out += digits + std::string(size_t(decpt - n), '0') + ".0";
  } else {
    out += digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
  }
  return out;
}

namespace {

void append_hex(std::string& out, const char* prefix, uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, width, v);
  out += buf;
}

std::string seq_repr(const ListData& l) {
  std::string inner;
  for (size_t k = 0; k < l.items.size(); ++k) {
    if (k) inner += ", ";
    inner += py_repr(l.items[k]);
  }
  switch (l.seq) {
    case SeqKind::list: return "[" + inner + "]";
    case SeqKind::tuple: return "(" + inner + (l.items.size() == 1 ? ",)" : ")");
    case SeqKind::dict_items: return "dict_items([" + inner + "])";
    case SeqKind::dict_keys: return "dict_keys([" + inner + "])";
    case SeqKind::dict_values: return "dict_values([" + inner + "])";
    case SeqKind::generator: return "<generator object>";
    case SeqKind::range:
      return "range(" + std::to_string(l.start) + ", " + std::to_string(l.stop) +
             (l.step != 1 ? ", " + std::to_string(l.step) : std::string()) + ")";
  }
  return "[" + inner + "]";
}

}  // namespace

std::string repr_string(std::string_view s) {
  const std::u32string u = to_u32(s);
  const bool has_single = u.find(U'\'') != std::u32string::npos;
  const bool has_double = u.find(U'"') != std::u32string::npos;
  const char32_t quote = has_single && !has_double ? U'"' : U'\'';
  std::string out(1, char(quote));
  for (const char32_t c : u) {
    if (c == quote || c == U'\\') {
      out += '\\';
      out += char(c);
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      append_hex(out, "\\x", c, 2);
    } else if (c < 0x7f) {
      out += char(c);
    } else if (c >= 0xdc80 && c <= 0xdcff) {  // an undecodable byte (surrogateescape)
      append_hex(out, "\\udc", c & 0xff, 2);
    } else if (py_isprintable(c)) {
      out += to_utf8(std::u32string(1, c));
    } else if (c <= 0xff) {
      append_hex(out, "\\x", c, 2);
    } else if (c <= 0xffff) {
      append_hex(out, "\\u", c, 4);
    } else {
      append_hex(out, "\\U", c, 8);
    }
  }
  out += char(quote);
  return out;
}

std::string py_repr(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "Undefined";
    case Kind::string: return repr_string(v.s);
    case Kind::list: return seq_repr(*v.list);
    case Kind::dict: {
      std::string out = "{";
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        if (k) out += ", ";
        out += py_repr(v.dict->items[k].first) + ": " + py_repr(v.dict->items[k].second);
      }
      return out + "}";
    }
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return v.b ? "True" : "False";
    case Kind::integer: return std::to_string(v.i);
    case Kind::floating: return float_repr(v.f);
    case Kind::string: return v.s;
    case Kind::list:
    case Kind::dict: return py_repr(v);
    case Kind::object: return v.obj->repr();
  }
  return "";
}

// ---- comparisons ----------------------------------------------------------------------

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return a.s == b.s;
    case Kind::list: {
      if (a.list == b.list) return true;
      if (a.list->seq != b.list->seq || a.list->items.size() != b.list->items.size()) return false;
      for (size_t k = 0; k < a.list->items.size(); ++k)
        if (!py_equal(a.list->items[k], b.list->items[k])) return false;
      return true;
    }
    case Kind::dict: {
      if (a.dict == b.dict) return true;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::object: return a.obj == b.obj;
    default: return false;
  }
}

int py_compare(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    const double x = a.as_double(), y = b.as_double();
    if (std::isnan(x) || std::isnan(y)) return 2;  // every comparison false
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.s.compare(b.s);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list->seq == b.list->seq &&
      (a.list->seq == SeqKind::list || a.list->seq == SeqKind::tuple)) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!py_equal(x[k], y[k])) return py_compare(x[k], y[k], op);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw RenderError(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind) {
    case Kind::undefined: return out;
    case Kind::list: return v.list->items;
    case Kind::dict:
      for (const auto& kv : v.dict->items) out.push_back(kv.first);
      return out;
    case Kind::string:
      for (const char32_t c : to_u32(v.s)) out.push_back(Value::string(to_utf8(std::u32string(1, c))));
      return out;
    default: throw RenderError("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return 0;
    case Kind::string: return utf8_length(v.s);
    case Kind::list:
      if (v.list->seq == SeqKind::generator) break;
      return int64_t(v.list->items.size());
    case Kind::dict: return int64_t(v.dict->items.size());
    default: break;
  }
  throw RenderError("object of type '" + type_name(v) + "' has no len()");
}

// ---- json.dumps --------------------------------------------------------------------------

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (const char32_t c : to_u32(s)) {
    switch (c) {
      case U'"': out += "\\\""; continue;
      case U'\\': out += "\\\\"; continue;
      case U'\n': out += "\\n"; continue;
      case U'\r': out += "\\r"; continue;
      case U'\t': out += "\\t"; continue;
      case U'\b': out += "\\b"; continue;
      case U'\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        const uint32_t x = c - 0x10000;
        append_hex(out, "\\u", 0xd800 + (x >> 10), 4);
        append_hex(out, "\\u", 0xdc00 + (x & 0x3ff), 4);
      } else {
        append_hex(out, "\\u", c, 4);
      }
    } else {
      out += to_utf8(std::u32string(1, c));
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > 512) throw RenderError("tojson: the value is nested too deeply");
  const bool indented = o.indent >= 0 || !o.indent_text.empty();
  const std::string unit = !o.indent_text.empty() ? o.indent_text : std::string(size_t(std::max<int64_t>(o.indent, 0)), ' ');
  const std::string item_sep = o.item_sep ? *o.item_sep : (indented ? "," : ", ");
  const std::string key_sep = o.key_sep ? *o.key_sep : ": ";
  auto newline = [&](int level) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += unit;
  };
  switch (v.kind) {
    case Kind::none: out += "null"; return;
    case Kind::boolean: out += v.b ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(v.i); return;
    case Kind::floating: out += json_float(v.f); return;
    case Kind::string: json_string(out, v.s, o.ensure_ascii); return;
    case Kind::list: {
      if (v.list->seq != SeqKind::list && v.list->seq != SeqKind::tuple) break;
      if (v.list->items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += item_sep;
        if (indented) newline(depth + 1);
        json_value(out, v.list->items[k], o, depth + 1);
      }
      if (indented) newline(depth);
      out += ']';
      return;
    }
    case Kind::dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* x, auto* y) { return py_compare(x->first, y->first, "<") < 0; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        if (indented) newline(depth + 1);
        const Value& key = items[k]->first;
        if (key.is_string()) {
          json_string(out, key.s, o.ensure_ascii);
        } else if (key.is_float()) {
          json_string(out, json_float(key.f), false);
        } else if (key.is_bool()) {
          out += key.b ? "\"true\"" : "\"false\"";
        } else if (key.is_int()) {
          out += "\"" + std::to_string(key.i) + "\"";
        } else if (key.is_none()) {
          out += "\"null\"";
        } else {
          throw RenderError("keys must be str, int, float, bool or None, not " + type_name(key));
        }
        out += key_sep;
        json_value(out, items[k]->second, o, depth + 1);
      }
      if (indented) newline(depth);
      out += '}';
      return;
    }
    default: break;
  }
  throw RenderError("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

// ---- Unicode ----------------------------------------------------------------------------

std::u32string to_u32(std::string_view s) { return decode_surrogateescape(s); }

std::string to_utf8(std::u32string_view s) { return encode_surrogateescape(s); }

int64_t utf8_length(std::string_view s) {
  bool ascii = true;
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  return ascii ? int64_t(s.size()) : int64_t(to_u32(s).size());
}

namespace {
utf8proc_category_t category(char32_t c) {
  if (c > 0x10ffff) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(utf8proc_int32_t(c));
}
}  // namespace

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

bool py_isprintable(char32_t c) {
  if (c == U' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

bool py_isalpha(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}

bool py_isdecimal(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }

bool py_isdigit(char32_t c) {
  return py_isdecimal(c) || c == 0xb2 || c == 0xb3 || c == 0xb9 || (c >= 0x2070 && c <= 0x2079 && c != 0x2071 &&
         c != 0x2072 && c != 0x2073) || (c >= 0x2080 && c <= 0x2089) || (c >= 0x2460 && c <= 0x2468) ||
         (c >= 0x2474 && c <= 0x247c) || (c >= 0x2488 && c <= 0x2490) || (c >= 0x24f5 && c <= 0x24fd) ||
         (c >= 0x2776 && c <= 0x277e) || (c >= 0x2780 && c <= 0x2788) || (c >= 0x278a && c <= 0x2792);
}

bool py_isnumeric(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool py_iscased_lower(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LL; }

bool py_iscased_upper(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT;
}

namespace {
bool is_cased(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
bool is_case_ignorable(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK || c == U'\'' || c == U'.' || c == U':' ||
         c == 0xb7 || c == 0x2019;
}
}  // namespace

std::u32string py_lower(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    const char32_t c = s[k];
    if (c < 0x80) {
      out += (c >= U'A' && c <= U'Z') ? char32_t(c + 32) : c;
    } else if (c == 0x130) {  // İ -> i + combining dot (SpecialCasing)
      out += U'i';
      out += char32_t(0x307);
    } else if (c == 0x3a3) {  // Σ: final sigma when a cased letter precedes and none follows
      size_t j = k;
      bool before = false;
      while (j > 0) {
        --j;
        if (is_case_ignorable(s[j])) continue;
        before = is_cased(s[j]);
        break;
      }
      bool after = false;
      for (size_t m = k + 1; m < s.size(); ++m) {
        if (is_case_ignorable(s[m])) continue;
        after = is_cased(s[m]);
        break;
      }
      out += before && !after ? char32_t(0x3c2) : char32_t(0x3c3);
    } else {
      out += char32_t(utf8proc_tolower(utf8proc_int32_t(c)));
    }
  }
  return out;
}

std::u32string py_upper(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (const char32_t c : s) {
    if (c < 0x80) {
      out += (c >= U'a' && c <= U'z') ? char32_t(c - 32) : c;
    } else if (c == 0xdf) {
      out += U"SS";
    } else if (c == 0x149) {
      out += U"\u02bcN";
    } else if (c >= 0xfb00 && c <= 0xfb06) {
      static const char32_t* const lig[] = {U"FF", U"FI", U"FL", U"FFI", U"FFL", U"ST", U"ST"};
      out += lig[c - 0xfb00];
    } else {
      out += char32_t(utf8proc_toupper(utf8proc_int32_t(c)));
    }
  }
  return out;
}

char32_t py_title_char(char32_t c) {
  if (c < 0x80) return (c >= U'a' && c <= U'z') ? char32_t(c - 32) : c;
  return char32_t(utf8proc_totitle(utf8proc_int32_t(c)));
}

}  // namespace dapo::data::jinja
