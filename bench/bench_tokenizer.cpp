// Encoding speed of the tokenizer on one core: mixed English prose and LaTeX
// math (the text of math RL prompts and responses), encoded document by
// document as the trainer does. Target: 5 MB/s per core (issue #3).
//
//   bench_tokenizer [tokenizer.json] [megabytes]   (default: $DAPO_QWEN_TOKENIZER, 8)
//
// Prints one JSON line: mb_per_s_per_core is the first pass, starting with an
// empty word cache; warm_mb_per_s_per_core a second pass over the same text.
// Both divide by the thread's CPU time, so that other load on a shared
// machine does not count (wall_mb_per_s is the same first pass by the clock).
// MB = 10^6 bytes of UTF-8 input.
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/data/tokenizer.h"

namespace {

using dapo::Clock;
using dapo::seconds_since;

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Documents of about 1-3 kB mixing sentences, inline and display math,
// numbers, a little code and non-ASCII, drawn from a fixed seed.
std::vector<std::string> make_documents(size_t total_bytes) {
  static const char* words[] = {
      "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "be", "on", "not", "this",
      "we", "by", "are", "from", "which", "can", "have", "all", "if", "number", "integer", "function", "value",
      "equation", "solution", "triangle", "probability", "therefore", "consider", "suppose", "since", "hence",
      "polynomial", "sequence", "sum", "product", "real", "positive", "prime", "divisible", "remainder", "area",
      "radius", "circle", "square", "matrix", "vector", "derivative", "integral", "limit", "convergent", "maximum",
      "minimum", "answer", "Let", "Then", "Thus", "We", "Note", "Find", "Compute", "Prove", "Show", "Assume",
      "don't", "it's", "we'll", "Euler's", "Fermat's", "isn't", "coefficients", "inequality", "identity"};
  static const char* math[] = {
      "$x^2 + y^2 = r^2$", "$\\frac{a}{b}$", "$\\sqrt{2}$", "$n \\ge 1$", "$\\sum_{k=1}^{n} k^2$",
      "$f(x) = 3x - 7$", "$\\binom{n}{k}$", "$a_n = a_{n-1} + a_{n-2}$", "$\\pi r^2$", "$\\log_2 8 = 3$",
      "$\\angle ABC = 60^\\circ$", "$x \\equiv 2 \\pmod{5}$", "$\\int_0^1 x\\,dx$", "$|z| < 1$",
      "$\\lfloor x \\rfloor$", "$\\mathbb{Z}$", "$P(A \\cap B)$", "$\\alpha + \\beta = \\gamma$"};
  static const char* display[] = {
      "\n\n$$\\frac{d}{dx}\\left(x^n\\right) = n x^{n-1}$$\n\n",
      "\n\\[\n\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}\n\\]\n",
      "\n\\begin{align*}\na &= b + c \\\\\n&= 2c\n\\end{align*}\n",
      "\n\nTherefore, the final answer is $\\boxed{42}$.\n",
      "\n```python\ndef f(n):\n    return sum(i * i for i in range(n))\n```\n",
      "\n\nStep 2: Substitute $x = 3$ into the equation.\n"};
  std::mt19937 rng(2025);
  std::vector<std::string> docs;
  size_t bytes = 0;
  while (bytes < total_bytes) {
    std::string d;
    const size_t target = 1000 + rng() % 2000;
    while (d.size() < target) {
      const unsigned r = rng() % 100;
      if (r < 70) {
        if (!d.empty() && d.back() != '\n') d += ' ';
        d += words[rng() % (sizeof words / sizeof *words)];
      } else if (r < 82) {
        d += ' ';
        d += math[rng() % (sizeof math / sizeof *math)];
      } else if (r < 90) {
        d += ' ';
        d += std::to_string(rng() % 100000);
      } else if (r < 96) {
        d += ". ";
      } else if (r < 98) {
        d += display[rng() % (sizeof display / sizeof *display)];
      } else {
        d += rng() % 2 ? " \xE2\x89\xA4 " : " \xCF\x80\xE2\x89\x88" "3.14";  // ≤, π≈3.14
      }
    }
    bytes += d.size();
    docs.push_back(std::move(d));
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("DAPO_QWEN_TOKENIZER");
  const std::string path = argc > 1 ? argv[1] : env ? env : "";
  if (path.empty()) {
    std::fprintf(stderr, "usage: bench_tokenizer TOKENIZER.json [MB]  (or set DAPO_QWEN_TOKENIZER)\n");
    return 2;
  }
  const double megabytes = argc > 2 ? std::atof(argv[2]) : 8.0;
  try {
    const auto t_load = Clock::now();
    const dapo::data::Tokenizer tok = dapo::data::Tokenizer::load(path);
    const double load_s = seconds_since(t_load);
    const std::vector<std::string> docs = make_documents(size_t(megabytes * 1e6));
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    std::vector<dapo::data::TokenId> ids;
    size_t tokens = 0;
    double pass_s[2] = {0, 0}, wall_s = 0;
    for (int pass = 0; pass < 2; ++pass) {
      tokens = 0;
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_seconds();
      for (const auto& d : docs) {
        ids.clear();
        tok.encode_append(d, ids);
        tokens += ids.size();
      }
      pass_s[pass] = thread_cpu_seconds() - c0;
      if (pass == 0) wall_s = seconds_since(t0);
    }
    // Decoding speed, for the record (tokens per second).
    std::vector<std::vector<dapo::data::TokenId>> encoded;
    for (size_t i = 0; i < docs.size() && i < 200; ++i) encoded.push_back(tok.encode(docs[i]));
    size_t decoded_tokens = 0;
    const double t_dec = thread_cpu_seconds();
    for (int rep = 0; rep < 5; ++rep)
      for (const auto& e : encoded) {
        decoded_tokens += e.size();
        if (tok.decode(e).empty()) return 1;
      }
    const double dec_s = thread_cpu_seconds() - t_dec;

    std::printf(
        "{\"bench\":\"tokenizer_encode\",\"mb_per_s_per_core\":%.2f,\"target\":5,\"warm_mb_per_s_per_core\":%.2f,"
        "\"wall_mb_per_s\":%.2f,\"bytes\":%zu,\"documents\":%zu,\"tokens\":%zu,\"bytes_per_token\":%.2f,\"cpu_seconds\":%.3f,"
        "\"decode_mtokens_per_s\":%.2f,\"load_seconds\":%.2f,\"tokenizer\":\"%s\"}\n",
        bytes / 1e6 / pass_s[0], bytes / 1e6 / pass_s[1], bytes / 1e6 / wall_s, bytes, docs.size(), tokens, double(bytes) / double(tokens),
        pass_s[0], decoded_tokens / 1e6 / dec_s, load_s, path.c_str());
  } catch (const dapo::UserError& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
