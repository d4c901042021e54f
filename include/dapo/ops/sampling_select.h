// Internal to the sampling ops (CPU and CUDA backends, and the tp
// composition through the shard ops of sampling.h): the threshold search of
// top-k / top-p as a radix descent over the bits of the weight, with the
// per-row decisions written once for the host and the device.
//
// Keys. w = exp(z - m) is a float in [0, 1], so its bits (the key) compare
// as w does, and the order "p descending, ties by id ascending" is the
// order of (key descending, id ascending). A prefix of that order is a Cut:
// every token with key > thr, plus the ties key == thr with id <= lim.
//
// Levels. The descent fixes the key 8 bits at a time: level 0 is the
// exponent (bits 30..23), levels 1 and 2 the mantissa bits 22..15 and
// 14..7, level 3 the last 7 bits. At each level a histogram of the digit,
// over the tokens of the row that are inside `within` and whose higher bits
// equal the prefix found so far, gives per bin a count and a mass.
//
// Exact masses. Every key in a level-0 bin has the same exponent, and every
// key at levels 1-3 shares the prefix's exponent, so a bin's mass is an
// integer (the 24-bit significands summed, mass_units) times a power of two
// that depends on the bin only. The integer sums are exact and independent
// of the summation order, the thread count and how the vocabulary is split:
// histograms all-reduced over tp shards (integer sums) give the same bits as
// one device over the whole row, so every rank and the unsharded op make the
// same decisions (the per-bin doubles are exact too; the running sum over
// bins is done in one fixed order by whoever decides).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "dapo/core/rng.h"  // DAPO_HOST_DEVICE

namespace dapo::ops::detail {

inline constexpr int kLevels = 4;
inline constexpr int kMaxBins = 256;
inline constexpr int32_t kNoLimit = 0x7fffffff;

DAPO_HOST_DEVICE inline int level_shift(int l) { return l == 0 ? 23 : l == 1 ? 15 : l == 2 ? 7 : 0; }
DAPO_HOST_DEVICE inline int level_bins(int l) { return l == 3 ? 128 : 256; }
// The key bits fixed before level l.
DAPO_HOST_DEVICE inline uint32_t decided_mask(int l) { return l == 0 ? 0u : ~((1u << level_shift(l - 1)) - 1u); }
DAPO_HOST_DEVICE inline uint32_t key_digit(uint32_t key, int l) {
  return (key >> level_shift(l)) & uint32_t(level_bins(l) - 1);
}
// w = mass_units(key) * 2^unit_exponent(key), exactly.
DAPO_HOST_DEVICE inline int64_t mass_units(uint32_t key) {
  const uint32_t f = key & 0x7fffffu;
  return int64_t((key >> 23) != 0 ? (f | 0x800000u) : f);
}
DAPO_HOST_DEVICE inline int unit_exponent(uint32_t key) {
  const int e = int(key >> 23);
  return (e > 1 ? e : 1) - 150;
}
DAPO_HOST_DEVICE inline float key_to_float(uint32_t key) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(key);
#else
  float f;
  std::memcpy(&f, &key, sizeof f);
  return f;
#endif
}

struct Cut {
  uint32_t thr;
  int32_t lim;
};
DAPO_HOST_DEVICE inline bool in_cut(Cut c, uint32_t key, int32_t id) {
  return key > c.thr || (key == c.thr && id <= c.lim);
}
DAPO_HOST_DEVICE inline Cut cut_all() { return Cut{0u, kNoLimit}; }

enum SelectState : int32_t { kIdle = 0, kDescending = 1, kNeedTie = 2 };

