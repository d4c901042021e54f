// Fatal-error reporting: one line with location, rank and host, then abort.
#include "dapo/core/error.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

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

void fatal(const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "dapo: fatal: %s:%d: rank %d on %s: %s\n", file, line, process_rank(),
               host_name().c_str(), msg.c_str());
  std::fflush(stderr);
  if (AbortHook hook = g_abort_hook.load()) hook(1);
  std::_Exit(1);
}

}  // namespace dapo
