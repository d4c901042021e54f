// One line of `dapo verify` (jsonl_line.h): the nlohmann path, which defines
// the output and the error messages, and the fast path that reproduces it.
#include "dapo/reward/jsonl_line.h"

#include <nlohmann/json.hpp>

#include "dapo/core/error.h"
#include "dapo/core/json_text.h"
#include "dapo/reward/verify.h"

namespace dapo::reward {
namespace {

using Json = nlohmann::ordered_json;

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

}  // namespace

bool score_jsonl_line_nlohmann(std::string_view line, std::string_view source, int64_t line_number,
                               std::string* output, RewardVerifier verifier) {
  const std::string where = cat(source, ":", line_number);
  refuse_nul_byte(line, where);
  Json obj;
  try {
    obj = Json::parse(line);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number beyond double
    throw UserError(cat(where, ": malformed JSON (", e.what(), ")"));
  }
  if (!obj.is_object()) throw UserError(cat(where, ": expected a JSON object, got ", obj.type_name()));
  const auto response = obj.find("response");
  if (response == obj.end()) throw UserError(cat(where, ": missing field 'response'"));
  if (!response->is_string())
    throw UserError(cat(where, ": field 'response' must be a string, not ", response->type_name()));
  const std::string truth = reference_of(obj, where);
  const Verdict v = verify(verifier, response->get_ref<const std::string&>(), truth);
  obj["score"] = v.score;
  obj["acc"] = v.acc;
  obj["pred"] = v.pred;
  *output = obj.dump(-1, ' ', false, Json::error_handler_t::replace);
  return v.acc;
}

bool score_jsonl_line(std::string_view line, std::string_view source, int64_t line_number,
                      JsonlLineScanner* scanner, std::string* output, RewardVerifier verifier) {
  if (!scanner->scan(line)) return score_jsonl_line_nlohmann(line, source, line_number, output, verifier);
  const Verdict v = verify(verifier, scanner->response(), scanner->truth());
  const std::string& object = scanner->canonical();
  std::string& text = *output;
  text.clear();
  text.reserve(object.size() + v.pred.size() + 48);
  // The scanner declined objects that already have these keys, and the
  // object is not empty (it has a response), so they go last after a comma.
  text.append(object, 0, object.size() - 1);
  text.append(",\"score\":");
  append_json_double(&text, v.score);
  text.append(v.acc ? ",\"acc\":true,\"pred\":" : ",\"acc\":false,\"pred\":");
  append_json_string(&text, v.pred);
  text.push_back('}');
  return v.acc;
}

}  // namespace dapo::reward
