// The subcommands of the `dapo` executable. main() only parses the command
// line and dispatches; each subcommand's work lives in its module, and its
// file in src/apps/ stays thin.
#pragma once

#include <boost/program_options.hpp>

#include <functional>
#include <string>
#include <vector>

#include "dapo/core/config.h"

namespace dapo::apps {

namespace po = boost::program_options;

// Exit codes of `dapo`, documented in the README.
enum ExitCode : int {
  kOk = 0,
  kFatal = 1,           // a failed check or library call (printed with file:line, rank, host)
  kUserError = 2,       // bad configuration, data, checkpoint or command line
};

struct Invocation {
  const po::variables_map& options;  // the subcommand's own options
  const Config* config = nullptr;    // set when the command takes a configuration
  int argc = 0;                      // for MPI_Init
  char** argv = nullptr;
};

struct Command {
  std::string name;
  std::string summary;
  bool uses_config = false;  // takes --config FILE and --section.key=value overrides
  std::function<void(po::options_description&, po::positional_options_description&)> add_options;
  std::function<int(const Invocation&)> run;
};

const std::vector<Command>& commands();

// Defined in one file per subcommand.
int run_info(const Invocation& inv);
int run_tokenize(const Invocation& inv);
int run_render(const Invocation& inv);
int run_verify(const Invocation& inv);
int run_import_hf(const Invocation& inv);
int run_generate(const Invocation& inv);
int run_export_hf(const Invocation& inv);
int run_demo_data(const Invocation& inv);
int run_sft(const Invocation& inv);
int run_train(const Invocation& inv);
int run_eval(const Invocation& inv);
int run_inspect(const Invocation& inv);

}  // namespace dapo::apps
