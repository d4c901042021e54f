// What templates call on values and by name: Python's str, dict, list and
// tuple methods (the ones ImmutableSandboxedEnvironment allows; the
// mutating ones give jinja2's "access to attribute ... is unsafe"
// undefined), the globals (range, dict, namespace, joiner, cycler,
// transformers' raise_exception and strftime_now), and Python's two string
// formatting mini-languages (% and str.format).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "jinja_interp.h"

namespace dapo::data::jinja {

std::vector<std::optional<Value>> bind_args(const CallArgs& args, const std::vector<std::string>& names,
                                            const std::string& function) {
  std::vector<std::optional<Value>> out(names.size());
  if (args.args.size() > names.size())
    throw RenderError(function + "() takes at most " + std::to_string(names.size()) + " argument" +
                      (names.size() == 1 ? "" : "s") + " (" + std::to_string(args.args.size()) + " given)");
  for (size_t k = 0; k < args.args.size(); ++k) out[k] = args.args[k];
  for (const auto& [key, value] : args.kwargs) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) throw RenderError(function + "() got an unexpected keyword argument " + repr_string(key));
    const size_t k = size_t(it - names.begin());
    if (out[k]) throw RenderError(function + "() got multiple values for argument " + repr_string(key));
    out[k] = value;
  }
  return out;
}

