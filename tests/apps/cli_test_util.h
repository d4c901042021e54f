// Runs a shell command (usually the built `dapo` binary) and captures what
// it writes to stdout and its exit code, for the CLI tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace dapo::test {

struct CliResult {
  int code = -1;       // exit status; -1 if it did not exit normally
  std::string output;  // stdout (plus stderr where the command redirects it)
};

inline CliResult run_shell(const std::string& cmd) {
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace dapo::test
