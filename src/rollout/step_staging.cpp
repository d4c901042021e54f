#include "step_staging.h"

#include <cstring>

#include "dapo/core/error.h"
#include "dapo/ops/copy.h"

namespace dapo::rollout {
namespace {

constexpr size_t kAlign = 16;  // every array starts 16-byte aligned: the kernels' vector loads

size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

size_t StepStaging::capacity_for(int64_t tokens, int64_t seqs, int64_t max_blocks, int64_t copies, int64_t rows) {
  const size_t i4 = sizeof(int32_t), i8 = sizeof(int64_t);
  // tokens, positions, slot_mapping; cu_seqlens_q, last_rows, context_lens;
  // the block table; copy sources and destinations; rows' logit row,
  // stream and counter.
  return 3 * round_up(size_t(tokens) * i4) + round_up(size_t(seqs + 1) * i4) + 2 * round_up(size_t(seqs) * i4) +
         round_up(size_t(seqs) * size_t(max_blocks) * i4) + 2 * round_up(size_t(copies) * i4) +
         round_up(size_t(rows) * i4) + 2 * round_up(size_t(rows) * i8) + kAlign;
}

StepStaging::StepStaging(size_t capacity_bytes, const ops::Ctx& ctx)
    : ctx_(ctx),
      on_device_(ctx.backend == ops::Backend::cuda),
      capacity_(round_up(capacity_bytes)),
      host_(2 * capacity_ + Arena::kAlign, Arena::Pinned{}, "step-metadata-host"),
      device_(on_device_ ? capacity_ : 0, on_device_ ? Device::cuda : Device::cpu, "step-metadata-device") {
  for (char*& b : host_blocks_) b = static_cast<char*>(host_.alloc_bytes(capacity_));
  if (on_device_) device_block_ = static_cast<char*>(device_.alloc_bytes(capacity_));
  begin();
}

void StepStaging::begin() {
  current_ = 1 - current_;
  host_block_ = host_blocks_[current_];
  view_block_ = on_device_ ? device_block_ : host_block_;
  used_ = 0;
}

Tensor StepStaging::add(const void* values, size_t bytes, DType dtype, std::initializer_list<int64_t> dims) {
  DAPO_CHECK(used_ + round_up(bytes) <= capacity_, "step metadata: ", used_ + round_up(bytes),
             " bytes over the planned ", capacity_);
  // Both blocks come from allocators with >= 256-byte alignment, so the same
  // offset is 16-byte aligned in each.
  if (bytes > 0) std::memcpy(host_block_ + used_, values, bytes);
  Tensor t(view_block_ + used_, dtype, dims, on_device_ ? Device::cuda : Device::cpu);
  DAPO_CHECK(t.nbytes() == bytes, "step metadata: ", bytes, " bytes viewed as ", t.shape_string());
  used_ += round_up(bytes);
  return t;
}

Tensor StepStaging::add_i32(std::span<const int32_t> values, std::initializer_list<int64_t> dims) {
  return add(values.data(), values.size_bytes(), DType::i32, dims);
}

Tensor StepStaging::add_i64(std::span<const int64_t> values, std::initializer_list<int64_t> dims) {
  return add(values.data(), values.size_bytes(), DType::i64, dims);
}

Tensor StepStaging::packed_host() const { return Tensor(host_block_, DType::i32, {int64_t(used_ / 4)}, Device::cpu); }

Tensor StepStaging::packed_device() const {
  DAPO_CHECK(on_device_, "StepStaging: no device mirror on the CPU backend");
  return Tensor(device_block_, DType::i32, {int64_t(used_ / 4)}, Device::cuda);
}

void StepStaging::upload() {
  if (!on_device_ || used_ == 0) return;
  ops::copy(ctx_, Tensor(view_block_, DType::i32, {int64_t(used_ / 4)}, Device::cuda),
            Tensor(host_block_, DType::i32, {int64_t(used_ / 4)}, Device::cpu));
}

}  // namespace dapo::rollout