namespace {

using U = std::u32string;

const std::string& need_str(const Value& v, const char* method, const char* what = "argument") {
  if (!v.is_string()) {
    if (v.is_undefined()) fail_undefined(v);
    throw RenderError(std::string(method) + "() " + what + " must be str, not " + type_name(v));
  }
  return v.s;
}

int64_t need_int(const Value& v, const char* method) {
  if (v.is_int()) return v.as_int();
  if (v.is_undefined()) fail_undefined(v);
  throw RenderError("'" + type_name(v) + "' object cannot be interpreted as an integer (" + method + ")");
}

// Python's slice-index normalisation of optional start/end for str methods.
void bounds(const std::optional<Value>& start, const std::optional<Value>& end, int64_t len, int64_t& b, int64_t& e) {
  auto norm = [&](const std::optional<Value>& v, int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    int64_t x = need_int(*v, "slice index");
    if (x < 0) x = std::max<int64_t>(x + len, 0);
    return std::min(x, len);
  };
  b = norm(start, 0);
  e = norm(end, len);
}

int64_t find_sub(const U& s, const U& sub, int64_t b, int64_t e, bool reverse) {
  if (e - b < int64_t(sub.size())) return -1;
  if (!reverse) {
    const size_t p = s.substr(size_t(b), size_t(e - b)).find(sub);
    return p == U::npos ? -1 : b + int64_t(p);
  }
  const size_t p = s.substr(size_t(b), size_t(e - b)).rfind(sub);
  return p == U::npos ? -1 : b + int64_t(p);
}

U strip_chars(const U& s, const std::optional<Value>& chars, bool left, bool right, const char* method) {
  size_t b = 0, e = s.size();
  std::u32string set;
  const bool ws = !chars || chars->is_none();
  if (!ws) set = to_u32(need_str(*chars, method, "arg"));
  auto strip = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != U::npos; };
  if (left)
    while (b < e && strip(s[b])) ++b;
  if (right)
    while (e > b && strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::vector<Value> split(const U& s, const std::optional<Value>& sep_arg, int64_t maxsplit, bool reverse) {
  std::vector<U> parts;
  if (!sep_arg || sep_arg->is_none()) {
    // Runs of whitespace; leading/trailing whitespace ignored.
    if (!reverse) {
      size_t k = 0;
      while (true) {
        while (k < s.size() && py_isspace(s[k])) ++k;
        if (k >= s.size()) break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
          parts.push_back(s.substr(k));  // the rest, trailing whitespace kept
          break;
        }
        size_t j = k;
        while (j < s.size() && !py_isspace(s[j])) ++j;
        parts.push_back(s.substr(k, j - k));
        k = j;
      }
    } else {
      size_t k = s.size();
      while (true) {
        while (k > 0 && py_isspace(s[k - 1])) --k;
        if (k == 0) break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
          parts.push_back(s.substr(0, k));  // the rest, leading whitespace kept
          break;
        }
        size_t j = k;
        while (j > 0 && !py_isspace(s[j - 1])) --j;
        parts.push_back(s.substr(j, k - j));
        k = j;
      }
      std::reverse(parts.begin(), parts.end());
    }
  } else {
    const U sep = to_u32(need_str(*sep_arg, "split", "separator"));
    if (sep.empty()) throw RenderError("empty separator");
    if (!reverse) {
      size_t k = 0;
      while (true) {
        const size_t p = (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) ? U::npos : s.find(sep, k);
        if (p == U::npos) {
          parts.push_back(s.substr(k));
          break;
        }
        parts.push_back(s.substr(k, p - k));
        k = p + sep.size();
      }
    } else {
      size_t e = s.size();
      while (true) {
        size_t p = U::npos;
        if (!(maxsplit >= 0 && int64_t(parts.size()) == maxsplit) && e >= sep.size())
          p = s.rfind(sep, e - sep.size());
        if (p == U::npos) {
          parts.push_back(s.substr(0, e));
          break;
        }
        parts.push_back(s.substr(p + sep.size(), e - p - sep.size()));
        e = p;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  std::vector<Value> out;
  for (const U& p : parts) out.push_back(Value::string(to_utf8(p)));
  return out;
}

bool is_cased_char(char32_t c) { return py_iscased_lower(c) || py_iscased_upper(c); }

U py_title(const U& s) {
  U out;
  bool prev_cased = false;
  for (const char32_t c : s) {
    if (prev_cased)
      out += py_lower(U(1, c));
    else
      out += py_title_char(c);
    prev_cased = is_cased_char(c);
  }
  return out;
}

Value str_pad(const U& s, int64_t width, char32_t fill, char align) {
  const int64_t len = int64_t(s.size());
  if (width <= len) return Value::string(to_utf8(s));
  const int64_t marg = width - len;
  int64_t left = 0;
  if (align == '>') left = marg;
  if (align == '^') left = marg / 2 + (marg & width & 1);
  return Value::string(to_utf8(U(size_t(left), fill) + s + U(size_t(marg - left), fill)));
}

char32_t fill_char(const std::optional<Value>& v, const char* method) {
  if (!v) return U' ';
  const U f = to_u32(need_str(*v, method, "fillchar"));
  if (f.size() != 1) throw RenderError("The fill character must be exactly one character long");
  return f[0];
}

bool starts_or_ends(const U& s, const Value& what, int64_t b, int64_t e, bool ends, const char* method) {
  std::vector<Value> options;
  if (what.is_list() && what.list->seq == SeqKind::tuple)
    options = what.list->items;
  else if (what.is_string())
    options = {what};
  else
    throw RenderError(std::string(method) + " first arg must be str or a tuple of str, not " + type_name(what));
  for (const Value& o : options) {
    const U p = to_u32(need_str(o, method));
    if (e - b < int64_t(p.size())) continue;
    const size_t at = ends ? size_t(e) - p.size() : size_t(b);
    if (s.compare(at, p.size(), p) == 0) return true;
  }
  return false;
}

Value str_method(Interp& in, const std::string& self, const std::string& name, CallArgs& a) {
  const U s = to_u32(self);
  const int64_t len = int64_t(s.size());
  auto str = [](const U& u) { return Value::string(to_utf8(u)); };
  if (name == "startswith" || name == "endswith") {
    const auto p = bind_args(a, {"prefix", "start", "end"}, name);
    if (!p[0]) throw RenderError(name + "() takes at least 1 argument (0 given)");
    int64_t b, e;
    bounds(p[1], p[2], len, b, e);
    return Value::boolean(starts_or_ends(s, *p[0], b, e, name == "endswith", name.c_str()));
  }
  if (name == "split" || name == "rsplit") {
    const auto p = bind_args(a, {"sep", "maxsplit"}, name);
    const int64_t maxsplit = p[1] ? need_int(*p[1], "maxsplit") : -1;
    return Value::make_list(split(s, p[0], maxsplit, name == "rsplit"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto p = bind_args(a, {"chars"}, name);
    return str(strip_chars(s, p[0], name != "rstrip", name != "lstrip", name.c_str()));
  }
  if (name == "lower" || name == "casefold") {
    bind_args(a, {}, name);
    return str(py_lower(s));
  }
  if (name == "upper") {
    bind_args(a, {}, name);
    return str(py_upper(s));
  }
  if (name == "title") {
    bind_args(a, {}, name);
    return str(py_title(s));
  }
  if (name == "capitalize") {
    bind_args(a, {}, name);
    if (s.empty()) return str(s);
    return str(U(1, py_title_char(s[0])) + py_lower(std::u32string_view(s).substr(1)));
  }
  if (name == "swapcase") {
    bind_args(a, {}, name);
    U out;
    for (const char32_t c : s) out += py_iscased_upper(c) ? py_lower(U(1, c)) : py_iscased_lower(c) ? py_upper(U(1, c)) : U(1, c);
    return str(out);
  }
  if (name == "replace") {
    const auto p = bind_args(a, {"old", "new", "count"}, name);
    if (!p[0] || !p[1]) throw RenderError("replace() takes at least 2 arguments");
    const U old = to_u32(need_str(*p[0], "replace"));
    const U neu = to_u32(need_str(*p[1], "replace"));
    int64_t count = p[2] ? need_int(*p[2], "count") : -1;
    U out;
    if (old.empty()) {
      for (size_t k = 0; k <= s.size(); ++k) {
        if (count != 0) {
          out += neu;
          if (count > 0) --count;
        }
        if (k < s.size()) out += s[k];
        in.check_size(out.size());
      }
      return str(out);
    }
    size_t k = 0;
    while (true) {
      const size_t p2 = count == 0 ? U::npos : s.find(old, k);
      if (p2 == U::npos) {
        out += s.substr(k);
        break;
      }
      out += s.substr(k, p2 - k);
      out += neu;
      in.check_size(out.size());
      k = p2 + old.size();
      if (count > 0) --count;
    }
    return str(out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const auto p = bind_args(a, {"sub", "start", "end"}, name);
    if (!p[0]) throw RenderError(name + "() takes at least 1 argument (0 given)");
    const U sub = to_u32(need_str(*p[0], name.c_str()));
    int64_t b, e;
    bounds(p[1], p[2], len, b, e);
    if (name == "count") {
      if (b > e) return Value::integer(0);
      if (sub.empty()) return Value::integer(e - b + 1);
      int64_t n = 0;
      for (int64_t k = b; k + int64_t(sub.size()) <= e;) {
        if (s.compare(size_t(k), sub.size(), sub) == 0) {
          ++n;
          k += int64_t(sub.size());
        } else {
          ++k;
        }
      }
      return Value::integer(n);
    }
    const int64_t r = b > e ? -1 : find_sub(s, sub, b, e, name[0] == 'r');
    if (r < 0 && (name == "index" || name == "rindex")) throw RenderError("substring not found");
    return Value::integer(r);
  }
  if (name == "join") {
    const auto p = bind_args(a, {"iterable"}, name);
    if (!p[0]) throw RenderError("join() takes exactly one argument (0 given)");
    std::string out;
    const std::vector<Value> items = iterate(*p[0]);
    in.tick(int64_t(items.size()));
    for (size_t k = 0; k < items.size(); ++k) {
      if (!items[k].is_string())
        throw RenderError("sequence item " + std::to_string(k) + ": expected str instance, " + type_name(items[k]) +
                          " found");
      if (k) out += self;
      out += items[k].s;
      in.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name.rfind("is", 0) == 0) {
    bind_args(a, {}, name);
    if (name == "isidentifier") {
      if (s.empty() || !(s[0] == U'_' || py_isalpha(s[0]))) return Value::boolean(false);
      for (const char32_t c : s)
        if (!(c == U'_' || py_isalpha(c) || py_isdecimal(c))) return Value::boolean(false);
      return Value::boolean(true);
    }
    if (name == "islower" || name == "isupper") {
      bool cased = false;
      for (const char32_t c : s) {
        if (name == "islower" ? py_iscased_upper(c) : py_iscased_lower(c)) return Value::boolean(false);
        if (name == "islower" ? py_iscased_lower(c) : py_iscased_upper(c)) cased = true;
      }
      return Value::boolean(cased);
    }
    if (name == "istitle") {
      bool cased = false, prev = false;
      for (const char32_t c : s) {
        if (py_iscased_upper(c)) {
          if (prev) return Value::boolean(false);
          prev = cased = true;
        } else if (py_iscased_lower(c)) {
          if (!prev) return Value::boolean(false);
          prev = cased = true;
        } else {
          prev = false;
        }
      }
      return Value::boolean(cased);
    }
    bool (*pred)(char32_t) = nullptr;
    if (name == "isdigit") pred = py_isdigit;
    if (name == "isdecimal") pred = py_isdecimal;
    if (name == "isnumeric") pred = py_isnumeric;
    if (name == "isalpha") pred = py_isalpha;
    if (name == "isspace") pred = py_isspace;
    if (name == "isalnum") pred = [](char32_t c) { return py_isalpha(c) || py_isnumeric(c); };
    if (name == "isprintable") {
      for (const char32_t c : s)
        if (!py_isprintable(c)) return Value::boolean(false);
      return Value::boolean(true);
    }
    if (name == "isascii") {
      for (const char32_t c : s)
        if (c >= 0x80) return Value::boolean(false);
      return Value::boolean(true);
    }
    if (!pred) throw RenderError("'str' object has no attribute " + repr_string(name));
    if (s.empty()) return Value::boolean(false);
    for (const char32_t c : s)
      if (!pred(c)) return Value::boolean(false);
    return Value::boolean(true);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const auto p = bind_args(a, {"width", "fillchar"}, name);
    if (!p[0]) throw RenderError(name + "() takes at least 1 argument (0 given)");
    const char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    const int64_t width = need_int(*p[0], name.c_str());
    in.check_size(size_t(std::max<int64_t>(width, 0)));
    return str_pad(s, width, fill_char(p[1], name.c_str()), align);
  }
  if (name == "zfill") {
    const auto p = bind_args(a, {"width"}, name);
    if (!p[0]) throw RenderError("zfill() takes exactly one argument (0 given)");
    const int64_t width = need_int(*p[0], "zfill");
    in.check_size(size_t(std::max<int64_t>(width, 0)));
    if (width <= len) return str(s);
    U out = s;
    const size_t at = !s.empty() && (s[0] == U'+' || s[0] == U'-') ? 1 : 0;
    out.insert(at, U(size_t(width - len), U'0'));
    return str(out);
  }
  if (name == "partition" || name == "rpartition") {
    const auto p = bind_args(a, {"sep"}, name);
    if (!p[0]) throw RenderError(name + "() takes exactly one argument (0 given)");
    const U sep = to_u32(need_str(*p[0], name.c_str()));
    if (sep.empty()) throw RenderError("empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == U::npos) {
      if (name == "partition") return Value::make_list({str(s), Value::string(""), Value::string("")}, SeqKind::tuple);
      return Value::make_list({Value::string(""), Value::string(""), str(s)}, SeqKind::tuple);
    }
    return Value::make_list({str(s.substr(0, at)), str(sep), str(s.substr(at + sep.size()))}, SeqKind::tuple);
  }
  if (name == "splitlines") {
    const auto p = bind_args(a, {"keepends"}, name);
    const bool keep = p[0] && truthy(*p[0]);
    std::vector<Value> out;
    U cur;
    for (size_t k = 0; k < s.size(); ++k) {
      const char32_t c = s[k];
      const bool br = c == U'\n' || c == U'\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                      c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!br) {
        cur += c;
        continue;
      }
      U end(1, c);
      if (c == U'\r' && k + 1 < s.size() && s[k + 1] == U'\n') {
        end += U'\n';
        ++k;
      }
      out.push_back(str(keep ? cur + end : cur));
      cur.clear();
    }
    if (!cur.empty()) out.push_back(str(cur));
    return Value::make_list(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const auto p = bind_args(a, {"affix"}, name);
    if (!p[0]) throw RenderError(name + "() takes exactly one argument (0 given)");
    const U x = to_u32(need_str(*p[0], name.c_str()));
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0 && s.size() >= x.size()) return str(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return str(s.substr(0, s.size() - x.size()));
    return str(s);
  }
  if (name == "format") return Value::string(str_format(in, self, a));
  throw RenderError("'str' object has no attribute " + repr_string(name));
}

Value dict_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
  const DictData& d = *self.dict;
  if (name == "get") {
    const auto p = bind_args(a, {"key", "default"}, "get");
    if (!p[0]) throw RenderError("get expected at least 1 argument, got 0");
    if (!hashable(*p[0])) throw RenderError("unhashable type: '" + type_name(*p[0]) + "'");
    if (const Value* v = d.find(*p[0])) return *v;
    return p[1] ? *p[1] : Value::none();
  }
  bind_args(a, {}, name);
  std::vector<Value> out;
  in.tick(int64_t(d.items.size()));
  if (name == "items") {
    for (const auto& kv : d.items) out.push_back(Value::make_list({kv.first, kv.second}, SeqKind::tuple));
    return Value::make_list(std::move(out), SeqKind::dict_items);
  }
  if (name == "keys") {
    for (const auto& kv : d.items) out.push_back(kv.first);
    return Value::make_list(std::move(out), SeqKind::dict_keys);
  }
  if (name == "values") {
    for (const auto& kv : d.items) out.push_back(kv.second);
    return Value::make_list(std::move(out), SeqKind::dict_values);
  }
  if (name == "copy") return Value::make_dict(d.items);
  throw RenderError("'dict' object has no attribute " + repr_string(name));
}

Value list_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
  const std::vector<Value>& items = self.list->items;
  if (name == "count") {
    const auto p = bind_args(a, {"value"}, "count");
    if (!p[0]) throw RenderError("count() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (const Value& v : items) n += py_equal(v, *p[0]);
    in.tick(int64_t(items.size()));
    return Value::integer(n);
  }
  if (name == "index") {
    const auto p = bind_args(a, {"value", "start", "stop"}, "index");
    if (!p[0]) throw RenderError("index expected at least 1 argument, got 0");
    int64_t b, e;
    bounds(p[1], p[2], int64_t(items.size()), b, e);
    for (int64_t k = b; k < e; ++k)
      if (py_equal(items[size_t(k)], *p[0])) return Value::integer(k);
    throw RenderError(py_repr(*p[0]) + " is not in " + type_name(self));
  }
  if (name == "copy") {
    bind_args(a, {}, "copy");
    return Value::make_list(items);
  }
  throw RenderError("'" + type_name(self) + "' object has no attribute " + repr_string(name));
}

}  // namespace

std::optional<Value> find_method(const Value& self, const std::string& name) {
  static const std::set<std::string> str_methods = {
      "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "lower", "casefold", "upper",
      "title", "capitalize", "swapcase", "replace", "find", "rfind", "index", "rindex", "count", "join",
      "isidentifier", "islower", "isupper", "istitle", "isdigit", "isdecimal", "isnumeric", "isalpha", "isspace",
      "isalnum", "isprintable", "isascii", "center", "ljust", "rjust", "zfill", "partition", "rpartition",
      "splitlines", "removeprefix", "removesuffix", "format"};
  static const std::set<std::string> dict_methods = {"get", "items", "keys", "values", "copy"};
  static const std::set<std::string> dict_unsafe = {"clear", "pop", "popitem", "setdefault", "update"};
  static const std::set<std::string> list_methods = {"count", "index", "copy"};
  static const std::set<std::string> list_unsafe = {"append", "clear", "extend", "insert", "pop", "remove", "reverse",
                                                    "sort"};
  auto unsafe = [&](const char* type) {
    return Value::undefined("access to attribute " + repr_string(name) + " of '" + type + "' object is unsafe.");
  };
  if (self.is_string() && str_methods.count(name)) {
    const std::string s = self.s;
    return Value::object(std::make_shared<Builtin>(
        name, [s, name](Interp& in, CallArgs& a) { return str_method(in, s, name, a); }, "str"));
  }
  if (self.is_dict()) {
    if (dict_unsafe.count(name)) return unsafe("dict");
    if (!dict_methods.count(name)) return std::nullopt;
    return Value::object(std::make_shared<Builtin>(
        name, [self, name](Interp& in, CallArgs& a) { return dict_method(in, self, name, a); }, "dict"));
  }
  if (indexable(self)) {
    const bool is_list = self.list->seq == SeqKind::list;
    if (is_list && list_unsafe.count(name)) return unsafe("list");
    if (!list_methods.count(name) || (!is_list && name == "copy")) return std::nullopt;
    return Value::object(std::make_shared<Builtin>(
        name, [self, name](Interp& in, CallArgs& a) { return list_method(in, self, name, a); }, type_name(self)));
  }
  return std::nullopt;
}

// ---- globals ----------------------------------------------------------------------------

namespace {

class NamespaceObj : public Object {
 public:
  std::vector<std::pair<std::string, Value>> attrs;
  std::string type_name() const override { return "Namespace"; }
  std::optional<Value> getattr(const std::string& name) const override {
    for (const auto& [k, v] : attrs)
      if (k == name) return v;
    return std::nullopt;
  }
  bool set_attr(const std::string& name, Value v) override {
    for (auto& [k, old] : attrs)
      if (k == name) {
        old = std::move(v);
        return true;
      }
    attrs.emplace_back(name, std::move(v));
    return true;
  }
  std::string repr() const override {
    std::string out = "<Namespace {";
    for (size_t k = 0; k < attrs.size(); ++k)
      out += (k ? ", " : "") + repr_string(attrs[k].first) + ": " + py_repr(attrs[k].second);
    return out + "}>";
  }
};

class CyclerObj : public Object, public std::enable_shared_from_this<CyclerObj> {
 public:
  std::vector<Value> items;
  size_t pos = 0;
  std::string type_name() const override { return "Cycler"; }
  std::optional<Value> getattr(const std::string& name) const override {
    auto self = std::const_pointer_cast<CyclerObj>(shared_from_this());
    if (name == "current") return items[pos];
    if (name == "next")
      return Value::object(std::make_shared<Builtin>("next", [self](Interp&, CallArgs&) {
        Value v = self->items[self->pos];
        self->pos = (self->pos + 1) % self->items.size();
        return v;
      }));
    if (name == "reset")
      return Value::object(std::make_shared<Builtin>("reset", [self](Interp&, CallArgs&) {
        self->pos = 0;
        return Value::none();
      }));
    return std::nullopt;
  }
};

// dict(*args, **kwargs) as Python builds it.
std::vector<std::pair<Value, Value>> dict_items(const CallArgs& a, const char* fn) {
  std::vector<std::pair<Value, Value>> items;
  auto put = [&](Value k, Value v) {
    if (!hashable(k)) throw RenderError("unhashable type: '" + type_name(k) + "'");
    for (auto& kv : items)
      if (py_equal(kv.first, k)) {
        kv.second = std::move(v);
        return;
      }
    items.emplace_back(std::move(k), std::move(v));
  };
  if (a.args.size() > 1)
    throw RenderError(std::string(fn) + " expected at most 1 argument, got " + std::to_string(a.args.size()));
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& kv : src.dict->items) put(kv.first, kv.second);
    } else {
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2)
          throw RenderError("dictionary update sequence element has length " + std::to_string(kv.size()) +
                            "; 2 is required");
        put(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kwargs) put(Value::string(k), v);
  return items;
}

void add(Scope& scope, const std::string& name, Builtin::Fn fn) {
  scope.set(name, Value::object(std::make_shared<Builtin>(name, std::move(fn))));
}

}  // namespace

void add_globals(Scope& scope) {
  add(scope, "range", [](Interp& in, CallArgs& a) {
    if (!a.kwargs.empty()) throw RenderError("range() takes no keyword arguments");
    if (a.args.empty() || a.args.size() > 3)
      throw RenderError("range expected at most 3 arguments, got " + std::to_string(a.args.size()));
    int64_t start = 0, stop, step = 1;
    if (a.args.size() == 1) {
      stop = need_int(a.args[0], "range");
    } else {
      start = need_int(a.args[0], "range");
      stop = need_int(a.args[1], "range");
      if (a.args.size() == 3) step = need_int(a.args[2], "range");
    }
    if (step == 0) throw RenderError("range() arg 3 must not be zero");
    const __int128 n = step > 0 ? (stop > start ? ((__int128)stop - start + step - 1) / step : 0)
                                : (start > stop ? ((__int128)start - stop - step - 1) / -step : 0);
    if (n > 100000)
      throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> out;
    in.tick(int64_t(n));
    return Value::make_range(start, stop, step);
  });
  add(scope, "dict", [](Interp&, CallArgs& a) { return Value::make_dict(dict_items(a, "dict")); });
  add(scope, "namespace", [](Interp&, CallArgs& a) {
    auto ns = std::make_shared<NamespaceObj>();
    for (auto& [k, v] : dict_items(a, "namespace")) {
      if (!k.is_string()) throw RenderError("keywords must be strings");
      ns->attrs.emplace_back(k.s, v);
    }
    return Value::object(ns);
  });
  add(scope, "joiner", [](Interp&, CallArgs& a) {
    const auto p = bind_args(a, {"sep"}, "joiner");
    const std::string sep = p[0] ? py_str(*p[0]) : ", ";
    auto used = std::make_shared<bool>(false);
    return Value::object(std::make_shared<Builtin>("joiner", [sep, used](Interp&, CallArgs&) {
      if (!*used) {
        *used = true;
        return Value::string("");
      }
      return Value::string(sep);
    }));
  });
  add(scope, "cycler", [](Interp&, CallArgs& a) {
    if (a.args.empty()) throw RenderError("at least one item has to be provided");
    auto c = std::make_shared<CyclerObj>();
    c->items = a.args;
    return Value::object(c);
  });
  add(scope, "raise_exception", [](Interp&, CallArgs& a) -> Value {
    const auto p = bind_args(a, {"message"}, "raise_exception");
    throw RenderError("raise_exception: " + (p[0] ? py_str(*p[0]) : std::string()));
  });
  add(scope, "strftime_now", [](Interp&, CallArgs& a) {
    const auto p = bind_args(a, {"format"}, "strftime_now");
    if (!p[0]) throw RenderError("strftime_now() missing 1 required positional argument: 'format'");
    const std::string fmt = need_str(*p[0], "strftime_now");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    if (fmt.empty()) return Value::string("");
    std::vector<char> buf(fmt.size() * 8 + 256);
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    return Value::string(std::string(buf.data(), n));
  });
}

// ---- % formatting -------------------------------------------------------------------------

namespace {

std::string format_int(int64_t v, char type, const std::string& flags, int64_t width, int64_t prec) {
  std::string digits;
  const bool neg = v < 0;
  const uint64_t mag = neg ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  char buf[80];
  if (type == 'x' || type == 'X')
    std::snprintf(buf, sizeof buf, type == 'x' ? "%llx" : "%llX", (unsigned long long)mag);
  else if (type == 'o')
    std::snprintf(buf, sizeof buf, "%llo", (unsigned long long)mag);
  else
    std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)mag);
  digits = buf;
  if (prec >= 0 && int64_t(digits.size()) < prec) digits = std::string(size_t(prec - int64_t(digits.size())), '0') + digits;
  std::string prefix;
  if (flags.find('#') != std::string::npos) {
    if (type == 'x') prefix = "0x";
    if (type == 'X') prefix = "0X";
    if (type == 'o') prefix = "0o";
  }
  std::string sign = neg ? "-" : flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "";
  std::string body = sign + prefix + digits;
  if (int64_t(body.size()) < width) {
    const size_t pad = size_t(width - int64_t(body.size()));
    if (flags.find('-') != std::string::npos)
      body += std::string(pad, ' ');
    else if (flags.find('0') != std::string::npos)
      body = sign + prefix + std::string(pad, '0') + digits;
    else
      body = std::string(pad, ' ') + body;
  }
  return body;
}

std::string format_float(double v, char type, const std::string& flags, int64_t width, int64_t prec) {
  std::string spec = "%";
  for (const char f : flags)
    if (f == '-' || f == '+' || f == ' ' || f == '0' || f == '#') spec += f;
  if (width > 0) spec += std::to_string(width);
  spec += "." + std::to_string(prec < 0 ? 6 : prec);
  spec += type;
  std::vector<char> buf(size_t(std::max<int64_t>(width, 0)) + 400);
  std::snprintf(buf.data(), buf.size(), spec.c_str(), v);
  return buf.data();
}

std::string pad_text(const std::string& s, const std::string& flags, int64_t width) {
  const int64_t len = utf8_length(s);
  if (len >= width) return s;
  const std::string pad(size_t(width - len), ' ');
  return flags.find('-') != std::string::npos ? s + pad : pad + s;
}

}  // namespace

std::string percent_format(Interp& in, const std::string& fmt, const Value& args) {
  std::vector<Value> list;
  const bool mapping = args.is_dict();
  if (args.is_list() && args.list->seq == SeqKind::tuple)
    list = args.list->items;
  else
    list = {args};
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> Value {
    if (next >= list.size()) throw RenderError("not enough arguments for format string");
    return list[next++];
  };
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) throw RenderError("incomplete format");
    std::optional<Value> keyed;
    if (fmt[k] == '(') {
      if (!mapping) throw RenderError("format requires a mapping");
      int depth = 1;
      size_t j = k + 1;
      for (; j < fmt.size() && depth > 0; ++j) depth += fmt[j] == '(' ? 1 : fmt[j] == ')' ? -1 : 0;
      if (depth) throw RenderError("incomplete format key");
      const std::string key = fmt.substr(k + 1, j - k - 2);
      const Value* v = args.dict->find(key);
      if (!v) throw RenderError("KeyError: " + repr_string(key));
      keyed = *v;
      used_mapping = true;
      k = j;
    }
    std::string flags;
    while (k < fmt.size() && std::string("-+ #0").find(fmt[k]) != std::string::npos) flags += fmt[k++];
    int64_t width = -1, prec = -1;
    if (k < fmt.size() && fmt[k] == '*') {
      width = need_int(take(), "* width");
      if (width < 0) {
        flags += '-';
        width = -width;
      }
      ++k;
    } else {
      while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) width = std::max<int64_t>(width, 0) * 10 + (fmt[k++] - '0');
    }
    if (k < fmt.size() && fmt[k] == '.') {
      ++k;
      prec = 0;
      if (k < fmt.size() && fmt[k] == '*') {
        prec = need_int(take(), "* precision");
        ++k;
      } else {
        while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) prec = prec * 10 + (fmt[k++] - '0');
      }
    }
    while (k < fmt.size() && (fmt[k] == 'h' || fmt[k] == 'l' || fmt[k] == 'L')) ++k;
    if (k >= fmt.size()) throw RenderError("incomplete format");
    const char type = fmt[k];
    if (type == '%') {
      out += '%';
      continue;
    }
    const Value v = keyed ? *keyed : take();
    in.check_size(size_t(std::max<int64_t>(width, 0)) + out.size());
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? py_str(v) : py_repr(v);
        if (prec >= 0) s = to_utf8(to_u32(s).substr(0, size_t(prec)));
        out += pad_text(s, flags, width);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        int64_t i;
        if (v.is_int()) {
          i = v.as_int();
        } else if (v.is_float() && (type == 'd' || type == 'i' || type == 'u')) {
          if (!std::isfinite(v.f)) throw RenderError("cannot convert float infinity or NaN to integer");
          i = int64_t(std::trunc(v.f));
        } else {
          if (v.is_undefined()) fail_undefined(v);
          throw RenderError(std::string("%") + type + " format: " +
                            (type == 'x' || type == 'X' || type == 'o' ? "an integer" : "a real number") +
                            " is required, not " + type_name(v));
        }
        out += format_int(i, type == 'i' || type == 'u' ? 'd' : type, flags, width, prec);
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) throw RenderError("must be real number, not " + type_name(v));
        out += format_float(v.as_double(), type, flags, width, prec);
        break;
      }
      case 'c': {
        std::string c;
        if (v.is_int())
          c = to_utf8(U(1, char32_t(v.as_int())));
        else if (v.is_string() && utf8_length(v.s) == 1)
          c = v.s;
        else
          throw RenderError("%c requires int or char");
        out += pad_text(c, flags, width);
        break;
      }
      default:
        throw RenderError(std::string("unsupported format character '") + type + "'");
    }
  }
  // Python skips this check when the argument is a mapping-like object (one
  // with __getitem__: dict, list, range, jinja2's Undefined), not a tuple.
  const bool mapping_like = mapping || args.is_undefined() ||
                            (args.is_list() && (args.list->seq == SeqKind::list || args.list->seq == SeqKind::range));
  if (!mapping_like && !used_mapping && next < list.size())
    throw RenderError("not all arguments converted during string formatting");
  in.check_size(out.size());
  return out;
}

