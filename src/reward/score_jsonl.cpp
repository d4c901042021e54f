// verify_jsonl: read a chunk of lines, score them on all threads, write them
// back in order, repeat (score_jsonl.h).
#include "dapo/reward/score_jsonl.h"

#include <algorithm>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>
#include <vector>

#include "dapo/core/error.h"
#include "dapo/reward/verifier.h"

namespace dapo::reward {
namespace {

constexpr size_t kChunkLines = 8192;

using Json = nlohmann::ordered_json;

struct Line {
  int64_t number = 0;  // 1-based line in the source
  std::string text;    // in: the input line; out: the output line
  std::string error;   // set when the line is bad
  bool correct = false;
};

std::string reference_of(const Json& obj, const std::string& where) {
  const Json* gt = nullptr;
  if (auto it = obj.find("ground_truth"); it != obj.end()) {
    gt = &*it;
  } else if (auto rm = obj.find("reward_model"); rm != obj.end() && rm->is_object()) {
    if (auto it2 = rm->find("ground_truth"); it2 != rm->end()) gt = &*it2;
  }
  if (!gt) throw UserError(cat(where, ": missing field 'ground_truth' (or 'reward_model.ground_truth')"));
  if (gt->is_string()) return gt->get<std::string>();
  if (gt->is_number()) return gt->dump();
  throw UserError(cat(where, ": field 'ground_truth' must be a string or a number, not ", gt->type_name()));
}

void score_line(Line* line, const std::string& source) {
  const std::string where = cat(source, ":", line->number);
  try {
    Json obj;
    try {
      obj = Json::parse(line->text);
    } catch (const Json::parse_error& e) {
      throw UserError(cat(where, ": malformed JSON (", e.what(), ")"));
    }
    if (!obj.is_object()) throw UserError(cat(where, ": expected a JSON object, got ", obj.type_name()));
    const auto response = obj.find("response");
    if (response == obj.end()) throw UserError(cat(where, ": missing field 'response'"));
    if (!response->is_string())
      throw UserError(cat(where, ": field 'response' must be a string, not ", response->type_name()));
    const std::string truth = reference_of(obj, where);
    const Verdict v = verify_math(response->get_ref<const std::string&>(), truth);
    obj["score"] = v.score;
    obj["acc"] = v.acc;
    obj["pred"] = v.pred;
    line->correct = v.acc;
    line->text = obj.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (const UserError& e) {
    line->error = e.what();
  }
}

}  // namespace

VerifySummary verify_jsonl(std::istream& in, std::ostream& out, const std::string& source_name, int threads) {
  const size_t workers =
      threads > 0 ? size_t(threads) : std::max<size_t>(1, size_t(std::thread::hardware_concurrency()));
  VerifySummary summary;
  int64_t line_number = 0;
  std::vector<Line> chunk;
  std::string text;
  bool more = true;
  while (more) {
    chunk.clear();
    while (chunk.size() < kChunkLines && (more = bool(std::getline(in, text)))) {
      ++line_number;
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines carry nothing
      chunk.push_back(Line{line_number, std::move(text), {}, false});
      text.clear();
    }
    if (in.bad()) throw UserError(cat(source_name, ": read error after line ", line_number));
    // Contiguous slices, one per thread: scoring is independent per line.
    const size_t n = std::min(workers, std::max<size_t>(1, chunk.size()));
    std::vector<std::thread> pool;
    auto work = [&](size_t t) {
      const size_t lo = chunk.size() * t / n, hi = chunk.size() * (t + 1) / n;
      for (size_t i = lo; i < hi; ++i) score_line(&chunk[i], source_name);
    };
    for (size_t t = 1; t < n; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
    for (const Line& line : chunk) {
      if (!line.error.empty()) throw UserError(line.error);
      out << line.text << '\n';
      ++summary.responses;
      summary.correct += line.correct;
    }
  }
  return summary;
}

}  // namespace dapo::reward
