// Jinja's filters and tests (jinja2 3.1's filters.py and tests.py, without
// autoescaping), with transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False). Filters that return a
// generator in jinja2 (map, select, reject, selectattr, rejectattr, unique,
// items, batch) or an iterator (reverse) return a sequence that iterates
// alike but, as there, has no len(), cannot be indexed and is always true.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

#include "jinja_interp.h"

namespace dapo::data::jinja {
namespace {

using Fn = Value (*)(Interp&, const Value&, CallArgs&);

std::string str_arg(const Value& v) { return py_str(v); }

int64_t int_arg(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_undefined()) fail_undefined(v);
  throw RenderError(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer (" + what + ")");
}

// A generator / iterator result: iterable, no len, always true.
Value generator(std::vector<Value> items) { return Value::make_list(std::move(items), SeqKind::generator); }

// jinja2's ignore_case: lower() of strings, other values unchanged.
Value ignore_case(const Value& v) {
  if (!v.is_string()) return v;
  return Value::string(to_utf8(py_lower(to_u32(v.s))));
}

// _prepare_attribute_parts + environment.getitem: "a.0.b" -> item["a"][0]["b"].
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none() || attribute.is_undefined()) return parts;
  if (!attribute.is_string()) return {attribute};
  std::string part;
  auto push = [&] {
    bool digits = !part.empty();
    for (const char c : part)
      if (c < '0' || c > '9') digits = false;
    parts.push_back(digits ? Value::integer(std::stoll(part)) : Value::string(part));
    part.clear();
  };
  for (const char c : attribute.s) {
    if (c == '.') {
      push();
    } else {
      part += c;
    }
  }
  push();
  return parts;
}

Value get_attribute(Interp& in, Value item, const std::vector<Value>& parts, const std::optional<Value>& dflt = {}) {
  for (const Value& p : parts) {
    item = in.getitem(item, p);
    if (dflt && !dflt->is_none() && item.is_undefined()) item = *dflt;
  }
  return item;
}

std::vector<std::optional<Value>> bind(const CallArgs& args, const std::vector<std::string>& names,
                                       const std::string& filter) {
  return bind_args(args, names, filter);
}

Value arg_or(const std::optional<Value>& v, Value dflt) { return v ? *v : std::move(dflt); }

std::vector<Value> items_of(Interp& in, const Value& v) {
  std::vector<Value> items = iterate(v);
  in.tick(int64_t(items.size()));
  return items;
}

// ---- the filters ---------------------------------------------------------------------

Value f_abs(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "abs");
  if (v.is_float()) return Value::floating(std::fabs(v.f));
  if (v.is_int()) {
    if (v.as_int() == INT64_MIN) throw RenderError("integer overflow (dapo's Jinja integers are 64-bit)");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_undefined()) fail_undefined(v);
  throw RenderError("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"name"}, "attr");
  if (!p[0]) throw RenderError("do_attr() missing 1 required positional argument: 'name'");
  const std::string name = str_arg(*p[0]);
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_object()) {
    if (auto r = v.obj->getattr(name)) return *r;
  } else if (auto m = find_method(v, name)) {
    return *m;
  }
  (void)in;
  return undefined_attr(v, name);
}

Value f_batch(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"linecount", "fill_with"}, "batch");
  if (!p[0]) throw RenderError("do_batch() missing 1 required positional argument: 'linecount'");
  const int64_t n = int_arg(*p[0], "batch size");
  if (n <= 0) throw RenderError("batch size must be positive");
  std::vector<Value> out, tmp;
  for (const Value& item : items_of(in, v)) {
    if (int64_t(tmp.size()) == n) {
      out.push_back(Value::make_list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (p[1] && !p[1]->is_none())
      while (int64_t(tmp.size()) < n) tmp.push_back(*p[1]);
    out.push_back(Value::make_list(std::move(tmp)));
  }
  return generator(std::move(out));
}

Value f_capitalize(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "capitalize");
  std::u32string u = to_u32(py_str(v));
  if (u.empty()) return Value::string("");
  const char32_t first = py_title_char(u[0]);
  std::u32string rest = py_lower(std::u32string_view(u).substr(1));
  return Value::string(to_utf8(std::u32string(1, first) + rest));
}

