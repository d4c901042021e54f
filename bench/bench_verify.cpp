// Benchmark of the rule-based math verifier: typical responses (a few hundred
// words of reasoning with inline LaTeX, ending in \boxed{...}) against their
// references - integers, fractions, radicals, expressions, tuples; about a
// third of them wrong, some in a different but equal form (0.5 vs \frac12).
// Measures single-thread throughput; the target is 50,000 responses/s/core.
//   bench_verify        verify_math alone
//   bench_verify jsonl  `dapo verify` end to end (verify_jsonl, one thread) on
//                       these responses as JSONL lines, against the nlohmann
//                       per-line path it replaced
// Needs dapo_reward linked into the benchmark executables.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <istream>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/reward/jsonl_fast.h"
#include "dapo/reward/jsonl_line.h"
#include "dapo/reward/score_jsonl.h"
#include "dapo/reward/verifier.h"

namespace {

using dapo::Clock;
using dapo::seconds_since;

struct Case {
  std::string response, truth;
};

// A reasoning paragraph of ~300 words with inline math, as models write them.
std::string reasoning(std::mt19937& rng) {
  static const char* kSentences[] = {
      "Let us first understand what the problem is asking for. ",
      "We are given that $x + y = 10$ and $xy = 21$, so we can set up a quadratic equation. ",
      "By Vieta's formulas, the roots of $t^2 - 10t + 21 = 0$ are $t = 3$ and $t = 7$. ",
      "Now consider the expression $\\frac{a^2 + b^2}{ab}$ and simplify it step by step. ",
      "Since the triangle is right-angled, the Pythagorean theorem gives $c^2 = a^2 + b^2$. ",
      "Substituting back, we obtain $2\\sqrt{3} \\cdot \\sqrt{3} = 6$, which checks out. ",
      "Wait, let me double-check this computation: $15 \\times 4 = 60$, and $60 / 12 = 5$. ",
      "The number of ways to choose $k$ objects from $n$ is $\\binom{n}{k} = \\frac{n!}{k!(n-k)!}$. ",
      "Therefore the sum telescopes: $\\sum_{k=1}^{n} \\left(\\frac{1}{k} - \\frac{1}{k+1}\\right) = "
      "1 - \\frac{1}{n+1}$. ",
      "Hmm, that does not look right. Let me reconsider the case when $n$ is even. ",
      "Taking everything modulo 7, we get $3^{6} \\equiv 1 \\pmod{7}$ by Fermat's little theorem. ",
      "So the area of the region is $\\frac{1}{2} \\cdot 8 \\cdot 6 = 24$ square units. ",
      "Note: the function $f(x) = x^3 - 3x$ has critical points at $x = \\pm 1$. ",
      "Combining these two results, the probability is $\\frac{3}{8}$ for each independent trial. ",
      "Thus we need to find all integer solutions of the equation, which we do below. ",
  };
  std::uniform_int_distribution<size_t> pick(0, std::size(kSentences) - 1);
  std::string text;
  while (text.size() < 1800) text += kSentences[pick(rng)];
  return text;
}

std::vector<Case> make_cases(size_t n) {
  // {answer as boxed, reference}: right in various forms, and wrong.
  static const std::pair<const char*, const char*> kAnswers[] = {
      {"42", "42"},
      {"17", "17"},
      {"2024", "2024"},
      {"-3", "-3"},
      {"\\frac{1}{2}", "\\frac{1}{2}"},
      {"0.5", "\\frac{1}{2}"},
      {"\\dfrac{3}{4}", "\\frac34"},
      {"2\\sqrt{3}", "2\\sqrt{3}"},
      {"\\sqrt{12}", "2\\sqrt{3}"},
      {"\\frac{\\pi}{4}", "\\frac{\\pi}{4}"},
      {"(3, 7)", "(3,7)"},
      {"x^2 + 2x + 1", "(x+1)^2"},
      {"1000", "1,000"},
      {"36", "35"},
      {"\\frac{2}{3}", "\\frac{3}{2}"},
      {"7", "8"},
      {"3\\sqrt{2}", "2\\sqrt{3}"},
      {"\\frac{5}{12}", "\\frac{7}{12}"},
      {"128", "256"},
      {"x = 5", "5"},
  };
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> pick(0, std::size(kAnswers) - 1);
  std::vector<Case> cases;
  for (size_t i = 0; i < n; ++i) {
    const auto& [answer, truth] = kAnswers[pick(rng)];
    Case c;
    c.response = reasoning(rng) + "\n\nPutting it all together, the final answer is $\\boxed{" + answer + "}$.";
    c.truth = truth;
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

// CPU time of this thread: on a shared machine, time spent waiting for a core
// is not the verifier's.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// JSONL lines as verl dumps them (nested reference) and in the flat form.
std::string jsonl_of(const std::vector<Case>& cases) {
  std::string text;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i % 2 == 0) {
      text += "{\"index\":" + std::to_string(i) + ",\"data_source\":\"math_dapo\",\"response\":";
      dapo::reward::append_json_string(&text, cases[i].response);
      text += ",\"reward_model\":{\"ground_truth\":";
      dapo::reward::append_json_string(&text, cases[i].truth);
      text += ",\"style\":\"rule\"}}\n";
    } else {
      text += "{\"uid\":\"u" + std::to_string(i) + "\",\"response\":";
      dapo::reward::append_json_string(&text, cases[i].response);
      text += ",\"ground_truth\":";
      dapo::reward::append_json_string(&text, cases[i].truth);
      text += "}\n";
    }
  }
  return text;
}

// Counts what is written and keeps none of it.
class NullBuffer : public std::streambuf {
 protected:
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  int_type overflow(int_type c) override { return traits_type::not_eof(c); }
};

// Serves `text` `repeats` times over without copying it: a large file of
// these lines, as `dapo verify` reads one (chunk after chunk).
class RepeatBuffer : public std::streambuf {
 public:
  RepeatBuffer(const std::string& text, int repeats) : text_(text), left_(repeats) {}