// One row's search. The kept set is always in_cut(within) && in_cut(cut):
// no truncation leaves both at cut_all(); top-k sets cut; top-p after top-k
// moves the top-k cut to `within` and searches a new `cut` inside it.
// On tp shards, lims are local ids; every other field is the same on every
// rank.
struct Select {
  Cut within;
  Cut cut;
  uint32_t prefix;      // key bits fixed so far
  int32_t state;        // SelectState
  int64_t above_count;  // tokens of `within` with a key above the current bin range
  double above_mass;    // their mass
  double need;          // count (top-k) or mass (top-p) to reach; < 0: top_p * the level-0 total
  int64_t tie_rank;     // kNeedTie: keep this many (>= 1) ties at cut.thr, in id order
  double kept_mass;     // mass of the finished cut (exact per bin, summed in bin order)
  int32_t by_mass;      // 0: top-k, 1: top-p
  int32_t pad;
};
inline constexpr int kSelectWords = 9;  // i64 words per row in a Select tensor
static_assert(sizeof(Select) == kSelectWords * 8, "Select layout");

DAPO_HOST_DEVICE inline Select select_none() {
  Select s{};
  s.within = cut_all();
  s.cut = cut_all();
  s.state = kIdle;
  return s;
}
DAPO_HOST_DEVICE inline void start_top_k(Select& s, int top_k) {
  s = select_none();
  s.state = kDescending;
  s.need = double(top_k);
  s.by_mass = 0;
}
// after_top_k: s holds the finished top-k cut (its kept_mass is the base).
DAPO_HOST_DEVICE inline void start_top_p(Select& s, bool after_top_k, float top_p) {
  if (after_top_k) {
    s.within = s.cut;
    s.need = double(top_p) * s.kept_mass;
  } else {
    s.within = cut_all();
    s.need = -1.0;
  }
  s.cut = cut_all();
  s.prefix = 0;
  s.above_count = 0;
  s.above_mass = 0;
  s.tie_rank = 0;
  s.kept_mass = 0;
  s.by_mass = 1;
  s.state = kDescending;
}

// The lower edge of the key range still searched at level l, and its upper
// edge (inclusive): passes skip tokens outside [lo, hi] (and outside within).
DAPO_HOST_DEVICE inline uint32_t range_lo(const Select& s) {
  return s.prefix > s.within.thr ? s.prefix : s.within.thr;
}
DAPO_HOST_DEVICE inline uint32_t range_hi(const Select& s, int l) { return s.prefix | ~decided_mask(l); }

// Whether a token takes part in the level-l histogram.
DAPO_HOST_DEVICE inline bool in_level(const Select& s, int l, uint32_t key, int32_t id) {
  return (key & decided_mask(l)) == s.prefix && in_cut(s.within, key, id);
}

// One level of the descent from the histogram (count[j], units[j]) of that
// level, summed over the whole row (all shards). Picks the bin where the
// running count/mass (from the top bin down) reaches `need`; bin 0 when
// rounding leaves the whole range short. Finishes when the bin holds at most
// one token (the whole bin is kept) or at level 3 (the exact threshold key;
// ties are then cut in id order: kNeedTie when only some of them are kept).
//
// The running mass is summed in one fixed association that a warp can
// reproduce (the CUDA backend decides with 32 lanes of `per` bins each):
// bins in groups of per = bins / 32 from the top, group sums in bin order,
// then above_mass + (the groups before, summed in order) + the group's bins.
DAPO_HOST_DEVICE inline double bin_mass(const Select& s, const int64_t* units, int l, int j) {
  return ldexp(double(units[j]), unit_exponent(s.prefix | (uint32_t(j) << level_shift(l))));
}

