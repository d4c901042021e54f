#include "decode_graphs.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::rollout {

int64_t batch_bucket(int64_t B, int64_t max_seqs) {
  int64_t b = 1;
  while (b < B && b < 32) b *= 2;
  if (b < B) b = (B + 31) / 32 * 32;
  return std::min(b, max_seqs);
}

int64_t context_bucket(int64_t context, int64_t max_len) {
  int64_t c = 256;
  while (c < context) c *= 2;
  return std::max(std::min(c, max_len), context);
}

void pad_decode(PaddedDecode& out, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                const std::vector<int32_t>& slot_mapping, const std::vector<int32_t>& block_table, int64_t width,
                const std::vector<int32_t>& context_lens, int64_t Bp, int64_t W, int32_t pad_block) {
  const int64_t B = int64_t(context_lens.size());
  DAPO_CHECK(int64_t(tokens.size()) == B && Bp >= B && W >= width, "pad_decode: ", tokens.size(), " tokens of ", B,
             " sequences into ", Bp, " rows, width ", width, " into ", W);
  out.tokens = tokens;
  out.positions = positions;
  out.slot_mapping = slot_mapping;
  out.context_lens = context_lens;
  out.tokens.resize(size_t(Bp), 0);
  out.positions.resize(size_t(Bp), 0);
  out.slot_mapping.resize(size_t(Bp), -1);
  out.context_lens.resize(size_t(Bp), 1);
  out.cu_seqlens_q.resize(size_t(Bp + 1));
  out.last_rows.resize(size_t(Bp));
  for (int64_t b = 0; b <= Bp; ++b) out.cu_seqlens_q[size_t(b)] = int32_t(b);
  for (int64_t b = 0; b < Bp; ++b) out.last_rows[size_t(b)] = int32_t(b);
  out.block_table.assign(size_t(Bp * W), pad_block);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(block_table.begin() + std::ptrdiff_t(b * width), width,
                out.block_table.begin() + std::ptrdiff_t(b * W));
}

DecodeGraphs::Pick DecodeGraphs::pick(int64_t Bp, int64_t Cp) {
  const int64_t seen = steps_[{Bp, Cp}]++;
  if (const auto it = graphs_.find({Bp, Cp}); it != graphs_.end()) return {&it->second, Bp};
  if (seen < kPadSteps)
    for (auto it = graphs_.upper_bound({Bp, Cp}); it != graphs_.end(); ++it)
      if (it->first.second == Cp) {
        ++padded_steps_;
        return {&it->second, it->first.first};
      }
  return {nullptr, Bp};
}

ops::CapturedGraph& DecodeGraphs::add(int64_t Bp, int64_t Cp, ops::CapturedGraph graph) {
  return graphs_[{Bp, Cp}] = std::move(graph);
}

}  // namespace dapo::rollout
