// Packed-sequence offsets as the CPU attentions take them (internal to
// src/ops/cpu): cu (B+1) i32 with cu[0] = 0, non-decreasing, cu[B] = the
// number of rows. attention.cpp (cu_seqlens over T rows) and kv_cache.cpp
// (cu_seqlens_q over N new rows) validate and search them with these.
#pragma once

#include <algorithm>
#include <cstdint>

#include "dapo/core/error.h"

namespace dapo::ops::cpu::detail {

// Validates cu (B+1) against `rows` before any row is touched, so a bad
// table is a clear error, never a wild read. Returns the longest sequence.
// `name` and `rows_name` word the errors ("cu_seqlens", "T").
inline int64_t check_cu_seqlens(const char* op, const char* name, const int32_t* cu, int64_t B, int64_t rows,
                                const char* rows_name) {
  DAPO_CHECK(cu[0] == 0, op, ": ", name, "[0] = ", cu[0], ", expected 0");
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    DAPO_CHECK(cu[b + 1] >= cu[b], op, ": ", name, " decreases at ", b + 1, " (", cu[b], " -> ", cu[b + 1], ")");
    max_len = std::max<int64_t>(max_len, cu[b + 1] - cu[b]);
  }
  DAPO_CHECK(cu[B] == rows, op, ": ", name, "[B] = ", cu[B], " but ", rows_name, " = ", rows);
  return max_len;
}

// The sequence b with cu[b] <= row < cu[b+1] (empty sequences skipped).
inline int64_t sequence_of(const int32_t* cu, int64_t B, int64_t row) {
  return int64_t(std::upper_bound(cu, cu + B + 1, int32_t(row)) - cu) - 1;
}

}  // namespace dapo::ops::cpu::detail
