// Per-epoch Fisher-Yates shuffle on Philox draws, and the resumable cursor.
#include "dapo/data/prompt_order.h"

#include <numeric>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"

namespace dapo::data {
namespace {

// 64-bit words of one (seed, stream): each counter value gives two.
class WordStream {
 public:
  WordStream(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  uint64_t next() {
    if (have_ == 0) {
      const U32x4 d = philox_draw(seed_, stream_, counter_++);
      buf_[0] = uint64_t(d.v[0]) | uint64_t(d.v[1]) << 32;
      buf_[1] = uint64_t(d.v[2]) | uint64_t(d.v[3]) << 32;
      have_ = 2;
    }
    return buf_[2 - have_--];
  }

  // Uniform in [0, range), range >= 1: Lemire, "Fast random integer
  // generation in an interval" (2019). The rejection removes the bias of
  // the multiply-shift; it triggers with probability range / 2^64.
  uint64_t below(uint64_t range) {
    unsigned __int128 m = (unsigned __int128)next() * range;
    uint64_t low = uint64_t(m);
    if (low < range) {
      const uint64_t threshold = (0 - range) % range;  // 2^64 mod range
      while (low < threshold) {
        m = (unsigned __int128)next() * range;
        low = uint64_t(m);
      }
    }
    return uint64_t(m >> 64);
  }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  uint64_t buf_[2] = {0, 0};
  int have_ = 0;
};

}  // namespace

PromptOrder::PromptOrder(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
  DAPO_CHECK(size > 0, "a prompt order needs at least one prompt, got ", size);
}

std::vector<int64_t> PromptOrder::permutation(int64_t size, uint64_t seed, int64_t epoch) {
  DAPO_CHECK(size >= 0 && epoch >= 0, "size ", size, " epoch ", epoch);
  std::vector<int64_t> p(size_t(size), 0);
  std::iota(p.begin(), p.end(), int64_t{0});
  WordStream words(seed, stream_id({kPromptOrderTag, uint64_t(epoch)}));
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j = int64_t(words.below(uint64_t(i) + 1));  // j in [0, i]: i itself too
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

void PromptOrder::load_epoch(int64_t epoch) {
  if (cached_epoch_ == epoch) return;
  perm_ = permutation(size_, seed_, epoch);
  cached_epoch_ = epoch;
}

std::vector<int64_t> PromptOrder::next_batch(int64_t n) {
  DAPO_CHECK(n >= 0, "batch size ", n);
  std::vector<int64_t> batch;
  batch.reserve(size_t(n));
  while (int64_t(batch.size()) < n) {
    load_epoch(cursor_.epoch);
    const int64_t take = std::min(n - int64_t(batch.size()), size_ - cursor_.position);
    batch.insert(batch.end(), perm_.begin() + cursor_.position, perm_.begin() + cursor_.position + take);
    cursor_.position += take;
    if (cursor_.position == size_) {
      ++cursor_.epoch;
      cursor_.position = 0;
    }
  }
  return batch;
}

void PromptOrder::restore(const PromptOrderState& state, const std::string& origin) {
  if (state.seed != seed_ || state.size != size_)
    throw UserError(cat(origin, ": the prompt order was saved with data.seed = ", state.seed, " over ",
                        state.size, " prompts, but this run has data.seed = ", seed_, " over ", size_,
                        " prompts: resuming would repeat or skip prompts (use the seed and the "
                        "data.train_files of the saved run)"));
  if (state.cursor.epoch < 0 || state.cursor.position < 0 || state.cursor.position >= size_)
    throw UserError(cat(origin, ": invalid prompt cursor (epoch ", state.cursor.epoch, ", position ",
                        state.cursor.position, ") for ", size_, " prompts"));
  cursor_ = state.cursor;
}

}  // namespace dapo::data