Value f_center(Interp&, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"width"}, "center");
  const int64_t width = p[0] ? int_arg(*p[0], "width") : 80;
  const std::u32string u = to_u32(py_str(v));
  const int64_t len = int64_t(u.size());
  if (width <= len) return Value::string(to_utf8(u));
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  return Value::string(std::string(size_t(left), ' ') + to_utf8(u) + std::string(size_t(marg - left), ' '));
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"default_value", "boolean"}, "default");
  const Value dflt = arg_or(p[0], Value::string(""));
  const bool boolean = p[1] && truthy(*p[1]);
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
  return v;
}

Value f_dictsort(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"case_sensitive", "by", "reverse"}, "dictsort");
  const bool case_sensitive = p[0] && truthy(*p[0]);
  const std::string by = p[1] ? str_arg(*p[1]) : "key";
  const bool reverse = p[2] && truthy(*p[2]);
  if (by != "key" && by != "value") throw RenderError("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) throw RenderError("'" + type_name(v) + "' object has no attribute 'items'");
  std::vector<Value> items;
  for (const auto& kv : v.dict->items) items.push_back(Value::make_list({kv.first, kv.second}, SeqKind::tuple));
  in.tick(int64_t(items.size()));
  const size_t pos = by == "key" ? 0 : 1;
  auto key = [&](const Value& item) {
    const Value& x = item.list->items[pos];
    return case_sensitive ? x : ignore_case(x);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_compare(key(y), key(x), "<") < 0 : py_compare(key(x), key(y), "<") < 0;
  });
  return Value::make_list(std::move(items));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value f_escape(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "escape");
  return Value::string(html_escape(py_str(v)));
}

Value f_first(Interp& in, const Value& v, CallArgs& a) {
  bind(a, {}, "first");
  const std::vector<Value> items = items_of(in, v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

// The text of a number as Python's float() and int() take it: surrounding
// (Unicode) whitespace stripped; nullopt when a character left is not ASCII
// (Python would accept other digit scripts, which no template writes).
std::optional<std::string> number_text(const std::string& text) {
  const std::u32string u = to_u32(text);
  size_t b = 0, e = u.size();
  while (b < e && py_isspace(u[b])) ++b;
  while (e > b && py_isspace(u[e - 1])) --e;
  std::string s;
  for (size_t k = b; k < e; ++k) {
    if (u[k] >= 0x80) return std::nullopt;
    s += char(u[k]);
  }
  return s;
}

// Python's float(str): surrounding whitespace, underscores between digits,
// inf/nan words.
std::optional<double> parse_float(const std::string& text) {
  const std::optional<std::string> t = number_text(text);
  if (!t) return std::nullopt;
  const std::string& s = *t;
  if (s.empty()) return std::nullopt;
  std::string lower;
  for (const char c : s) lower += char(std::tolower(static_cast<unsigned char>(c)));
  std::string body = lower;
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1 : 1;
    body.erase(0, 1);
  }
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return std::nan("");
  std::string clean;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_') {
      if (k == 0 || k + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[k + 1])))
        return std::nullopt;
      continue;
    }
    const char c = s[k];
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
    clean += c;
  }
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  bool digit = false;
  for (const char c : clean)
    if (std::isdigit(static_cast<unsigned char>(c))) digit = true;
  if (!digit) return std::nullopt;
  return d;
}

