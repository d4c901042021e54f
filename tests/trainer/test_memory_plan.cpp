// The memory plan of `dapo info --memory` and of train's fit check: its
// model arenas are the ones a model with weights carves (the planning code
// without weights gives the same bytes), the paper's 32B recipe fits 80 GB
// GPUs at tp 8 x dp 16, and a configuration that cannot fit says so and
// names what to change.
#include "dapo/trainer/memory_plan.h"

#include <gtest/gtest.h>

#include "dapo/model/qwen2_config.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"
#include "model/model_test_util.h"

namespace dapo::trainer {
namespace {

std::string src(const std::string& rel) { return std::string(DAPO_SOURCE_DIR) + "/" + rel; }

TEST(MemoryPlan, ThePlanWithoutWeightsCarvesWhatTheModelCarves) {
  const model::Qwen2Config c = test::tiny_config(false);
  const parallel::Comm world = parallel::Comm::world();
  for (const bool recompute : {false, true}) {
    model::ParamStore store(c, 0, 1);
    const model::Qwen2Model m(store, world, model::ModelOptions{recompute});
    const model::Qwen2Model::Plan p = model::Qwen2Model::plan(c, 1, 0, DType::f32, model::ModelOptions{recompute});
    for (const int64_t T : {1, 37, 512}) {
      EXPECT_EQ(p.train_activation_bytes(T), m.train_activation_bytes(T)) << T;
      EXPECT_EQ(p.inference_activation_bytes(T), m.inference_activation_bytes(T)) << T;
      EXPECT_EQ(p.cached_activation_bytes(T, 3), m.cached_activation_bytes(T, 3)) << T;
      EXPECT_EQ(p.scratch_bytes(T, T, 2, 4), m.scratch_bytes(T, T, 2, 4)) << T;
    }
  }
}

Config recipe(const std::string& size, std::vector<std::string> extra = {}) {
  extra.push_back("model.path=" + src("inputs/shapes/qwen2.5-" + size));
  return load_config(src("inputs/dapo_base.ini") + "," + src("inputs/dapo_" + size + ".ini"), extra);
}

model::Qwen2Config shape(const std::string& size) {
  return model::load_qwen2_config(src("inputs/shapes/qwen2.5-" + size + "/config.json"));
}

TEST(MemoryPlan, ThePapersRecipeFits80GbGpus) {
  const size_t gb80 = size_t(80) << 30;
  const MemoryPlan p = memory_plan(recipe("32b"), shape("32b"), 8, 16, gb80);
  EXPECT_TRUE(p.fits()) << format_memory_plan(p, recipe("32b"));
  // The sharded optimizer: both moments of 1/16 of the tp slice.
  EXPECT_LT(p.moments, p.gradients / 4);
  // Room for more than a handful of 22k-token sequences in the KV pool.
  EXPECT_GT(p.kv_pool_sequences, 16);
  EXPECT_LE(p.generation_peak() + kRuntimeHeadroom, gb80 + (size_t(1) << 20));
  EXPECT_NE(format_memory_plan(p, recipe("32b")).find("fits: yes"), std::string::npos);
}

TEST(MemoryPlan, ARunThatCannotFitSaysWhatToChange) {
  const Config c = recipe("32b", {"optim.shard_optimizer=false", "train.activation_recompute=false"});
  const MemoryPlan p = memory_plan(c, shape("32b"), 2, 1, size_t(80) << 30);
  EXPECT_FALSE(p.fits());
  const std::string text = format_memory_plan(p, c);
  for (const char* key : {"fits: NO", "parallel.tp", "optim.shard_optimizer", "train.activation_recompute",
                          "train.max_token_len_per_gpu"})
    EXPECT_NE(text.find(key), std::string::npos) << key << " in\n" << text;
}

}  // namespace
}  // namespace dapo::trainer