// The end of a level once the bin is picked: am/ac are the mass/count of
// `within` above the picked bin.
DAPO_HOST_DEVICE inline void finish_level(Select& s, int l, int pick, int64_t eq, double eq_mass, double am,
                                          int64_t ac) {
  s.above_mass = am;
  s.above_count = ac;
  s.prefix |= uint32_t(pick) << level_shift(l);
  if (l < kLevels - 1) {
    if (eq > 1) return;  // refine at the next level
    // Every key >= prefix is kept (the bin's one token, if any, and all above).
    s.cut = s.prefix > 0 ? Cut{s.prefix - 1, -1} : cut_all();
    s.kept_mass = s.above_mass + eq_mass;
    s.state = kIdle;
    return;
  }
  s.cut.thr = s.prefix;
  const double wt = double(key_to_float(s.prefix));
  int64_t r = eq;
  if (s.by_mass) {
    if (wt > 0) {
      const double q = ceil((s.need - s.above_mass) / wt);
      r = q >= double(eq) ? eq : int64_t(q);
    }
  } else {
    const double q = s.need - double(s.above_count);
    r = q >= double(eq) ? eq : int64_t(q);
  }
  if (r < 1) r = 1;
  if (eq == 0 || r >= eq) {
    s.cut.lim = eq == 0 ? -1 : kNoLimit;
    s.kept_mass = s.above_mass + eq_mass;
    s.state = kIdle;
    return;
  }
  s.tie_rank = r;
  s.kept_mass = s.above_mass + double(r) * wt;
  s.state = kNeedTie;
}

// The host's descent (the CPU backend); cuda/sampling/sampling.cu has the warp's.
inline void descend(Select& s, const int64_t* count, const int64_t* units, int l, float top_p) {
  if (s.state != kDescending) return;
  const int nb = level_bins(l), per = nb / 32;
  double gm[32];
  int64_t gc[32];
  for (int g = 0; g < 32; ++g) {
    gm[g] = 0;
    gc[g] = 0;
    for (int i = 0; i < per; ++i) {
      const int j = nb - 1 - g * per - i;
      gm[g] += bin_mass(s, units, l, j);
      gc[g] += count[j];
    }
  }
  if (l == 0 && s.need < 0) {
    double total = 0;
    for (int g = 0; g < 32; ++g) total += gm[g];
    s.need = double(top_p) * total;
  }
  double em = 0;
  int64_t ec = 0;
  for (int g = 0; g < 32; ++g) {
    double am = s.above_mass + em;
    int64_t ac = s.above_count + ec;
    for (int i = 0; i < per; ++i) {
      const int j = nb - 1 - g * per - i;
      const double mj = bin_mass(s, units, l, j);
      const bool reach = s.by_mass ? am + mj >= s.need : double(ac + count[j]) >= s.need;
      if (reach || j == 0) {
        finish_level(s, l, j, count[j], mj, am, ac);
        return;
      }
      am += mj;
      ac += count[j];
    }
    em += gm[g];
    ec += gc[g];
  }
}

// kNeedTie: which of this shard's ties at cut.thr are kept, from every
// shard's tie count (tie_counts[q * stride] for shard q of tp, in vocabulary
// order). Returns 0: none, -1: all, k > 0: the first k (in id order).
DAPO_HOST_DEVICE inline int64_t local_ties_kept(const Select& s, const int64_t* tie_counts, int64_t stride,
                                                int rank) {
  int64_t before = 0;
  for (int q = 0; q < rank; ++q) before += tie_counts[int64_t(q) * stride];
  const int64_t mine = tie_counts[int64_t(rank) * stride];
  if (before >= s.tie_rank) return 0;
  if (before + mine <= s.tie_rank) return -1;
  return s.tie_rank - before;
}

// The shard holding the draw: the first q (in vocabulary order) whose
// cumulative kept mass exceeds target; the last shard with mass when
// rounding leaves the sum short. *before gets the mass of the shards before.
DAPO_HOST_DEVICE inline int holder_shard(const double* kept, int64_t stride, int tp, double target, double* before) {
  double cum = 0;
  int last = -1;
  double before_last = 0;
  for (int q = 0; q < tp; ++q) {
    const double k = kept[int64_t(q) * stride];
    if (k > 0) {
      last = q;
      before_last = cum;
    }
    if (k > 0 && cum + k > target) {
      *before = cum;
      return q;
    }
    cum += k;
  }
  *before = before_last;
  return last < 0 ? 0 : last;
}

}  // namespace dapo::ops::detail
