// `dapo verify`: score a JSONL file of responses with the rule-based math
// verifier (the work is in reward/score_jsonl), with a one-line summary on
// stderr.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/io/output_clash.h"
#include "dapo/reward/score_jsonl.h"

namespace dapo::apps {

int run_verify(const Invocation& inv) {
  if (!inv.options.count("input")) throw UserError("command line: dapo verify needs --input R.jsonl");
  const std::string input = inv.options["input"].as<std::string>();
  const int threads = inv.options["threads"].as<int>();
  if (threads < 0) throw UserError(cat("command line: --threads must be >= 0 (0: all cores), not ", threads));

  std::string output = inv.options.count("output") ? inv.options["output"].as<std::string>() : "-";
  io::refuse_output_clash(output, "--output", {{input, "--input"}});  // before the output is opened (truncated)

  // Scoring outruns the default stream set-up: stdin synchronised with
  // stdio reads a character per locked call, and a file reads 8 KiB per call.
  std::ios::sync_with_stdio(false);
  std::vector<char> input_buffer(size_t(1) << 20);
  std::ifstream file;
  if (input != "-") {
    file.rdbuf()->pubsetbuf(input_buffer.data(), std::streamsize(input_buffer.size()));  // before open()
    file.open(input);
    if (!file) throw UserError(cat(input, ": cannot open the input file"));
  }
  std::istream& in = input == "-" ? std::cin : file;

  std::ofstream out_file;
  if (output != "-") {
    out_file.open(output);
    if (!out_file) throw UserError(cat(output, ": cannot open the output file"));
  }
  std::ostream& out = output == "-" ? std::cout : out_file;

  const RewardVerifier verifier = inv.config->reward.verifier;
  const reward::VerifySummary summary =
      reward::verify_jsonl(in, out, input == "-" ? "<stdin>" : input, threads, verifier);
  out.flush();
  if (!out) throw UserError(cat(output == "-" ? "<stdout>" : output, ": write failed"));
  std::fprintf(stderr, "verify: %lld responses, accuracy %.4f (reward.verifier = %s)\n",
               static_cast<long long>(summary.responses), summary.accuracy(), to_string(verifier).c_str());
  return kOk;
}

}  // namespace dapo::apps
