// DeviceFlags: what GPU kernels found wrong in their inputs, recorded on the
// device instead of stopping there (a kernel cannot print file:line, rank and
// host, nor abort the MPI job). The CPU ops check the same conditions with
// DAPO_CHECK on the spot; the CUDA ops write a flag, and the host reads the
// flags back once per phase (CudaDevice::check_flags) and reports the first
// problem as the CPU path would: the op, what, where, and the rank.
//
// Writes are integer atomics on a few words: the count of each kind, and
// the details of the first one seen (first by atomicCAS on `*_site`), so the
// report names one concrete row. Nothing here feeds a float reduction, so
// determinism is untouched.
#pragma once

#include <cstdint>

namespace dapo::ops {

// Which op set a flag (the report's "where").
enum class FlagSite : int32_t {
  none = 0,
  embedding = 1,     // a token id outside the vocabulary
  logprob = 2,       // a target id outside the vocabulary, or non-finite logits
  validate_ids = 3,  // ops::validate_ids
  loss = 4,          // a non-finite loss or gradient
  sampling = 5,      // non-finite logits given to sample_tokens
  kv_slot = 6,       // a KV-cache write's slot outside the pool (-1, "skip", is no error): row = token
  paged_metadata = 7,  // paged attention: a sequence's length or query offsets inconsistent (id: its
                       // length), or a block id outside the pool (id: the block id); row = sequence
};
const char* flag_site_name(FlagSite s);

struct DeviceFlags {
  int32_t bad_id_count = 0;       // token/target ids out of range
  int32_t bad_id_site = 0;        // FlagSite of the first one
  int64_t bad_id_row = 0;         // its row
  int64_t bad_id_value = 0;       // the id itself
  int32_t non_finite_count = 0;   // non-finite values (NaN, Inf)
  int32_t non_finite_site = 0;    // FlagSite of the first one
  int64_t non_finite_row = 0;     // its row
};

}  // namespace dapo::ops
