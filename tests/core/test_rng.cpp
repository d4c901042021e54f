// Philox4x32-10 against Random123's published known answers, the uniform
// float mapping, the uniformity of the draws and the stream-id hash.
#include "dapo/core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

namespace dapo {
namespace {

struct Kat {
  U32x4 counter;
  U32x2 key;
  U32x4 expected;
};

// The three "philox4x32 10" lines of Random123's tests/kat_vectors
// (DEShawResearch/random123): CTR (4 words), KEY (2 words), EXPECTED (4 words).
constexpr Kat kKats[] = {
    {{{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u}}, {{0x00000000u, 0x00000000u}},
     {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
    {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, {{0xffffffffu, 0xffffffffu}},
     {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
    {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, {{0xa4093822u, 0x299f31d0u}},
     {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
};

constexpr bool equal(U32x4 a, U32x4 b) {
  return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
}

// The generator must be usable in constant expressions (and hence in device
// code compiled with --expt-relaxed-constexpr): check one answer at compile time.
static_assert(equal(philox4x32_10(kKats[2].key, kKats[2].counter), kKats[2].expected));
static_assert(stream_id({1, 2, 3}) != stream_id({3, 2, 1}));

TEST(Rng, PhiloxKnownAnswers) {
  for (const Kat& k : kKats) {
    const U32x4 got = philox4x32_10(k.key, k.counter);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.expected.v[i]) << "word " << i;
  }
}

TEST(Rng, PhiloxDrawWordLayout) {
  // philox_draw puts the seed in the key and (counter, stream) low word first.
  const uint64_t seed = 0x299f31d0a4093822ull, counter = 0x85a308d3243f6a88ull,
                 stream = 0x0370734413198a2eull;
  EXPECT_TRUE(equal(philox_draw(seed, stream, counter), kKats[2].expected));
}

TEST(Rng, UniformFloatRange) {
  EXPECT_EQ(uniform_float(0u), 0.0f);
  EXPECT_EQ(uniform_float(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_LT(uniform_float(0xffffffffu), 1.0f);
  EXPECT_EQ(uniform_float(0x80000000u), 0.5f);
  EXPECT_EQ(uniform_float(0x000000ffu), 0.0f);  // only the top 24 bits count
}

TEST(Rng, UniformityChiSquare) {
  // 64 bins, 4 words per draw from 40,000 consecutive counters of one stream,
  // plus the same over streams with a fixed counter. chi2 with 63 degrees of
  // freedom has mean 63 and sd ~11.2; 130 is beyond 5.9 sd.
  constexpr int kBins = 64;
  const uint64_t seed = 1234;
  for (int mode = 0; mode < 2; ++mode) {
    std::vector<double> count(kBins, 0.0);
    double n = 0, mean = 0;
    for (uint64_t i = 0; i < 40000; ++i) {
      const U32x4 r = mode == 0 ? philox_draw(seed, stream_id({7}), i)
                                : philox_draw(seed, stream_id({7, i}), 0);
      for (uint32_t w : r.v) {
        const float u = uniform_float(w);
        ASSERT_GE(u, 0.0f);
        ASSERT_LT(u, 1.0f);
        count[int(u * kBins)] += 1;
        mean += u;
        n += 1;
      }
    }
    const double expected = n / kBins;
    double chi2 = 0;
    for (double c : count) chi2 += (c - expected) * (c - expected) / expected;
    EXPECT_LT(chi2, 130.0) << "mode " << mode;
    EXPECT_NEAR(mean / n, 0.5, 5.0 * std::sqrt(1.0 / 12.0 / n)) << "mode " << mode;
  }
}

TEST(Rng, BitsAreBalanced) {
  // Every output bit is set about half of the time (sd of the count ~ 100).
  int ones[128] = {};
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    const U32x4 r = philox_draw(99, 5, uint64_t(i));
    for (int w = 0; w < 4; ++w)
      for (int b = 0; b < 32; ++b) ones[w * 32 + b] += (r.v[w] >> b) & 1u;
  }
  for (int b = 0; b < 128; ++b) EXPECT_NEAR(ones[b], n / 2, 600) << "bit " << b;
}

TEST(Rng, KeyAndCounterBothMatter) {
  const U32x4 a = philox_draw(1, 2, 3);
  EXPECT_FALSE(equal(a, philox_draw(2, 2, 3)));
  EXPECT_FALSE(equal(a, philox_draw(1, 3, 3)));
  EXPECT_FALSE(equal(a, philox_draw(1, 2, 4)));
  EXPECT_TRUE(equal(a, philox_draw(1, 2, 3)));
}

TEST(Rng, StreamIdHash) {
  // Deterministic, order-sensitive, length-sensitive, and collision-free over
  // a grid of (step, uid, sample) ids like the trainer's.
  EXPECT_EQ(stream_id({3, 14, 15}), stream_id({3, 14, 15}));
  EXPECT_NE(stream_id({3, 14, 15}), stream_id({14, 3, 15}));
  EXPECT_NE(stream_id({0}), stream_id({0, 0}));
  EXPECT_NE(stream_id({}), stream_id({0}));
  std::vector<uint64_t> ids;
  for (uint64_t step = 0; step < 40; ++step)
    for (uint64_t uid = 0; uid < 100; ++uid)
      for (uint64_t s = 0; s < 16; ++s) ids.push_back(stream_id({step, uid, s}));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
  // Nearby ids land far apart: flipping the last id's low bit flips ~32 bits.
  double flips = 0;
  for (uint64_t i = 0; i < 1000; ++i)
    flips += __builtin_popcountll(stream_id({5, i, 0}) ^ stream_id({5, i, 1}));
  EXPECT_NEAR(flips / 1000, 32.0, 1.0);
}

TEST(Rng, Mix64IsABijectionOnASample) {
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 5000; ++i) seen.insert(mix64(i));
  EXPECT_EQ(seen.size(), 5000u);
  EXPECT_NE(mix64(1), 1u);
}

}  // namespace
}  // namespace dapo