// Python's int(str, base) for base 10 (and 2..36 with the usual prefixes for 0).
std::optional<int64_t> parse_int(const std::string& text, int64_t base) {
  const std::optional<std::string> t = number_text(text);
  if (!t) return std::nullopt;
  const std::string& s = *t;
  bool neg = false;
  size_t k = 0;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (k + 1 < s.size() && s[k] == '0') {
      const char x = char(std::tolower(static_cast<unsigned char>(s[k + 1])));
      const int64_t prefixed = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
      if (prefixed && (base == 0 || base == prefixed)) {
        base = prefixed;
        k += 2;
        if (k < s.size() && s[k] == '_') ++k;
      }
    }
    if (base == 0) base = 10;
  }
  if (base < 2 || base > 36 || k >= s.size()) return std::nullopt;
  unsigned __int128 v = 0;
  bool last_digit = false;
  for (; k < s.size(); ++k) {
    const char c = char(std::tolower(static_cast<unsigned char>(s[k])));
    if (c == '_') {
      if (!last_digit) return std::nullopt;
      last_digit = false;
      continue;
    }
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    v = v * unsigned(base) + unsigned(d);
    if (v > (unsigned __int128)(INT64_MAX) + 1) throw RenderError("integer overflow (dapo's Jinja integers are 64-bit)");
    last_digit = true;
  }
  if (!last_digit) return std::nullopt;
  if (!neg && v > (unsigned __int128)(INT64_MAX)) throw RenderError("integer overflow (dapo's Jinja integers are 64-bit)");
  return neg ? int64_t(-(__int128)v) : int64_t(v);
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"default"}, "float");
  const Value dflt = arg_or(p[0], Value::floating(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.s)) return Value::floating(*d);
  return dflt;
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"default", "base"}, "int");
  const Value dflt = arg_or(p[0], Value::integer(0));
  const int64_t base = p[1] ? int_arg(*p[1], "base") : 10;
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.f)) return dflt;
    if (std::fabs(v.f) >= 9.2e18) throw RenderError("integer overflow (dapo's Jinja integers are 64-bit)");
    return Value::integer(int64_t(std::trunc(v.f)));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.s, base)) return Value::integer(*i);
    if (auto d = parse_float(v.s)) {
      if (!std::isfinite(*d)) return dflt;
      if (std::fabs(*d) >= 9.2e18) throw RenderError("integer overflow (dapo's Jinja integers are 64-bit)");
      return Value::integer(int64_t(std::trunc(*d)));
    }
  }
  return dflt;
}

