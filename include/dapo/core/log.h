// Logging with timestamps and rank prefixes. Rank 0 prints info; the other
// ranks print only warnings and errors unless every rank was asked to log
// (`[log] all_ranks = true`), which is what you want when chasing a hang.
#pragma once

#include "dapo/core/error.h"

namespace dapo {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

struct LogOptions {
  int rank = 0;
  bool all_ranks = false;
  LogLevel level = LogLevel::info;
};

// Set once at start-up (after the rank is known), before threads start.
void configure_logging(const LogOptions& options);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);
LogLevel parse_log_level(const std::string& name);  // throws UserError

}  // namespace dapo

#define DAPO_LOG(level, ...)                                              \
  do {                                                                    \
    if (::dapo::log_enabled(level)) ::dapo::log_line(level, ::dapo::cat(__VA_ARGS__)); \
  } while (0)
#define DAPO_DEBUG(...) DAPO_LOG(::dapo::LogLevel::debug, __VA_ARGS__)
#define DAPO_INFO(...) DAPO_LOG(::dapo::LogLevel::info, __VA_ARGS__)
#define DAPO_WARN(...) DAPO_LOG(::dapo::LogLevel::warn, __VA_ARGS__)
#define DAPO_ERROR(...) DAPO_LOG(::dapo::LogLevel::error, __VA_ARGS__)
