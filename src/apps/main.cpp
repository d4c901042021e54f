// main() of `dapo`: picks the subcommand, parses its options and the
// configuration, runs it, and turns errors into exit codes.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <new>

#include "command.h"
#include "dapo/core/error.h"

namespace dapo::apps {
namespace {

void print_usage() {
  std::printf("dapo %s - DAPO reinforcement learning for LLMs\n\n", DAPO_VERSION);
  std::printf("usage: dapo COMMAND [options] [--config FILE] [--section.key=value ...]\n\ncommands:\n");
  for (const auto& c : commands())
    std::printf("  %-10s %s%s\n", c.name.c_str(), c.summary.c_str(), c.run ? "" : "  [not yet]");
  std::printf("\n`dapo COMMAND --help` lists a command's options.\n");
}

int run_command(const Command& cmd, int argc, char** argv) {
  po::options_description own("options of dapo " + cmd.name);
  own.add_options()("help,h", "this help");
  if (cmd.uses_config) own.add_options()("config", po::value<std::string>(), "INI configuration file");
  po::positional_options_description positional;
  cmd.add_options(own, positional);

  // --section.key=value overrides are ours, taken in order before Boost
  // sees the rest: its parser refuses an empty value after '=' (which
  // clears a key, e.g. --data.val_files=).
  std::vector<std::string> args, overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('='), dot = a.find('.');
    const bool override = a.rfind("--", 0) == 0 && eq != std::string::npos && dot < eq;
    (override ? overrides : args).push_back(a);
  }
  po::parsed_options parsed =
      po::command_line_parser(args).options(own).positional(positional).allow_unregistered().run();
  po::variables_map vm;
  po::store(parsed, vm);
  po::notify(vm);
  // Everything else Boost did not recognise must be a --section.key=value override.
  for (std::string& o : po::collect_unrecognized(parsed.options, po::exclude_positional))
    overrides.push_back(std::move(o));
  if (vm.count("help")) {
    std::cout << "dapo " << cmd.name << ": " << cmd.summary << "\n\n" << own;
    if (cmd.uses_config) std::cout << "\nconfiguration (INI [section] key = value, or --section.key=value):\n" << config_help();
    return kOk;
  }
  Config config;
  if (cmd.uses_config) {
    config = load_config(vm.count("config") ? vm["config"].as<std::string>() : "", overrides);
  } else if (!overrides.empty()) {
    throw UserError(cat("command line: dapo ", cmd.name, " does not take '", overrides.front(), "'"));
  }
  return cmd.run(Invocation{vm, cmd.uses_config ? &config : nullptr, argc, argv});
}

}  // namespace
}  // namespace dapo::apps

int main(int argc, char** argv) {
  using namespace dapo::apps;
  // A write past a file-size limit (ulimit -f, a batch system's limit) then
  // fails with EFBIG, which every writer reports naming the file and the
  // free space, instead of killing the rank in the middle of a save.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    print_usage();
    return argc < 2 ? kUserError : kOk;
  }
  if (std::string(argv[1]) == "--version") {
    std::printf("dapo %s\n", DAPO_VERSION);
    return kOk;
  }
  for (const auto& cmd : commands()) {
    if (cmd.name != argv[1]) continue;
    try {
      return run_command(cmd, argc, argv);
    } catch (const dapo::UserError& e) {
      std::fprintf(stderr, "dapo %s: error: %s\n", argv[1], e.what());
    } catch (const po::error& e) {
      std::fprintf(stderr, "dapo %s: error: command line: %s\n", argv[1], e.what());
    } catch (const std::bad_alloc&) {
      // A size the user asked for that this machine cannot hold: their error
      // to fix, not a crash (exit 134). The sizes checked before allocating
      // name their key; this is the net under the rest.
      std::fprintf(stderr,
                   "dapo %s: error: out of memory: a size asked for (a configuration value such as "
                   "rollout.kv_cache_gib, rollout.n, rollout.block_size, or an input file) is more than this "
                   "machine can hold; lower it\n",
                   argv[1]);
    }
    return kUserError;
  }
  std::fprintf(stderr, "dapo: unknown command '%s' (see dapo --help)\n", argv[1]);
  return kUserError;
}