// str.splitlines(): \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
std::vector<std::u32string> splitlines(const std::u32string& s) {
  std::vector<std::u32string> lines;
  std::u32string cur;
  for (size_t k = 0; k < s.size(); ++k) {
    const char32_t c = s[k];
    const bool br = c == U'\n' || c == U'\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) {
      cur += c;
      continue;
    }
    if (c == U'\r' && k + 1 < s.size() && s[k + 1] == U'\n') ++k;
    lines.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

Value f_indent(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"width", "first", "blank"}, "indent");
  std::u32string indention;
  if (p[0] && p[0]->is_string()) {
    indention = to_u32(p[0]->s);
  } else {
    const int64_t width = p[0] ? int_arg(*p[0], "width") : 4;
    indention = std::u32string(size_t(std::max<int64_t>(width, 0)), U' ');
  }
  const bool first = p[1] && truthy(*p[1]);
  const bool blank = p[2] && truthy(*p[2]);
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) {  // jinja2 does s += "\n" on the value itself
    if (v.is_list() && v.list->seq == SeqKind::list) throw RenderError("'list' object has no attribute 'splitlines'");
    throw RenderError("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  }
  std::u32string s = to_u32(v.s) + U"\n";
  std::u32string rv;
  const std::vector<std::u32string> lines = splitlines(s);
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? U"\n" + indention : U"") + lines[k];
  } else {
    rv = lines.empty() ? U"" : lines[0];
    if (lines.size() > 1) {
      rv += U"\n";
      for (size_t k = 1; k < lines.size(); ++k) {
        if (k > 1) rv += U"\n";
        rv += lines[k].empty() ? lines[k] : indention + lines[k];
      }
    }
  }
  if (first) rv = indention + rv;
  std::string out = to_utf8(rv);
  in.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_items(Interp& in, const Value& v, CallArgs& a) {
  bind(a, {}, "items");
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) throw RenderError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& kv : v.dict->items) out.push_back(Value::make_list({kv.first, kv.second}, SeqKind::tuple));
  in.tick(int64_t(out.size()));
  return generator(std::move(out));
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"d", "attribute"}, "join");
  const std::string sep = p[0] ? py_str(*p[0]) : "";
  const std::vector<Value> parts = p[1] && !p[1]->is_none() ? attribute_parts(*p[1]) : std::vector<Value>{};
  std::string out;
  bool first = true;
  for (const Value& item : items_of(in, v)) {
    if (!first) out += sep;
    first = false;
    out += py_str(parts.empty() ? item : get_attribute(in, item, parts));
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_last(Interp& in, const Value& v, CallArgs& a) {
  bind(a, {}, "last");
  if (v.is_list() && v.list->seq == SeqKind::generator) throw RenderError("'generator' object is not reversible");
  if (!(v.is_undefined() || v.is_string() || v.is_list() || v.is_dict()))
    throw RenderError("'" + type_name(v) + "' object is not reversible");
  const std::vector<Value> items = items_of(in, v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_length(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "length");
  return Value::integer(py_len(v));
}

Value f_list(Interp& in, const Value& v, CallArgs& a) {
  bind(a, {}, "list");
  return Value::make_list(items_of(in, v));
}

Value f_lower(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "lower");
  return Value::string(to_utf8(py_lower(to_u32(py_str(v)))));
}

Value f_upper(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "upper");
  return Value::string(to_utf8(py_upper(to_u32(py_str(v)))));
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});  // jinja2: `if value:` before iterating
  const std::vector<Value> items = items_of(in, v);
  bool has_attribute = false;
  for (const auto& kw : a.kwargs) has_attribute |= kw.first == "attribute";
  if (a.args.empty() && has_attribute) {
    Value attribute, dflt = Value::none();
    for (const auto& [k, val] : a.kwargs) {
      if (k == "attribute")
        attribute = val;
      else if (k == "default")
        dflt = val;
      else
        throw RenderError("Unexpected keyword argument " + repr_string(k));
    }
    const std::vector<Value> parts = attribute_parts(attribute);
    for (const Value& item : items) out.push_back(get_attribute(in, item, parts, dflt));
    return generator(std::move(out));
  }
  if (a.args.empty()) throw RenderError("map requires a filter argument");
  const std::string name = py_str(a.args[0]);
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : items) out.push_back(in.apply_filter(name, item, rest));
  return generator(std::move(out));
}

Value select_or_reject(Interp& in, const Value& v, CallArgs& a, bool select, bool lookup_attr) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});
  std::vector<Value> parts;
  size_t off = 0;
  if (lookup_attr) {
    if (a.args.empty()) throw RenderError("Missing parameter for attribute name");
    parts = attribute_parts(a.args[0]);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs rest;
  if (a.args.size() > off) {
    test = py_str(a.args[off]);
    rest.args.assign(a.args.begin() + long(off) + 1, a.args.end());
    rest.kwargs = a.kwargs;
  }
  for (const Value& item : items_of(in, v)) {
    const Value x = lookup_attr ? get_attribute(in, item, parts) : item;
    const bool ok = test ? in.apply_test(*test, x, rest) : truthy(x);
    if (ok == select) out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_select(Interp& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, false); }
Value f_reject(Interp& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, true); }

Value min_or_max(Interp& in, const Value& v, CallArgs& a, bool want_max, const char* name) {
  const auto p = bind(a, {"case_sensitive", "attribute"}, name);
  const bool case_sensitive = p[0] && truthy(*p[0]);
  const std::vector<Value> parts = p[1] ? attribute_parts(*p[1]) : std::vector<Value>{};
  const std::vector<Value> items = items_of(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = parts.empty() ? item : get_attribute(in, item, parts);
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t k = 1; k < items.size(); ++k) {
    const Value kk = key(items[k]);
    const int c = py_compare(kk, best_key, want_max ? ">" : "<");
    if ((want_max && c == 1) || (!want_max && c == -1)) {
      best = k;
      best_key = kk;
    }
  }
  return items[best];
}

