// Bounded line reading (text_lines.h).
#include "dapo/core/text_lines.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "dapo/core/error.h"

namespace dapo {
namespace {

[[noreturn]] void too_long(const std::string& where, int64_t number, size_t max_bytes) {
  throw UserError(cat(where, ":", number, ": a line longer than ", max_bytes,
                      " bytes: not a text file of one record per line (a binary file, or a newline missing)"));
}

}  // namespace

bool read_bounded_line(std::istream& in, std::string& line, const std::string& where, int64_t& number,
                       size_t max_bytes) {
  line.clear();
  // istream::getline into a buffer: the library's fast scan for '\n', a
  // chunk at a time, and a failbit (cleared here) when a chunk fills first.
  char chunk[1 << 16];
  bool any = false;
  for (;;) {
    in.getline(chunk, sizeof chunk);
    const size_t got = size_t(in.gcount());
    any = any || got > 0;
    const bool full = in.fail() && !in.eof() && got == sizeof chunk - 1;
    if (full) {
      in.clear(in.rdstate() & ~std::ios::failbit);
      line.append(chunk, got);
      if (line.size() > max_bytes) too_long(where, number + 1, max_bytes);
      continue;
    }
    if (!any) return false;  // the end: the stream keeps its failbit
    const bool ended_by_newline = !in.eof() && !in.fail();
    line.append(chunk, ended_by_newline ? got - 1 : got);
    if (in.fail() && !in.bad()) in.clear(in.rdstate() & ~std::ios::failbit);  // a last line without '\n'
    break;
  }
  if (line.size() > max_bytes) too_long(where, number + 1, max_bytes);
  ++number;
  return true;
}

std::string read_text_file(const std::string& path, const std::string& what, size_t max_line_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(cat(path, ": is a directory, not a ", what));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw UserError(cat(path, ": cannot open ", what, ": ", std::strerror(errno)));
  std::string data;
  char chunk[1 << 16];
  size_t n, line_start = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, f.get())) > 0) {
    const size_t at = data.size();
    data.append(chunk, n);
    for (size_t i = data.size(); i > at; --i)
      if (data[i - 1] == '\n') {
        line_start = i;
        break;
      }
    if (data.size() - line_start > max_line_bytes)
      too_long(path, int64_t(std::count(data.begin(), data.begin() + ptrdiff_t(line_start), '\n')) + 1,
               max_line_bytes);
  }
  if (std::ferror(f.get())) throw UserError(cat(path, ": cannot read ", what, ": ", std::strerror(errno)));
  return data;
}

}  // namespace dapo
