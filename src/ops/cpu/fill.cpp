// CPU reference of the fill op (OpenMP over elements; memset for zero bits).
#include "dapo/ops/fill.h"
#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/backend_shared.h"

#include <cstring>

namespace dapo::ops::cpu {
namespace {

template <class U>
void fill_as(void* data, int64_t n, uint64_t pattern) {
  U* p = static_cast<U*>(data);
  const U v = U(pattern);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

}  // namespace

void fill(const Ctx&, Tensor t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const uint64_t pattern = ops::detail::fill_pattern(t.dtype, value);
  if (pattern == 0) {
    std::memset(t.data, 0, t.nbytes());
    return;
  }
  switch (dtype_size(t.dtype)) {
    case 2: fill_as<uint16_t>(t.data, n, pattern); break;
    case 4: fill_as<uint32_t>(t.data, n, pattern); break;
    case 8: fill_as<uint64_t>(t.data, n, pattern); break;
    default: DAPO_FAIL("fill: element size ", dtype_size(t.dtype));
  }
}

}  // namespace dapo::ops::cpu
