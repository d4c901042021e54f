// The demo's JSONL files: disjoint splits of arithmetic problems written in
// verl's prompt schema and as SFT pairs, byte-for-byte reproducible.
#include "dapo/data/arithmetic_data.h"

#include <nlohmann/json.hpp>

#include <unordered_set>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"

namespace dapo::data {
namespace {

using Json = nlohmann::ordered_json;

// Seed-independent ids naming the streams of the demo problems ("arith" in
// ASCII, then the split).
constexpr uint64_t kArithmeticStreamTag = 0x6172697468ull;
enum SplitTag : uint64_t { kVal = 1, kTrain = 2, kSft = 3 };

void fill_split(const ArithmeticSpec& spec, uint64_t seed, SplitTag tag, const char* name, int64_t count,
                std::unordered_set<std::string>& seen, std::vector<ArithmeticProblem>& out) {
  if (count < 0) throw UserError(cat("demo data: the ", name, " split cannot have ", count, " problems"));
  out.reserve(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    bool found = false;
    for (int attempt = 0; attempt < kArithmeticMaxDraws && !found; ++attempt) {
      ArithmeticProblem p =
          make_arithmetic_problem(spec, seed, stream_id({kArithmeticStreamTag, tag, uint64_t(i), uint64_t(attempt)}));
      if (seen.insert(p.problem).second) {
        out.push_back(std::move(p));
        found = true;
      }
    }
    if (!found)
      throw UserError(cat("demo data: ", name, " problem ", i, ": no new problem in ", kArithmeticMaxDraws,
                          " draws after ", seen.size(),
                          " distinct problems; this difficulty has too few of them for the sizes asked "
                          "(ask for fewer, or raise the difficulty)"));
  }
}

Json prompt_json(const ArithmeticProblem& p, PromptFormat format, std::string_view split, int64_t index,
                 const std::string* response) {
  Json line;
  line["data_source"] = kArithmeticDataSource;
  line["prompt"] = Json::array({Json{{"role", "user"}, {"content", render_prompt(p.problem, format)}}});
  if (response) line["response"] = *response;
  line["ability"] = "arithmetic";
  line["reward_model"] = Json{{"ground_truth", std::to_string(p.answer)}, {"style", "rule"}};
  line["extra_info"] = Json{{"index", cat(split, '-', index)}};
  return line;
}

}  // namespace

ArithmeticSplits make_arithmetic_splits(const ArithmeticSpec& spec, uint64_t seed, const ArithmeticSplitSizes& sizes) {
  check_arithmetic_spec(spec);
  ArithmeticSplits s;
  std::unordered_set<std::string> seen;
  fill_split(spec, seed, kVal, "val", sizes.val, seen, s.val);
  fill_split(spec, seed, kTrain, "train", sizes.train, seen, s.train);
  fill_split(spec, seed, kSft, "sft", sizes.sft, seen, s.sft);
  return s;
}

std::string arithmetic_prompt_line(const ArithmeticProblem& p, PromptFormat format, std::string_view split,
                                   int64_t index) {
  return prompt_json(p, format, split, index, nullptr).dump() + '\n';
}

std::string arithmetic_sft_line(const ArithmeticProblem& p, PromptFormat format, int64_t index) {
  return prompt_json(p, format, "sft", index, &p.solution).dump() + '\n';
}

ArithmeticFiles render_arithmetic_files(const ArithmeticSplits& splits, PromptFormat format) {
  ArithmeticFiles f;
  for (size_t i = 0; i < splits.train.size(); ++i)
    f.train += arithmetic_prompt_line(splits.train[i], format, "train", int64_t(i));
  for (size_t i = 0; i < splits.val.size(); ++i)
    f.val += arithmetic_prompt_line(splits.val[i], format, "val", int64_t(i));
  for (size_t i = 0; i < splits.sft.size(); ++i) f.sft += arithmetic_sft_line(splits.sft[i], format, int64_t(i));
  return f;
}

}  // namespace dapo::data