Value f_max(Interp& in, const Value& v, CallArgs& a) { return min_or_max(in, v, a, true, "max"); }
Value f_min(Interp& in, const Value& v, CallArgs& a) { return min_or_max(in, v, a, false, "min"); }

Value f_replace(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"old", "new", "count"}, "replace");
  if (!p[0] || !p[1]) throw RenderError("do_replace() missing required arguments 'old' and 'new'");
  CallArgs m;
  m.args = {Value::string(py_str(*p[0])), Value::string(py_str(*p[1]))};
  if (p[2] && !p[2]->is_none()) m.args.push_back(*p[2]);
  const Value s = Value::string(py_str(v));
  return in.call(*find_method(s, "replace"), std::move(m));
}

Value f_reverse(Interp& in, const Value& v, CallArgs& a) {
  bind(a, {}, "reverse");
  if (v.is_string()) {
    std::u32string u = to_u32(v.s);
    std::reverse(u.begin(), u.end());
    return Value::string(to_utf8(u));
  }
  std::vector<Value> items = items_of(in, v);
  std::reverse(items.begin(), items.end());
  const bool generator_input = v.is_list() && v.list->seq == SeqKind::generator;
  return generator_input ? Value::make_list(std::move(items)) : generator(std::move(items));
}

// Python's round(x, n) for floats: correctly rounded through the decimal text.
double py_round(double x, int64_t n) {
  if (!std::isfinite(x)) return x;
  if (n > 300) return x;
  if (n >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(n), x);
    return std::strtod(buf, nullptr);
  }
  const double p = std::pow(10.0, double(-n));
  const double y = x / p;
  double r = std::nearbyint(y);
  if (std::fabs(y - std::trunc(y)) == 0.5) r = 2.0 * std::nearbyint(y / 2.0);
  return r * p;
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"precision", "method"}, "round");
  const int64_t precision = p[0] ? int_arg(*p[0], "precision") : 0;
  const std::string method = p[1] ? py_str(*p[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw RenderError("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw RenderError("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int()) return Value::integer(v.as_int());  // round(int, n) stays an int (n >= 0)
    return Value::floating(py_round(v.f, precision));
  }
  const double scale = std::pow(10.0, double(precision));
  const double x = v.as_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "safe");
  return Value::string(py_str(v));
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"reverse", "case_sensitive", "attribute"}, "sort");
  const bool reverse = p[0] && truthy(*p[0]);
  const bool case_sensitive = p[1] && truthy(*p[1]);
  std::vector<std::vector<Value>> attrs;
  if (p[2] && !p[2]->is_none()) {
    if (p[2]->is_string()) {
      std::string part;
      for (const char c : p[2]->s + ",") {
        if (c == ',') {
          attrs.push_back(attribute_parts(Value::string(part)));
          part.clear();
        } else {
          part += c;
        }
      }
    } else {
      attrs.push_back(attribute_parts(*p[2]));
    }
  }
  std::vector<Value> items = items_of(in, v);
  auto key = [&](const Value& item) {
    if (attrs.empty()) return case_sensitive ? item : ignore_case(item);
    std::vector<Value> ks;
    for (const auto& parts : attrs) {
      Value k = get_attribute(in, item, parts);
      ks.push_back(case_sensitive ? k : ignore_case(k));
    }
    return Value::make_list(std::move(ks));
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) keyed.emplace_back(key(item), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? py_compare(y.first, x.first, "<") < 0 : py_compare(x.first, y.first, "<") < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::make_list(std::move(out));
}

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"attribute", "start"}, "sum");
  const std::vector<Value> parts = p[0] && !p[0]->is_none() ? attribute_parts(*p[0]) : std::vector<Value>{};
  Value rv = arg_or(p[1], Value::integer(0));
  for (const Value& item : items_of(in, v)) rv = binop(in, "+", rv, parts.empty() ? item : get_attribute(in, item, parts));
  return rv;
}

