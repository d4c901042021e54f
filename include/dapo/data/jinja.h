// A Jinja interpreter for chat templates: the subset of Jinja2 that HF
// tokenizer_config.json templates use, rendered as transformers'
// apply_chat_template renders them (jinja2 3.1 ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks, the loopcontrols extension; globals
// raise_exception and strftime_now; tojson as json.dumps with
// ensure_ascii=False).
//
// What it runs: text, {{ }}, {% %} and {# #} with whitespace control
// ({%- -%}, {%+ +%}), raw blocks; if/elif/else, for (loop.*, else, an if
// filter, break/continue), set (names, tuples, namespace attributes, set
// blocks), macro and call blocks, filter blocks, with, print and the
// {% generation %} tag; Python's expressions (literals, slices, negative
// indexes, and/or/not, in, comparisons, arithmetic, ~, conditional
// expressions, calls with keywords) with Python's semantics on None, bool,
// int (64-bit), float, str, list, tuple and dict values and jinja2's
// Undefined (prints as nothing, is false, iterates as empty; any other use
// is an error); the common filters, tests and str/dict methods.
// block/extends/include/import are refused when the template is parsed.
//
// Errors: a template it cannot parse, and an error while rendering (an
// undefined value used, a type error, raise_exception, a limit passed),
// are UserErrors "NAME:LINE:COLUMN: ..." where NAME is the name given to
// parse (e.g. "tokenizer_config.json: chat_template") and LINE:COLUMN are
// the template's own.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace dapo::data::jinja {

// Bounds on one render, so that a hostile or broken template fails instead
// of running away.
struct RenderLimits {
  int64_t max_output_bytes = int64_t(64) << 20;  // the output, and any string it builds
  int64_t max_steps = 10'000'000;                 // loop iterations and items that filters visit
  int max_call_depth = 64;                        // nested macro calls
};

class Template {
 public:
  // Parses `source` once. UserError "NAME:LINE:COLUMN: message" for a
  // template this interpreter cannot parse.
  static Template parse(std::string_view source, std::string name);

  // The text of the template for `context`, a JSON object whose members
  // become the template's variables (JSON null is None, arrays are lists,
  // objects dicts in their order, integers int, other numbers float).
  std::string render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

  const std::string& name() const;

  struct Impl;

 private:
  explicit Template(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dapo::data::jinja
