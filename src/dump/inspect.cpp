// The text of `dapo inspect`: summary, samples and JSONL of a rollout dump
// (inspect.h).
#include "dapo/dump/inspect.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace dapo::dump {
namespace {

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string s(size_t(std::max(n, 0)), '\0');
  std::vsnprintf(s.data(), s.size() + 1, format, args);
  va_end(args);
  return s;
}

std::string percent(int64_t part, int64_t whole) {
  return whole == 0 ? std::string("-") : fmt("%.1f%%", 100.0 * double(part) / double(whole));
}

// "1 group", "2 groups".
std::string count_of(int64_t n, const char* noun) {
  return fmt("%lld %s%s", static_cast<long long>(n), noun, n == 1 ? "" : "s");
}

std::string mean4(double sum, int64_t count) { return count == 0 ? std::string("-") : fmt("%.4f", sum / double(count)); }

// Nearest-rank percentile of sorted values: the smallest value with at
// least q of them at or below it.
int64_t percentile(const std::vector<int64_t>& sorted, double q) {
  const size_t rank = size_t(std::ceil(q * double(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::string outcome_counts(const RolloutDump& d) {
  int64_t counts[4] = {0, 0, 0, 0};
  for (const DumpedGroup& g : d.groups) ++counts[size_t(g.outcome)];
  std::string s;
  for (int i = 0; i < 4; ++i)
    s += fmt("%s%s %lld", i ? ", " : "", rl::group_outcome_name(rl::GroupOutcome(i)), static_cast<long long>(counts[i]));
  return s;
}

// The finite scores as their values (at most 10 distinct) or 10 bins; NaN
// and infinities (a reward function gone wrong) on lines of their own after
// them - a NaN key in the map would swallow every other score. Percentages
// are of all scores.
std::string score_histogram(const std::vector<double>& scores) {
  std::string out = "score histogram:\n";
  const int64_t total = int64_t(scores.size());
  std::map<double, int64_t> distinct;
  int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  for (const double s : scores) {
    if (std::isnan(s)) ++nan;
    else if (std::isinf(s)) ++(s > 0 ? pos_inf : neg_inf);
    else ++distinct[s];
  }
  auto non_finite = [&] {
    for (const auto& [name, count] : {std::pair<const char*, int64_t>{"nan", nan}, {"inf", pos_inf}, {"-inf", neg_inf}})
      if (count > 0)
        out += fmt("  %s (not a finite score): %lld (%s)\n", name, static_cast<long long>(count),
                   percent(count, total).c_str());
    return out;
  };
  if (distinct.size() <= 10) {
    for (const auto& [value, count] : distinct)
      out += fmt("  %g: %lld (%s)\n", value, static_cast<long long>(count), percent(count, total).c_str());
    return non_finite();
  }
  const double lo = distinct.begin()->first, hi = distinct.rbegin()->first;
  const double width = (hi - lo) / 10;
  int64_t bins[10] = {};
  for (const double s : scores)
    if (std::isfinite(s)) ++bins[std::min<size_t>(size_t((s - lo) / width), 9)];
  for (int i = 0; i < 10; ++i)
    out += fmt("  [%g, %g%s: %lld (%s)\n", lo + i * width, i == 9 ? hi : lo + (i + 1) * width, i == 9 ? "]" : ")",
               static_cast<long long>(bins[i]), percent(bins[i], total).c_str());
  return non_finite();
}

// The shortest decimal that reads back as the same float (JSON readers
// see -0.1, not -0.10000000149011612).
double shortest(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, x);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace

std::vector<size_t> generation_order(const RolloutDump& dump) {
  std::vector<size_t> order(dump.groups.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const rl::GroupData& x = dump.groups[a].group;
    const rl::GroupData& y = dump.groups[b].group;
    return std::pair(x.round, x.position) < std::pair(y.round, y.position);
  });
  return order;
}

std::string dump_summary(const RolloutDump& d) {
  std::string out = fmt("rollout dump %s\n", d.path.c_str());
  out += fmt("step %lld, format_version %lld, world_size %lld, rollout.n %lld, max_response_length %lld\n",
             static_cast<long long>(d.info.step), static_cast<long long>(d.format_version),
             static_cast<long long>(d.world_size), static_cast<long long>(d.info.n),
             static_cast<long long>(d.info.max_response_length));

  const int64_t groups = int64_t(d.groups.size());
  int64_t kept = 0, trained = 0;
  std::map<int64_t, std::pair<int64_t, int64_t>> rounds;  // round -> (groups, kept)
  for (const DumpedGroup& g : d.groups) {
    const bool k = g.outcome == rl::GroupOutcome::mixed;
    kept += k;
    trained += g.trained;
    auto& r = rounds[g.group.round];
    ++r.first;
    r.second += k;
  }
  out += fmt("groups: %lld generated, %lld kept by dynamic sampling (%s), %lld trained (%s of kept)\n",
             static_cast<long long>(groups), static_cast<long long>(kept), percent(kept, groups).c_str(),
             static_cast<long long>(trained), percent(trained, kept).c_str());
  out += "outcomes: " + outcome_counts(d) + "\n";
  std::string round_text;
  for (const auto& [round, counts] : rounds)
    round_text += fmt("%s[%lld] %s, %lld kept", round_text.empty() ? "" : "; ", static_cast<long long>(round),
                      count_of(counts.first, "group").c_str(), static_cast<long long>(counts.second));
  out += "rounds: " + (round_text.empty() ? std::string("-") : round_text) + "\n";

  int64_t responses = 0, trained_responses = 0;
  double acc = 0, trained_acc = 0, score = 0, reward = 0;
  int64_t finite_scores = 0;
  double reward_min = INFINITY, reward_max = -INFINITY;
  std::vector<int64_t> lengths;
  std::vector<double> scores;
  std::map<int, int64_t> finish;
  std::map<std::string, std::pair<int64_t, double>> sources;  // responses, sum of acc
  for (const DumpedGroup& dg : d.groups) {
    const rl::GroupData& g = dg.group;
    for (int64_t k = 0; k < g.num_responses(); ++k) {
      const size_t K = size_t(k);
      ++responses;
      acc += g.acc[K];
      if (dg.trained) {
        ++trained_responses;
        trained_acc += g.acc[K];
      }
      if (std::isfinite(g.score[K])) score += g.score[K], ++finite_scores;
      reward += g.reward[K];
      reward_min = std::min(reward_min, g.reward[K]);
      reward_max = std::max(reward_max, g.reward[K]);
      lengths.push_back(g.response_length(k));
      scores.push_back(g.score[K]);
      ++finish[g.finish_reason[K]];
      auto& s = sources[g.data_source];
      ++s.first;
      s.second += g.acc[K];
    }
  }
  out += fmt("responses: %lld (%lld trained)\n", static_cast<long long>(responses),
             static_cast<long long>(trained_responses));
  if (responses == 0) return out;
  out += fmt("accuracy: %s (all), %s (trained)\n", mean4(acc, responses).c_str(),
             mean4(trained_acc, trained_responses).c_str());
  const std::string left_out = finite_scores == responses
                                   ? std::string()
                                   : fmt(" (of the finite ones; %lld not finite)",
                                         static_cast<long long>(responses - finite_scores));
  out += fmt("score: mean %s%s; reward: mean %s, min %.4f, max %.4f\n", mean4(score, finite_scores).c_str(),
             left_out.c_str(), mean4(reward, responses).c_str(), reward_min, reward_max);
  std::sort(lengths.begin(), lengths.end());
  int64_t total_length = 0;
  for (const int64_t l : lengths) total_length += l;
  out += fmt("response length (tokens): mean %.2f, p50 %lld, p90 %lld, max %lld\n",
             double(total_length) / double(responses), static_cast<long long>(percentile(lengths, 0.5)),
             static_cast<long long>(percentile(lengths, 0.9)), static_cast<long long>(lengths.back()));
  out += score_histogram(scores);
  std::string finish_text;
  for (const auto& [code, count] : finish)
    finish_text += fmt("%s%s %lld (%s)", finish_text.empty() ? "" : ", ", d.finish_reason_name(uint8_t(code)).c_str(),
                       static_cast<long long>(count), percent(count, responses).c_str());
  out += "finish reasons: " + finish_text + "\n";
  out += "data sources (responses, accuracy):\n";
  for (const auto& [source, s] : sources)
    out += fmt("  %s: %lld, %s\n", source.empty() ? "(none)" : source.c_str(), static_cast<long long>(s.first),
               mean4(s.second, s.first).c_str());
  return out;
}

std::string dump_samples(const RolloutDump& d, int64_t k) {
  const std::vector<size_t> order = generation_order(d);
  // (group, sample) pairs round-robin: sample 0 of every group first.
  std::vector<std::pair<size_t, int64_t>> picks;
  for (int64_t s = 0; int64_t(picks.size()) < k; ++s) {
    bool any = false;
    for (const size_t g : order) {
      if (s >= d.groups[g].group.num_responses()) continue;
      any = true;
      if (int64_t(picks.size()) < k) picks.emplace_back(g, s);
    }
    if (!any) break;
  }
  std::string out;
  for (size_t i = 0; i < picks.size(); ++i) {
    const DumpedGroup& dg = d.groups[picks[i].first];
    const rl::GroupData& g = dg.group;
    const int64_t s = picks[i].second;
    const size_t S = size_t(s);
    out += fmt("=== sample %zu of %zu: prompt uid %llu, round %lld, position %lld, source %s, %s, %s; "
               "sample_index %lld of %s\n",
               i + 1, picks.size(), static_cast<unsigned long long>(uint64_t(g.uid)), static_cast<long long>(g.round),
               static_cast<long long>(g.position), g.data_source.empty() ? "(none)" : printable(g.data_source).c_str(),
               dg.trained ? "trained" : "not trained", rl::group_outcome_name(dg.outcome), static_cast<long long>(s),
               count_of(g.num_responses(), "response").c_str());
    // Model text may hold any bytes: escaped, so that an ESC in a response
    // cannot drive the terminal (newlines and tabs kept for reading).
    out += "--- prompt\n" + printable(g.prompt_text, true) + "\n";
    out += "--- response\n" + printable(g.response_text[S], true) + "\n";
    out += "--- answer: " + printable(g.pred[S]) + " | ground truth: " + printable(g.ground_truth) + "\n";
    // The loss mask (overlong filtering) means something only for a group
    // that was trained; a dropped group's responses were in no loss.
    out += fmt("score %g, acc %g, reward %g, advantage %s, finish %s, %s%s\n", g.score[S], g.acc[S], g.reward[S],
               g.advantage.empty() ? "-" : fmt("%g", g.advantage[S]).c_str(),
               d.finish_reason_name(g.finish_reason[S]).c_str(), count_of(g.response_length(s), "token").c_str(),
               !dg.trained ? "" : g.in_loss[S] ? ", in the loss" : ", masked out of the loss (overlong filtering)");
  }
  return out;
}

void write_dump_jsonl(const RolloutDump& d, std::ostream& out) {
  using json = nlohmann::ordered_json;
  for (const size_t gi : generation_order(d)) {
    const DumpedGroup& dg = d.groups[gi];
    const rl::GroupData& g = dg.group;
    for (int64_t s = 0; s < g.num_responses(); ++s) {
      const size_t S = size_t(s);
      json j;
      j["step"] = d.info.step;
      j["uid"] = uint64_t(g.uid);
      j["round"] = g.round;
      j["position"] = g.position;
      j["trained"] = dg.trained;
      j["outcome"] = rl::group_outcome_name(dg.outcome);
      j["data_source"] = g.data_source;
      j["prompt"] = g.prompt_text;
      j["prompt_ids"] = g.prompt_ids;
      j["ground_truth"] = g.ground_truth;
      j["sample_index"] = s;
      j["response"] = g.response_text[S];
      const std::span<const int32_t> ids = g.response(s);
      j["response_ids"] = std::vector<int32_t>(ids.begin(), ids.end());
      j["pred"] = g.pred[S];
      j["finish_reason"] = d.finish_reason_name(g.finish_reason[S]);
      j["length"] = g.response_length(s);
      j["score"] = g.score[S];
      j["acc"] = g.acc[S];
      j["reward"] = g.reward[S];
      j["in_loss"] = g.in_loss[S] != 0;
      j["advantage"] = g.advantage.empty() || std::isnan(g.advantage[S]) ? json(nullptr) : json(g.advantage[S]);
      if (g.old_logprobs.empty()) {
        j["old_logprobs"] = nullptr;
      } else {
        json lp = json::array();
        for (int64_t t = g.response_offsets[S]; t < g.response_offsets[S + 1]; ++t) {
          const float x = g.old_logprobs[size_t(t)];
          lp.push_back(std::isnan(x) ? json(nullptr) : json(shortest(x)));
        }
        j["old_logprobs"] = std::move(lp);
      }
      if (g.sampling_logprobs.empty()) {
        j["sampling_logprobs"] = nullptr;
      } else {
        json lp = json::array();
        for (int64_t t = g.response_offsets[S]; t < g.response_offsets[S + 1]; ++t) {
          const float x = g.sampling_logprobs[size_t(t)];
          lp.push_back(std::isnan(x) ? json(nullptr) : json(shortest(x)));
        }
        j["sampling_logprobs"] = std::move(lp);
      }
      out << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    }
  }
}

}  // namespace dapo::dump
