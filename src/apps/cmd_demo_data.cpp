// `dapo demo-data`: writes the demo task's train.jsonl, val.jsonl and
// sft.jsonl (data/arithmetic_data.h) into a directory. The shipped files in
// inputs/demo/ are this command's output; inputs/demo/README.md has the line.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/data/arithmetic_data.h"
#include "dapo/io/output_clash.h"

namespace dapo::apps {
namespace {

namespace fs = std::filesystem;

// Boost would read "-1" as 2^64 - 1 into an unsigned option: parse by hand.
uint64_t parse_seed(const std::string& text) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (const char c : text) {
    if (c < '0' || c > '9') ok = false;
    if (!ok) break;
    const uint64_t digit = uint64_t(c - '0');
    if (v > (UINT64_MAX - digit) / 10) ok = false;
    v = v * 10 + digit;
  }
  if (!ok) throw UserError(cat("command line: --seed must be an integer in 0..2^64-1, not '", text, "'"));
  return v;
}

int64_t count_option(const Invocation& inv, const char* name) {
  const int64_t n = inv.options[name].as<int64_t>();
  if (n < 1 || n > 10'000'000) throw UserError(cat("command line: --", name, " must be in 1..10000000, not ", n));
  return n;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw UserError(cat(path.string(), ": cannot open for writing"));
  out << text;
  out.close();
  if (!out) throw UserError(cat(path.string(), ": write failed"));
}

}  // namespace

int run_demo_data(const Invocation& inv) {
  if (!inv.options.count("out")) throw UserError("command line: dapo demo-data needs --out DIR");
  if (!inv.options.count("seed")) throw UserError("command line: dapo demo-data needs --seed S");
  io::refuse_standard_output(inv.options["out"].as<std::string>(), "--out", "a folder of three files");
  const fs::path dir = inv.options["out"].as<std::string>();
  const uint64_t seed = parse_seed(inv.options["seed"].as<std::string>());
  const data::ArithmeticSplitSizes sizes{count_option(inv, "train"), count_option(inv, "val"),
                                         count_option(inv, "sft")};
  data::ArithmeticSpec spec = data::arithmetic_difficulty(inv.options["difficulty"].as<int>());
  spec.solution = data::parse_solution_style(inv.options["solution"].as<std::string>());
  const data::PromptFormat format = data::parse_prompt_format(inv.options["format"].as<std::string>());

  const data::ArithmeticFiles files =
      data::render_arithmetic_files(data::make_arithmetic_splits(spec, seed, sizes), format);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(cat(dir.string(), ": cannot create the directory: ", ec.message()));
  const std::pair<const char*, const std::string*> outputs[] = {
      {"train.jsonl", &files.train}, {"val.jsonl", &files.val}, {"sft.jsonl", &files.sft}};
  for (const auto& [name, text] : outputs) write_file(dir / name, *text);
  std::fprintf(stderr,
               "demo-data: %lld train, %lld val, %lld sft problems (%s format, %s solutions) -> %s: %zu, %zu, %zu "
               "bytes\n",
               static_cast<long long>(sizes.train), static_cast<long long>(sizes.val),
               static_cast<long long>(sizes.sft), data::prompt_format_name(format),
               data::solution_style_name(spec.solution), dir.string().c_str(),
               files.train.size(), files.val.size(), files.sft.size());
  return kOk;
}

}  // namespace dapo::apps