// ---- str.format ----------------------------------------------------------------------------

namespace {

std::string apply_spec(Interp& in, const Value& v, const std::string& spec) {
  if (spec.empty()) return py_str(v);
  // [[fill]align][sign][#][0][width][,|_][.precision][type]
  size_t k = 0;
  const U u = to_u32(spec);
  char32_t fill = U' ';
  char align = 0;
  auto is_align = [](char32_t c) { return c == U'<' || c == U'>' || c == U'^' || c == U'='; };
  if (u.size() >= 2 && is_align(u[1])) {
    fill = u[0];
    align = char(u[1]);
    k = 2;
  } else if (!u.empty() && is_align(u[0])) {
    align = char(u[0]);
    k = 1;
  }
  char sign = 0;
  if (k < u.size() && (u[k] == U'+' || u[k] == U'-' || u[k] == U' ')) sign = char(u[k++]);
  bool alt = false;
  if (k < u.size() && u[k] == U'#') alt = true, ++k;
  if (k < u.size() && u[k] == U'0') {
    if (!align) fill = U'0', align = '=';
    ++k;
  }
  int64_t width = 0;
  while (k < u.size() && u[k] >= U'0' && u[k] <= U'9') width = width * 10 + int64_t(u[k++] - U'0');
  char grouping = 0;
  if (k < u.size() && (u[k] == U',' || u[k] == U'_')) grouping = char(u[k++]);
  int64_t prec = -1;
  if (k < u.size() && u[k] == U'.') {
    ++k;
    prec = 0;
    while (k < u.size() && u[k] >= U'0' && u[k] <= U'9') prec = prec * 10 + int64_t(u[k++] - U'0');
  }
  char type = 0;
  if (k < u.size()) type = char(u[k++]);
  if (k != u.size()) throw RenderError("Invalid format specifier '" + spec + "'");
  in.check_size(size_t(width));
  std::string body;
  std::string sign_text;
  if (v.is_string() || (!v.is_number() && (type == 0 || type == 's'))) {
    if (type != 0 && type != 's') throw RenderError("Unknown format code '" + std::string(1, type) + "' for object of type 'str'");
    if (!v.is_string() && !spec.empty() && !v.is_none()) {
      // object.__format__ refuses a non-empty spec for types without their own.
      throw RenderError("unsupported format string passed to " + type_name(v) + ".__format__");
    }
    body = py_str(v);
    if (prec >= 0) body = to_utf8(to_u32(body).substr(0, size_t(prec)));
    if (!align) align = '<';
  } else if (v.is_number()) {
    const bool int_type = type == 0 ? v.is_int() : (type == 'd' || type == 'b' || type == 'o' || type == 'x' ||
                                                  type == 'X' || type == 'c' || type == 'n');
    if (int_type) {
      if (!v.is_int()) throw RenderError("Unknown format code '" + std::string(1, type) + "' for object of type 'float'");
      const int64_t i = v.as_int();
      const uint64_t mag = i < 0 ? uint64_t(0) - uint64_t(i) : uint64_t(i);
      std::string digits;
      if (type == 'b') {
        for (uint64_t m = mag; m; m >>= 1) digits.insert(digits.begin(), char('0' + (m & 1)));
        if (digits.empty()) digits = "0";
        if (alt) digits = "0b" + digits;
      } else if (type == 'x' || type == 'X' || type == 'o') {
        char buf[40];
        std::snprintf(buf, sizeof buf, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", (unsigned long long)mag);
        digits = buf;
        if (alt) digits = (type == 'o' ? "0o" : type == 'x' ? "0x" : "0X") + digits;
      } else if (type == 'c') {
        digits = to_utf8(U(1, char32_t(i)));
      } else {
        digits = std::to_string(mag);
        if (grouping)
          for (int p = int(digits.size()) - 3; p > 0; p -= 3) digits.insert(size_t(p), 1, grouping);
      }
      body = digits;
      sign_text = i < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    } else {
      const double d = v.as_double();
      char t = type == 0 ? 'g' : type;
      if (type == 0 && prec < 0) {
        body = float_repr(std::fabs(d));
      } else {
        if (t == '%') {
          char buf[512];
          std::snprintf(buf, sizeof buf, "%.*f", int(prec < 0 ? 6 : prec), std::fabs(d) * 100);
          body = std::string(buf) + "%";
        } else {
          std::string f = std::string("%") + (alt ? "#" : "") + "." + std::to_string(prec < 0 ? 6 : prec) + t;
          char buf[512];
          std::snprintf(buf, sizeof buf, f.c_str(), std::fabs(d));
          body = buf;
        }
      }
      sign_text = std::signbit(d) && !std::isnan(d) ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
      if (grouping) {
        const size_t dot = body.find_first_of(".eE%");
        const size_t int_end = dot == std::string::npos ? body.size() : dot;
        for (int p = int(int_end) - 3; p > 0; p -= 3) body.insert(size_t(p), 1, grouping);
      }
    }
    if (!align) align = '>';
  } else {
    if (v.is_undefined()) return "";
    throw RenderError("unsupported format string passed to " + type_name(v) + ".__format__");
  }
  const int64_t len = utf8_length(sign_text) + utf8_length(body);
  if (len >= width) return sign_text + body;
  const size_t pad = size_t(width - len);
  const std::string f = to_utf8(U(1, fill));
  auto rep = [&](size_t n) {
    std::string r;
    for (size_t j = 0; j < n; ++j) r += f;
    return r;
  };
  switch (align) {
    case '<': return sign_text + body + rep(pad);
    case '>': return rep(pad) + sign_text + body;
    case '^': return rep(pad / 2) + sign_text + body + rep(pad - pad / 2);
    default: return sign_text + rep(pad) + body;  // '='
  }
}

}  // namespace

std::string str_format(Interp& in, const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') {
        out += '}';
        ++k;
        continue;
      }
      throw RenderError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    const size_t end = fmt.find('}', k);
    if (end == std::string::npos) throw RenderError("Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, end - k - 1);
    if (field.find('{') != std::string::npos)
      throw RenderError("nested replacement fields are not supported by dapo's Jinja subset");
    k = end;
    std::string spec, conv;
    const size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    const size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    // field name: first part, then .attr / [key] parts.
    size_t p = 0;
    while (p < field.size() && field[p] != '.' && field[p] != '[') ++p;
    const std::string first = field.substr(0, p);
    Value v;
    if (first.empty()) {
      if (manual) throw RenderError("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      if (auto_index >= args.args.size())
        throw RenderError("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = args.args[auto_index++];
    } else if (std::all_of(first.begin(), first.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      if (automatic) throw RenderError("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      const size_t idx = std::stoul(first);
      if (idx >= args.args.size())
        throw RenderError("Replacement index " + first + " out of range for positional args tuple");
      v = args.args[idx];
    } else {
      bool found = false;
      for (const auto& [key, val] : args.kwargs)
        if (key == first) {
          v = val;
          found = true;
        }
      if (!found) throw RenderError("KeyError: " + repr_string(first));
    }
    while (p < field.size()) {
      if (field[p] == '.') {
        size_t q = p + 1;
        while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
        v = in.getattr(v, field.substr(p + 1, q - p - 1));
        p = q;
      } else {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) throw RenderError("Missing ']' in format string");
        const std::string key = field.substr(p + 1, q - p - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        });
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        p = q + 1;
      }
    }
    if (conv == "r" || conv == "a")
      v = Value::string(py_repr(v));
    else if (conv == "s")
      v = Value::string(py_str(v));
    else if (!conv.empty())
      throw RenderError("Unknown conversion specifier " + conv);
    out += apply_spec(in, v, spec);
    in.check_size(out.size());
  }
  return out;
}

}  // namespace dapo::data::jinja
