// Timestamped, rank-prefixed log lines on stderr (stdout is left to data
// output such as `dapo tokenize` JSONL).
#include "dapo/core/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace dapo {
namespace {
// Written once by configure_logging() before threads start, then only read.
LogOptions g_options;
const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
  }
  return "?";
}
}  // namespace

void configure_logging(const LogOptions& options) { g_options = options; }

bool log_enabled(LogLevel level) {
  if (level < g_options.level) return false;
  return g_options.rank == 0 || g_options.all_ranks || level >= LogLevel::warn;
}

void log_line(LogLevel level, const std::string& message) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t secs = system_clock::to_time_t(now);
  const int ms = int(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  // One fprintf per line so lines of different ranks do not interleave mid-line.
  std::fprintf(stderr, "[%s.%03d r%d %s] %s\n", stamp, ms, g_options.rank, level_name(level),
               message.c_str());
}

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::debug;
  if (name == "info") return LogLevel::info;
  if (name == "warn") return LogLevel::warn;
  if (name == "error") return LogLevel::error;
  throw UserError(cat("unknown log level '", name, "' (debug|info|warn|error)"));
}

}  // namespace dapo