Value f_string(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "string");
  return Value::string(py_str(v));
}

Value f_title(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "title");
  // "".join(item[0].upper() + item[1:].lower() for item in re.split(r"([-\s\(\{\[\<]+)", s) if item)
  const std::u32string u = to_u32(py_str(v));
  std::u32string out;
  auto is_sep = [](char32_t c) {
    return c == U'-' || py_isspace(c) || c == U'(' || c == U'{' || c == U'[' || c == U'<';
  };
  size_t k = 0;
  while (k < u.size()) {
    size_t j = k;
    const bool sep = is_sep(u[k]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    const std::u32string_view item(u.data() + k, j - k);
    out += py_upper(item.substr(0, 1));
    out += py_lower(item.substr(1));
    k = j;
  }
  return Value::string(to_utf8(out));
}

Value f_tojson(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonOptions o;
  o.ensure_ascii = p[0] && truthy(*p[0]);
  if (p[1] && !p[1]->is_none()) {
    if (p[1]->is_string())
      o.indent_text = p[1]->s, o.indent = o.indent_text.empty() ? 0 : -1;
    else
      o.indent = std::max<int64_t>(int_arg(*p[1], "indent"), 0);
  }
  if (p[2] && !p[2]->is_none()) {
    const std::vector<Value> seps = iterate(*p[2]);
    if (seps.size() != 2) throw RenderError("separators must be a pair (item separator, key separator)");
    o.item_sep = py_str(seps[0]);
    o.key_sep = py_str(seps[1]);
  }
  o.sort_keys = p[3] && truthy(*p[3]);
  std::string out = to_json(v, o);
  in.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_trim(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"chars"}, "trim");
  CallArgs m;
  if (p[0]) m.args.push_back(*p[0]);
  return in.call(*find_method(Value::string(py_str(v)), "strip"), std::move(m));
}

Value f_truncate(Interp&, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"length", "killwords", "end", "leeway"}, "truncate");
  const int64_t length = p[0] ? int_arg(*p[0], "length") : 255;
  const bool killwords = p[1] && truthy(*p[1]);
  const std::u32string end = to_u32(p[2] ? py_str(*p[2]) : "...");
  const int64_t leeway = p[3] && !p[3]->is_none() ? int_arg(*p[3], "leeway") : 5;
  if (length < int64_t(end.size())) throw RenderError("expected length >= " + std::to_string(end.size()));
  if (!v.is_string()) {  // jinja2 measures and slices the value itself
    if (py_len(v) <= length + leeway) return v;
    if (!v.is_list()) throw RenderError("'" + type_name(v) + "' object is not subscriptable");
    throw RenderError("'" + type_name(v) + "' object has no attribute 'rsplit'");
  }
  const std::u32string s = to_u32(v.s);
  if (int64_t(s.size()) <= length + leeway) return v;
  std::u32string head = s.substr(0, size_t(length - int64_t(end.size())));
  if (!killwords) {
    const size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head.resize(sp);
  }
  return Value::string(to_utf8(head + end));
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
  const auto p = bind(a, {"case_sensitive", "attribute"}, "unique");
  const bool case_sensitive = p[0] && truthy(*p[0]);
  const std::vector<Value> parts = p[1] && !p[1]->is_none() ? attribute_parts(*p[1]) : std::vector<Value>{};
  std::vector<Value> out, seen;
  for (const Value& item : items_of(in, v)) {
    Value k = parts.empty() ? item : get_attribute(in, item, parts);
    if (!case_sensitive) k = ignore_case(k);
    if (!hashable(k)) throw RenderError("unhashable type: '" + type_name(k) + "'");
    bool dup = false;
    for (const Value& s : seen)
      if (py_equal(s, k)) dup = true;
    if (dup) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, CallArgs& a) {
  bind(a, {}, "wordcount");
  int64_t count = 0;
  bool in_word = false;
  for (const char32_t c : to_u32(py_str(v))) {
    const bool w = c == U'_' || py_isalpha(c) || py_isnumeric(c);
    if (w && !in_word) ++count;
    in_word = w;
  }
  return Value::integer(count);
}

