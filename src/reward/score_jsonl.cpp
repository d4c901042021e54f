// verify_jsonl: read a chunk of lines, score them on all threads, write them
// back in order, repeat (score_jsonl.h). Each line goes through
// score_jsonl_line (jsonl_line.h).
#include "dapo/reward/score_jsonl.h"

#include <algorithm>
#include <istream>
#include <ostream>
#include <thread>
#include <vector>

#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/reward/jsonl_line.h"

namespace dapo::reward {
namespace {

constexpr size_t kChunkLines = 8192;
constexpr size_t kWriteBytes = size_t(1) << 20;

// Kept from chunk to chunk, so that their strings keep their capacity and a
// line costs no allocation once the first chunk has been read.
struct Line {
  int64_t number = 0;  // 1-based line in the source
  std::string input;   // the line as read, without its newline
  std::string output;  // the scored line
  std::string error;   // set when the line is bad
  bool correct = false;
};

void score_line(Line* line, const std::string& source, JsonlLineScanner* scanner, RewardVerifier verifier) {
  try {
    line->correct = score_jsonl_line(line->input, source, line->number, scanner, &line->output, verifier);
  } catch (const UserError& e) {
    line->error = e.what();
  }
}

}  // namespace

VerifySummary verify_jsonl(std::istream& in, std::ostream& out, const std::string& source_name, int threads,
                           RewardVerifier verifier) {
  const size_t workers =
      threads > 0 ? size_t(threads) : std::max<size_t>(1, size_t(std::thread::hardware_concurrency()));
  VerifySummary summary;
  int64_t line_number = 0;
  std::vector<Line> lines;  // lines[0, count) are this chunk's
  std::string pending;      // output not yet written
  bool more = true;
  while (more) {
    size_t count = 0;
    while (count < kChunkLines) {
      if (count == lines.size()) lines.emplace_back();
      Line& line = lines[count];
      if (!(more = read_bounded_line(in, line.input, source_name, line_number))) break;
      if (!line.input.empty() && line.input.back() == '\r') line.input.pop_back();
      if (line.input.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines carry nothing
      line.number = line_number;
      line.error.clear();
      ++count;
    }
    if (in.bad()) throw UserError(cat(source_name, ": read error after line ", line_number));
    // Contiguous slices, one per thread: scoring is independent per line.
    const size_t n = std::min(workers, std::max<size_t>(1, count));
    std::vector<std::thread> pool;
    auto work = [&](size_t t) {
      const size_t lo = count * t / n, hi = count * (t + 1) / n;
      JsonlLineScanner scanner;  // on this thread's stack: its buffers serve the whole slice
      for (size_t i = lo; i < hi; ++i) score_line(&lines[i], source_name, &scanner, verifier);
    };
    for (size_t t = 1; t < n; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
    // Lines go out in large writes: a stream writes a string of 1 KiB or
    // more straight through (libstdc++), a system call per line.
    for (size_t i = 0; i < count; ++i) {
      const Line& line = lines[i];
      if (!line.error.empty()) {
        out.write(pending.data(), std::streamsize(pending.size()));  // the lines before it, as they were
        throw UserError(line.error);
      }
      pending.append(line.output).push_back('\n');
      if (pending.size() >= kWriteBytes || i + 1 == count) {
        out.write(pending.data(), std::streamsize(pending.size()));
        pending.clear();
      }
      ++summary.responses;
      summary.correct += line.correct;
    }
  }
  return summary;
}

}  // namespace dapo::reward
