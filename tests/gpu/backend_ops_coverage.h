// Which public ops:: entry points with a CUDA backend the op harness
// (test_backend_ops.cpp) compares with the CPU reference, and which are
// tested elsewhere because they have no CPU counterpart. Plain C++, no CUDA:
// tests/ops/test_backend_ops_table.cpp (CI, no GPU) checks these lists
// against the declarations in include/dapo/ops/*.h and cuda/cuda_ops.h, so
// that an op added with a CUDA backend but no harness case fails there; and
// BackendOpsTable.CasesCoverTheList (test_gpu) checks that the table's
// cases cover exactly kHarnessOps.
#pragma once

#include <string_view>

namespace dapo::test::backend_ops {

inline constexpr std::string_view kHarnessOps[] = {
    // adamw.h, attention.h, cast.h, copy.h
    "adamw_step", "attention_forward", "attention_backward", "cast", "copy", "stream_synchronize",
    // embedding.h, fill.h, kv_cache.h, kv_copy.h
    "embedding_forward", "embedding_backward", "fill", "kv_cache_write", "paged_attention", "kv_block_copy",
    // matmul.h, lm_head_sample.h
    "linear_forward_multi", "linear_swiglu_forward", "lm_head_sample",
    // logprob.h
    "logits_row_max", "logits_partial_sums", "logprob_entropy_finish", "logprob_entropy_forward",
    "logprob_entropy_backward",
    // matmul.h
    "matmul", "linear_forward", "linear_residual_forward", "linear_backward",
    // norm_fold.h, qkv_rope_kv_write.h
    "linear_residual_fold", "row_norm_apply", "qkv_rope_kv_write",
    // rmsnorm.h (with its residual fusion), rope.h (with its cache write)
    "residual_rmsnorm_forward", "residual_rmsnorm_backward", "rmsnorm_forward", "rmsnorm_backward",
    "rope_forward", "rope_backward", "rope_kv_write",
    // sampling.h
    "sample_tokens", "sampling_shard_max", "sampling_shard_sum", "sampling_select_begin",
    "sampling_shard_histogram", "sampling_descend", "sampling_shard_tie_count", "sampling_shard_tie_limit",
    "sampling_shard_kept_mass", "sampling_shard_choose",
    // step_io.h, sum_squares.h, swiglu.h
    "step_in", "step_out", "sum_squares", "swiglu_forward", "swiglu_backward"};

// An op with a CUDA backend whose check is not a comparison with the CPU,
// and the test that checks it.
struct TestedElsewhere {
  std::string_view op, file, test, why;
};
inline constexpr TestedElsewhere kTestedElsewhere[] = {
    {"set_step_in", "tests/gpu/test_step_io_gpu.cpp", "AGraphIsRetargetedBetweenReplays",
     "re-targets a captured CUDA graph's kernel; the CPU op has no graph"},
    {"set_step_out", "tests/gpu/test_step_io_gpu.cpp", "AGraphIsRetargetedBetweenReplays",
     "re-targets a captured CUDA graph's kernel; the CPU op has no graph"},
};

}  // namespace dapo::test::backend_ops