Value f_format(Interp& in, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty())
    throw RenderError("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kwargs.empty()) {
    std::vector<std::pair<Value, Value>> kv;
    for (auto& [k, val] : a.kwargs) kv.emplace_back(Value::string(k), val);
    args = Value::make_dict(std::move(kv));
  } else {
    args = Value::make_list(a.args, SeqKind::tuple);
  }
  return Value::string(percent_format(in, py_str(v), args));
}

const std::map<std::string, Fn, std::less<>>& filters() {
  static const std::map<std::string, Fn, std::less<>> table = {
      {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},
      {"capitalize", f_capitalize}, {"center", f_center}, {"count", f_length},
      {"d", f_default},         {"default", f_default},   {"dictsort", f_dictsort},
      {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_escape}, {"format", f_format},
      {"indent", f_indent},     {"int", f_int},           {"items", f_items},
      {"join", f_join},         {"last", f_last},         {"length", f_length},
      {"list", f_list},         {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},           {"reject", f_reject},
      {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},         {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort},     {"string", f_string},
      {"sum", f_sum},           {"title", f_title},       {"tojson", f_tojson},
      {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

// ---- the tests ------------------------------------------------------------------------

Value test_arg(const CallArgs& a, const char* test) {
  const auto p = bind_args(a, {"other"}, test);
  if (!p[0]) throw RenderError(std::string(test) + "() missing 1 required positional argument");
  return *p[0];
}

bool t_odd(Interp& in, const Value& v, CallArgs& a) {
  bind_args(a, {}, "odd");
  return py_equal(binop(in, "%", v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interp& in, const Value& v, CallArgs& a) {
  bind_args(a, {}, "even");
  return py_equal(binop(in, "%", v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interp& in, const Value& v, CallArgs& a) {
  return py_equal(binop(in, "%", v, test_arg(a, "divisibleby")), Value::integer(0));
}
bool t_defined(Interp&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_false(Interp&, const Value& v, CallArgs&) { return v.is_bool() && !v.b; }
bool t_true(Interp&, const Value& v, CallArgs&) { return v.is_bool() && v.b; }
bool t_integer(Interp&, const Value& v, CallArgs&) { return v.kind == Kind::integer; }
bool t_float(Interp&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interp&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_sequence(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || indexable(v);
}
bool t_iterable(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || v.is_list();
}
bool t_callable(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || (v.is_object() && v.obj->callable());
}
bool t_escaped(Interp&, const Value&, CallArgs&) { return false; }
bool t_lower(Interp&, const Value& v, CallArgs&) {
  bool cased = false;
  for (const char32_t c : to_u32(py_str(v))) {
    if (py_iscased_upper(c)) return false;
    if (py_iscased_lower(c)) cased = true;
  }
  return cased;
}
bool t_upper(Interp&, const Value& v, CallArgs&) {
  bool cased = false;
  for (const char32_t c : to_u32(py_str(v))) {
    if (py_iscased_lower(c) || (py_iscased_upper(c) && py_title_char(c) == c && py_upper(std::u32string(1, c))[0] != c))
      return false;
    if (py_iscased_upper(c)) cased = true;
  }
  return cased;
}
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value o = test_arg(a, "sameas");
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::undefined: return false;
    case Kind::none: return true;
    case Kind::boolean: return v.b == o.b;
    case Kind::integer: return v.i == o.i && v.i >= -5 && v.i <= 256;
    case Kind::string: return v.s == o.s && v.s.size() <= 1;
    case Kind::list: return v.list == o.list;
    case Kind::dict: return v.dict == o.dict;
    case Kind::object: return v.obj == o.obj;
    default: return false;
  }
}
bool t_in(Interp&, const Value& v, CallArgs& a) { return contains(test_arg(a, "in"), v); }
bool t_eq(Interp&, const Value& v, CallArgs& a) { return py_equal(v, test_arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !py_equal(v, test_arg(a, "ne")); }
bool t_lt(Interp&, const Value& v, CallArgs& a) { return py_compare(v, test_arg(a, "lt"), "<") == -1; }
bool t_le(Interp&, const Value& v, CallArgs& a) {
  const int c = py_compare(v, test_arg(a, "le"), "<=");
  return c == -1 || c == 0;
}
bool t_gt(Interp&, const Value& v, CallArgs& a) { return py_compare(v, test_arg(a, "gt"), ">") == 1; }
bool t_ge(Interp&, const Value& v, CallArgs& a) {
  const int c = py_compare(v, test_arg(a, "ge"), ">=");
  return c == 1 || c == 0;
}
bool t_filter(Interp&, const Value& v, CallArgs&) { return v.is_string() && is_supported_filter(v.s); }
bool t_test(Interp&, const Value& v, CallArgs&) { return v.is_string() && is_supported_test(v.s); }

using TestFn = bool (*)(Interp&, const Value&, CallArgs&);

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = {
      {"odd", t_odd},           {"even", t_even},         {"divisibleby", t_divisibleby},
      {"defined", t_defined},   {"undefined", t_undefined}, {"filter", t_filter},
      {"test", t_test},         {"none", t_none},         {"boolean", t_boolean},
      {"false", t_false},       {"true", t_true},         {"integer", t_integer},
      {"float", t_float},       {"lower", t_lower},       {"upper", t_upper},
      {"string", t_string},     {"mapping", t_mapping},   {"number", t_number},
      {"sequence", t_sequence}, {"iterable", t_iterable}, {"callable", t_callable},
      {"sameas", t_sameas},     {"escaped", t_escaped},   {"in", t_in},
      {"==", t_eq},             {"eq", t_eq},             {"equalto", t_eq},
      {"!=", t_ne},             {"ne", t_ne},             {">", t_gt},
      {"gt", t_gt},             {"greaterthan", t_gt},    {">=", t_ge},
      {"ge", t_ge},             {"<", t_lt},              {"lt", t_lt},
      {"lessthan", t_lt},       {"<=", t_le},             {"le", t_le},
  };
  return table;
}

}  // namespace

bool is_supported_filter(std::string_view name) { return filters().count(name) > 0; }

bool is_jinja_filter(std::string_view name) {
  static const std::array<std::string_view, 14> others = {"filesizeformat", "groupby", "pprint", "random", "slice",
                                                          "striptags", "urlencode", "urlize", "wordwrap", "xmlattr",
                                                          "mark_safe", "forceescape", "tojson", "safe"};
  return is_supported_filter(name) || std::find(others.begin(), others.end(), name) != others.end();
}

bool is_supported_test(std::string_view name) { return tests().count(name) > 0; }

bool is_jinja_test(std::string_view name) { return is_supported_test(name); }

Value run_filter(Interp& in, const std::string& name, const Value& input, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) {
    if (is_jinja_filter(name)) throw RenderError("the filter '" + name + "' is not supported by dapo's Jinja subset");
    throw RenderError("No filter named " + repr_string(name) + " found.");
  }
  return it->second(in, input, args);
}

bool run_test(Interp& in, const std::string& name, const Value& input, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) {
    if (is_jinja_test(name)) throw RenderError("the test '" + name + "' is not supported by dapo's Jinja subset");
    throw RenderError("No test named " + repr_string(name) + " found.");
  }
  return it->second(in, input, args);
}

}  // namespace dapo::data::jinja
