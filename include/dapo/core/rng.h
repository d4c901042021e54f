// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11; the Random123
// library). A draw is a pure function of (key, counter): there is no
// generator state to save, share between threads or keep in step across
// ranks, which is what makes sampling reproducible whatever the batch, the
// thread count or the device.
//
// How dapo keys a draw: key = the run's 64-bit seed; counter = (64-bit
// counter, 64-bit stream). The stream is stream_id({...}) of seed-independent
// ids that name the random sequence (e.g. step, prompt uid, sample index),
// and the counter indexes draws within it (e.g. the token position). Nothing
// ever depends on a position in a batch.
//
// Header-only, no state, no allocation: the same functions run on the host
// and, through DAPO_HOST_DEVICE, inside CUDA kernels.
#pragma once

#include <cstdint>
#include <initializer_list>

#if defined(__CUDACC__)
#define DAPO_HOST_DEVICE __host__ __device__
#else
#define DAPO_HOST_DEVICE
#endif

namespace dapo {

struct U32x2 {
  uint32_t v[2];
};
struct U32x4 {
  uint32_t v[4];
};

namespace detail {
// Multipliers and Weyl key increments of Philox4x32 (Random123's constants).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

DAPO_HOST_DEVICE constexpr U32x4 philox4x32_round(U32x4 c, U32x2 k) {
  // 32x32 -> 64-bit products; a CUDA compiler turns the high half into umulhi.
  const uint64_t p0 = uint64_t(kPhiloxM0) * c.v[0];
  const uint64_t p1 = uint64_t(kPhiloxM1) * c.v[2];
  return U32x4{{uint32_t(p1 >> 32) ^ c.v[1] ^ k.v[0], uint32_t(p1),
                uint32_t(p0 >> 32) ^ c.v[3] ^ k.v[1], uint32_t(p0)}};
}
}  // namespace detail

// Philox4x32 with 10 rounds: 128 random bits for a 64-bit key and a 128-bit
// counter. Bit-exact with Random123's philox4x32_R(10, ctr, key).
DAPO_HOST_DEVICE constexpr U32x4 philox4x32_10(U32x2 key, U32x4 counter) {
  U32x4 c = counter;
  U32x2 k = key;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k.v[0] += detail::kPhiloxW0;
      k.v[1] += detail::kPhiloxW1;
    }
    c = detail::philox4x32_round(c, k);
  }
  return c;
}

// A uniform float in [0, 1) from the top 24 bits of x: every value is an
// exact multiple of 2^-24, so 0 is possible and 1 is not (the largest value
// is 1 - 2^-24), whatever the rounding mode of the device.
DAPO_HOST_DEVICE constexpr float uniform_float(uint32_t x) {
  return float(x >> 8) * (1.0f / 16777216.0f);
}

// The draw of dapo's convention: key = seed, counter = (counter, stream),
// low words first. Each (seed, stream, counter) gives 4 independent words.
DAPO_HOST_DEVICE constexpr U32x4 philox_draw(uint64_t seed, uint64_t stream, uint64_t counter) {
  return philox4x32_10(U32x2{{uint32_t(seed), uint32_t(seed >> 32)}},
                       U32x4{{uint32_t(counter), uint32_t(counter >> 32), uint32_t(stream),
                              uint32_t(stream >> 32)}});
}

// splitmix64's finaliser (Stafford's variant 13): a bijection of u64 with
// full avalanche, so nearby ids land far apart.
DAPO_HOST_DEVICE constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Folds one more id into a running stream hash. Each step is a bijection of
// the running value for a fixed id and of the id for a fixed running value,
// so two lists that differ in one position never collide by construction
// of that step, and the order of the ids matters.
DAPO_HOST_DEVICE constexpr uint64_t stream_combine(uint64_t h, uint64_t id) {
  return mix64(h ^ mix64(id + 0x9E3779B97F4A7C15ull)) + 0x9E3779B97F4A7C15ull;
}

inline constexpr uint64_t kStreamHashInit = 0x6A09E667F3BCC909ull;  // frac(sqrt(2))

// The stream of a list of ids, e.g. stream_id({step, prompt_uid, sample}).
// The length is folded in last so that {a} and {a, 0} differ. The seed is
// deliberately not part of it: the seed is the Philox key.
constexpr uint64_t stream_id(std::initializer_list<uint64_t> ids) {
  uint64_t h = kStreamHashInit;
  for (uint64_t id : ids) h = stream_combine(h, id);
  return mix64(h ^ uint64_t(ids.size()));
}

}  // namespace dapo
