// Names for the device-flag report (device_flags.h).
#include "dapo/ops/device_flags.h"

namespace dapo::ops {

const char* flag_site_name(FlagSite s) {
  switch (s) {
    case FlagSite::none: return "none";
    case FlagSite::embedding: return "embedding";
    case FlagSite::logprob: return "logprob";
    case FlagSite::validate_ids: return "validate_ids";
    case FlagSite::loss: return "loss";
    case FlagSite::sampling: return "sampling";
    case FlagSite::kv_slot: return "a KV-cache write (slot outside the pool)";
    case FlagSite::paged_metadata: return "paged attention (sequence metadata)";
  }
  return "unknown";
}

}  // namespace dapo::ops
