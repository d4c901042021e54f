// A 64-bit digest of a float tensor that ranks can compute on their own
// slices and add up: the sum (mod 2^64) over every element of
// mix64(global index ^ mix64(bit pattern + c)). Because it is a sum of
// per-element terms keyed by the element's place in the FULL tensor, the
// digest of a tensor is the same whatever tp split wrote or reads it, and a
// rank's part needs no other rank's data - checkpoints store it per tensor
// as an attribute and verify it on load, across any resharding (docs/DESIGN.md
// section 4: "a load verifies checksums"). It catches changed, swapped or
// misplaced values; it is not cryptographic.
#pragma once

#include <cstdint>
#include <vector>

#include "dapo/io/hdf5_file.h"

namespace dapo::io {

// The digest part of the block `slab` of a tensor of shape `full_shape`
// (1-D or 2-D), `data` holding slab.numel() values row-major over the slab.
uint64_t slab_digest(const std::vector<int64_t>& full_shape, const Hyperslab& slab, const float* data);

// The number of NaN and Inf values among `n` floats. Loads check weights
// with it: a model holding them cannot run, and would fail far from the
// cause (non-finite logits in the middle of generation).
int64_t count_non_finite(const float* data, int64_t n);

// Sums parts over the ranks of `comm` (each rank its parts for the same
// tensors, in the same order; mod 2^64). Collective.
void sum_digests(const parallel::Comm& comm, std::vector<uint64_t>& parts);

}  // namespace dapo::io
