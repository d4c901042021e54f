// One rule for every JSONL reader (verify, prompt data, generate, sft,
// tokenize): a raw NUL byte is never valid JSON, and nlohmann's parser takes
// it for the end of its input - "{...}\0more" would parse as the object and
// silently drop the rest of the line. Such lines are refused, naming the
// byte's column.
#pragma once

#include <string>
#include <string_view>

#include "dapo/core/error.h"

namespace dapo {

// UserError "<where>: a NUL byte at column N (not valid JSON)" if `text`
// holds one; call it before handing a line to nlohmann::json::parse.
inline void refuse_nul_byte(std::string_view text, const std::string& where) {
  if (const size_t at = text.find('\0'); at != std::string_view::npos)
    throw UserError(cat(where, ": a NUL byte at column ", at + 1, " (not valid JSON)"));
}

}  // namespace dapo
