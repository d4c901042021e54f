// Errors. Two kinds, on purpose:
//  - bugs and broken environments (a failed check, an MPI/CUDA/NCCL/HDF5 call
//    that returns an error): DAPO_CHECK / DAPO_FAIL print one line with
//    file:line, rank and host, then abort the whole job (MPI_Abort once the
//    parallel runtime installed its hook), so no rank is left hanging;
//  - bad user input (config, data, checkpoint): throw UserError with a
//    message that names the file and line; the app reports it and exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dapo {

// Bad input from the user. The message names the file (and line, key) at fault.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<< (g++ 12 has no <format>).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// `text` made safe to quote in a message or print to a terminal: control
// characters (C0, DEL and the UTF-8-encoded C1 range) and bytes that are not
// valid UTF-8 become escapes (\t, \n, \r, \xNN, \u00NN); valid UTF-8
// text is kept. A stray ESC in a config line or a model's response must not
// drive the terminal, and a NUL must not cut the line. keep_newlines keeps
// '\n' and '\t' as they are (multi-line text such as a response).
std::string printable(std::string_view text, bool keep_newlines = false);

// How the process ends after a fatal error. core cannot include mpi.h, so
// the parallel runtime installs MPI_Abort here once MPI is up; before that a
// fatal error exits the process. Set once at start-up, before any thread.
using AbortHook = void (*)(int exit_code);
void set_abort_hook(AbortHook hook);

// "rank R on host H" in every fatal line; set by the parallel runtime.
void set_process_identity(int rank);
int process_rank();            // -1 before the runtime knows it
const std::string& host_name();

[[noreturn]] void fatal(const char* file, int line, const std::string& msg);

// Ends every rank of the job at once with `exit_code`, after one line
// "dapo: error: rank R on HOST: msg": for an error of the environment found
// on one rank while the others may be waiting inside a collective call
// that this rank will never join (a write that a full disk refused inside
// parallel HDF5 leaves its peers in HDF5's own barrier).
[[noreturn]] void abort_job(int exit_code, const std::string& msg);

}  // namespace dapo

#define DAPO_FAIL(...) ::dapo::fatal(__FILE__, __LINE__, ::dapo::cat(__VA_ARGS__))

#define DAPO_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::dapo::fatal(__FILE__, __LINE__,                                         \
                    ::dapo::cat("check failed: " #cond " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
