// Fatal-error reporting: one line with location, rank and host, then abort.
#include "dapo/core/error.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dapo {
namespace {
// Process-wide, written once at start-up by the parallel runtime before any
// thread runs; a fatal error may come from anywhere, so it cannot be passed.
std::atomic<AbortHook> g_abort_hook{nullptr};
std::atomic<int> g_rank{-1};
}  // namespace

void set_abort_hook(AbortHook hook) { g_abort_hook.store(hook); }
void set_process_identity(int rank) { g_rank.store(rank); }
int process_rank() { return g_rank.load(); }

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof buf - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return name;
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (overlong
// forms, surrogates and code points above U+10FFFF are invalid), 0 if none.
size_t utf8_length(std::string_view s, uint32_t* code_point) {
  const auto b = [&](size_t i) { return uint8_t(s[i]); };
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (b(0) < 0x80) return *code_point = b(0), 1;
  if ((b(0) & 0xE0) == 0xC0) n = 2, cp = b(0) & 0x1F, min = 0x80;
  else if ((b(0) & 0xF0) == 0xE0) n = 3, cp = b(0) & 0x0F, min = 0x800;
  else if ((b(0) & 0xF8) == 0xF0) n = 4, cp = b(0) & 0x07, min = 0x10000;
  else return 0;
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  *code_point = cp;
  return n;
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    uint32_t cp = 0;
    const size_t n = utf8_length(text, &cp);
    const uint8_t byte = uint8_t(text[0]);
    if (n == 0) {  // not UTF-8: the byte itself
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 15];
      text.remove_prefix(1);
      continue;
    }
    if (keep_newlines && (cp == '\n' || cp == '\t')) out += char(cp);
    else if (cp == '\n') out += "\\n";
    else if (cp == '\t') out += "\\t";
    else if (cp == '\r') out += "\\r";
    else if (cp < 0x20 || cp == 0x7F) out += std::string("\\x") + hex[cp >> 4] + hex[cp & 15];
    else if (cp >= 0x80 && cp < 0xA0) out += std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
    else out.append(text.substr(0, n));
    text.remove_prefix(n);
  }
  return out;
}

namespace {

// One line and one abort per process. Several OpenMP threads can fail the
// same check at once (non-finite logits in every row); two concurrent
// MPI_Abort calls crashed the process (exit 139) and the lines interleaved.
// The first thread reports and aborts; any other parks here until the
// process ends. A failure inside the abort itself (the same thread again)
// exits at once.
[[noreturn]] void end_job(int exit_code, const std::string& line) {
  static std::atomic<bool> started{false};
  thread_local bool in_end = false;
  if (in_end) std::_Exit(exit_code);
  in_end = true;
  if (started.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  if (AbortHook hook = g_abort_hook.load()) hook(exit_code);
  std::_Exit(exit_code);
}

}  // namespace

void fatal(const char* file, int line, const std::string& msg) {
  end_job(1, cat("dapo: fatal: ", file, ":", line, ": rank ", process_rank(), " on ", host_name(), ": ", msg));
}

void abort_job(int exit_code, const std::string& msg) {
  end_job(exit_code, cat("dapo: error: rank ", process_rank(), " on ", host_name(), ": ", msg));
}

}  // namespace dapo