 protected:
  int_type underflow() override {
    if (left_-- <= 0) return traits_type::eof();
    char* begin = const_cast<char*>(text_.data());  // only read through the get area
    setg(begin, begin, begin + text_.size());
    return traits_type::to_int_type(*begin);
  }

 private:
  const std::string& text_;
  int left_;
};

int bench_jsonl(const std::vector<Case>& cases) {
  const std::string text = jsonl_of(cases);
  NullBuffer null_buffer;
  std::ostream null_out(&null_buffer);
  auto run_file = [&](int repeats) {
    RepeatBuffer buffer(text, repeats);
    std::istream in(&buffer);
    return dapo::reward::verify_jsonl(in, null_out, "bench.jsonl", 1);
  };
  // Warm up and size the run to about two seconds of CPU time.
  double cpu = thread_seconds();
  run_file(1);
  cpu = thread_seconds() - cpu;
  const int repeats = std::max(8, int(2.0 / std::max(cpu, 1e-3)));
  const auto wall_start = Clock::now();
  const double cpu_start = thread_seconds();
  const dapo::reward::VerifySummary summary = run_file(repeats);
  cpu = thread_seconds() - cpu_start;
  const double wall = seconds_since(wall_start);
  const int64_t lines = summary.responses, correct = summary.correct;

  // The baseline: the nlohmann document path of each line, as before.
  std::vector<std::string_view> views;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    views.emplace_back(text.data() + at, end - at);
    at = end + 1;
  }
  int64_t baseline_lines = 0;
  std::string scored;
  const double baseline_start = thread_seconds();
  double baseline_cpu = 0;
  while (baseline_cpu < 1.0) {
    for (size_t i = 0; i < views.size(); ++i) {
      dapo::reward::score_jsonl_line_nlohmann(views[i], "bench.jsonl", int64_t(i) + 1, &scored);
      baseline_lines += !scored.empty();
    }
    baseline_cpu = thread_seconds() - baseline_start;
  }
  std::printf("{\"bench\":\"verify_jsonl\",\"lines_per_s_per_core\":%.0f,\"target\":50000,"
              "\"nlohmann_lines_per_s_per_core\":%.0f,\"lines_per_s_wall\":%.0f,\"lines\":%lld,"
              "\"accuracy\":%.3f,\"mean_line_bytes\":%zu}\n",
              double(lines) / cpu, double(baseline_lines) / baseline_cpu, double(lines) / wall,
              static_cast<long long>(lines), double(correct) / double(lines), text.size() / cases.size());
  return 0;
}

int main(int argc, char** argv) {
  const std::vector<Case> cases = make_cases(4096);
  if (argc > 1 && std::string_view(argv[1]) == "jsonl") return bench_jsonl(cases);
  if (argc > 1) {
    std::fprintf(stderr, "usage: bench_verify [jsonl]\n");
    return 2;
  }
  size_t bytes = 0;
  for (const auto& c : cases) bytes += c.response.size();
  size_t correct = 0, done = 0;
  // Warm up, then run for at least two seconds of CPU time.
  for (const auto& c : cases) correct += dapo::reward::verify_math(c.response, c.truth).acc;
  correct = 0;
  const auto wall_start = Clock::now();
  const double cpu_start = thread_seconds();
  double cpu = 0;
  while (cpu < 2.0) {
    for (const auto& c : cases) correct += dapo::reward::verify_math(c.response, c.truth).acc;
    done += cases.size();
    cpu = thread_seconds() - cpu_start;
  }
  const double wall = seconds_since(wall_start);
  std::printf("{\"bench\":\"verify\",\"responses_per_s_per_core\":%.0f,\"target\":50000,"
              "\"responses_per_s_wall\":%.0f,\"responses\":%zu,\"accuracy\":%.3f,\"mean_response_bytes\":%zu}\n",
              double(done) / cpu, double(done) / wall, done, double(correct) / double(done), bytes / cases.size());
  return 0;
}
