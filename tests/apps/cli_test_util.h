// Runs a shell command (usually the built `dapo` binary) and captures what
// it writes to stdout and its exit code, for the CLI tests; reads the JSONL
// files the commands write.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// run_shell with stderr folded into the output.
inline CliResult run_command(const std::string& cmd) { return run_shell(cmd + " 2>&1"); }

// The built binary, followed by a space: dapo_binary() + "train ...".
inline std::string dapo_binary() { return std::string(DAPO_BINARY_DIR) + "/dapo "; }

// Every line of a JSONL file, parsed (keys in file order).
inline std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::ordered_json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

}  // namespace dapo::test
