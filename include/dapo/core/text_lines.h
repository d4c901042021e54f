// Reading the lines of a user's text file with a bound: a line longer than
// the cap ends the read with a UserError naming the file and line, instead
// of growing one string until the allocation fails (a 20 GB file without a
// newline, /dev/zero given as a prompt file). The cap is far above any real
// line: a 20,480-token response is ~100 KB of JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>

namespace dapo {

inline constexpr size_t kMaxLineBytes = size_t(64) << 20;

// The next line of `in` into `line` (without its '\n'; a '\r' before it is
// kept). Returns false at the end of the input. `number` counts the lines
// read so far and is advanced. UserError "<where>:<number>: a line longer
// than N bytes ..." past `max_bytes`; a read error is the caller's to test
// (in.bad()).
bool read_bounded_line(std::istream& in, std::string& line, const std::string& where, int64_t& number,
                       size_t max_bytes = kMaxLineBytes);

// The whole text file at `path` (a "prompt file", ... in `what`), every line
// within `max_line_bytes`. UserError naming the file for a directory, a file
// that cannot be opened or read, and (with its line) an over-long line.
std::string read_text_file(const std::string& path, const std::string& what, size_t max_line_bytes = kMaxLineBytes);

}  // namespace dapo
