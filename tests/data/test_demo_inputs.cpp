// The demo files shipped in inputs/demo/: they load with dapo's dataset
// loader, tokenizer and config parser (and the tokenizer encodes as HF
// tokenizers does), their ground truths are right (read
// back from the problem text independently), and every prompt and worked
// solution fits the demo's token budgets under the ChatML template.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "arithmetic_parse.h"
#include "dapo/core/config.h"
#include "dapo/data/arithmetic_data.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::data {
namespace {

std::string demo(const std::string& name) { return std::string(DAPO_SOURCE_DIR) + "/inputs/demo/" + name; }

// Prompt plus worked solution plus <|im_end|>: what one SFT sequence or one
// correct rollout holds.
constexpr int64_t kMaxSequenceTokens = 96;

TEST(DemoInputs, TokenizerIsTinyByteLevelBpeWithChatMlSpecials) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  EXPECT_LE(tok.vocab_size(), 512);
  const int64_t v = tok.vocab_size();
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), TokenId(v - 3));
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), TokenId(v - 2));
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), TokenId(v - 1));
  for (const TokenId id : {TokenId(v - 3), TokenId(v - 2), TokenId(v - 1)}) EXPECT_TRUE(tok.is_special(id));
  EXPECT_EQ(eos_token_ids(tok), (std::vector<TokenId>{TokenId(v - 1), TokenId(v - 3)}));
  // Byte tokens first (id = byte value), so any text encodes; digits stay single tokens.
  EXPECT_EQ(tok.encode("A"), std::vector<TokenId>{'A'});
  EXPECT_EQ(tok.encode("2025"), (std::vector<TokenId>{'2', '0', '2', '5'}));
  // The template words are whole tokens.
  for (const char* word : {"Answer", " apples", " How", " many", " does", " have", " now", " times"})
    EXPECT_EQ(tok.encode(word).size(), 1u) << word;
  const std::string other = "Ünïcode text, not from the demo: 3.14 \xF0\x9F\x98\x80";
  EXPECT_EQ(tok.decode(tok.encode(other)), other);
}

// HF tokenizers reads the demo tokenizer as dapo does: ids and decoded text
// of tests/fixtures/demo/hf_reference.jsonl (made by the script beside it).
TEST(DemoInputs, TokenizerMatchesHfTokenizers) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  std::ifstream in(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/demo/hf_reference.jsonl");
  ASSERT_TRUE(in.good());
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json d = nlohmann::json::parse(line);
    if (d.contains("meta")) {
      EXPECT_EQ(d["meta"]["vocab"].get<int64_t>(), tok.vocab_size());
      continue;
    }
    const std::string text = d["text"].get<std::string>();
    const std::vector<TokenId> ids = d["ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(tok.encode(text), ids) << text << "\n(tokenizer.json changed? rerun "
                                        "tests/fixtures/demo/make_hf_reference.py where HF tokenizers is installed)";
    EXPECT_EQ(tok.decode(ids), d["decoded"].get<std::string>()) << text;
    EXPECT_EQ(tok.decode(ids, true), d["decoded_skip"].get<std::string>()) << text;
    ++cases;
  }
  EXPECT_EQ(cases, 28);
}

TEST(DemoInputs, ModelConfigMatchesTheTokenizer) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  const model::Qwen2Config c = model::load_qwen2_config(demo("model/config.json"));
  EXPECT_EQ(c.vocab_size, (tok.vocab_size() + 7) / 8 * 8);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{*tok.token_to_id("<|im_end|>")});
  EXPECT_EQ(c.bos_token_id, *tok.token_to_id("<|endoftext|>"));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_GE(c.max_position_embeddings, kMaxSequenceTokens);
  EXPECT_NO_THROW(model::check_tp_compatible(c, 2));  // the demo runs on 2 ranks, at any tp
}

TEST(DemoInputs, EveryProblemIsRightAndFitsTheTokenBudgets) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  const TokenId im_end = *tok.token_to_id("<|im_end|>");
  // The budgets of the demo's configuration.
  const Config config = load_config(std::string(DAPO_SOURCE_DIR) + "/inputs/demo.ini", {});
  const int64_t max_prompt = config.data.max_prompt_length;
  const int64_t max_response = config.rollout.max_response_length;

  std::vector<PromptRecord> all;
  for (const auto& [name, count] : {std::pair{"train.jsonl", 2000}, {"val.jsonl", 200}, {"sft.jsonl", 2000}}) {
    const std::vector<PromptRecord> records = load_prompt_file(demo(name));
    ASSERT_EQ(int64_t(records.size()), count) << name;
    const bool sft = std::string(name) == "sft.jsonl";
    std::vector<std::string> responses;
    if (sft) {  // the loader does not keep "response": read it here
      std::ifstream in(demo(name));
      for (std::string line; std::getline(in, line);)
        responses.push_back(nlohmann::json::parse(line).at("response").get<std::string>());
      ASSERT_EQ(responses.size(), records.size());
    }
    int64_t longest = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      const PromptRecord& r = records[i];
      ASSERT_EQ(r.messages.size(), 1u) << r.where();
      const testing::ParsedArithmetic parsed = testing::parse_arithmetic_text(r.messages[0].content);
      ASSERT_EQ(parsed.error, "") << r.where();
      EXPECT_EQ(r.ground_truth, std::to_string(parsed.answer)) << r.where();
      if (sft) EXPECT_EQ(responses[i], parsed.solution) << r.where();

      const std::vector<TokenId> prompt = encode_chat(tok, r.messages, ChatFormat{}, true, r.where());
      std::vector<TokenId> response = tok.encode(parsed.solution);
      response.push_back(im_end);
      EXPECT_LE(int64_t(prompt.size()), max_prompt) << r.where() << ": data.max_prompt_length of inputs/demo.ini";
      EXPECT_LE(int64_t(response.size()), max_response)
          << r.where() << ": rollout.max_response_length of inputs/demo.ini";
      EXPECT_LE(int64_t(prompt.size() + response.size()), kMaxSequenceTokens) << r.where();
      longest = std::max(longest, int64_t(prompt.size() + response.size()));
      EXPECT_EQ(tok.decode(prompt), render_chat(r.messages, ChatFormat{}, true));
    }
    EXPECT_GT(longest, 20) << name;  // the tokenizer is not cheating by dropping text
    all.insert(all.end(), records.begin(), records.end());
  }
  EXPECT_NO_THROW(PromptDataset{all});  // one set of uids for the three files
}

// ---- the GPU demo (inputs/demo_gpu/, jobs/demo_gpu.sh) ------------------------

std::string source(const std::string& path) { return std::string(DAPO_SOURCE_DIR) + "/" + path; }

// The GPU demo's model: tens of millions of parameters, head_dim 64 (one of
// the GPU attention's sizes), the CPU demo's tokenizer, room for the longest
// prompt + response of the recipe.
TEST(DemoGpuInputs, ModelConfigAndRecipeAgree) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  const model::Qwen2Config c = model::load_qwen2_config(source("inputs/demo_gpu/model/config.json"));
  EXPECT_EQ(c.vocab_size, (tok.vocab_size() + 7) / 8 * 8);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{*tok.token_to_id("<|im_end|>")});
  EXPECT_EQ(c.hidden_size, 512);
  EXPECT_EQ(c.num_hidden_layers, 8);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.hidden_size / c.num_attention_heads, 64);
  EXPECT_EQ(c.intermediate_size, 1408);
  EXPECT_TRUE(c.tie_word_embeddings);
  const Config sft = load_config(source("inputs/demo_gpu_sft.ini"), {});
  const Config rl = load_config(source("inputs/demo_gpu.ini"), {});
  EXPECT_NO_THROW(check_training_config(rl));
  for (const Config* cfg : {&sft, &rl}) {
    EXPECT_EQ(cfg->parallel.backend, BackendChoice::cuda);
    EXPECT_EQ(cfg->model.tokenizer, "inputs/demo/tokenizer.json");
  }
  EXPECT_EQ(sft.model.path, "inputs/demo_gpu/model");
  EXPECT_EQ(rl.model.path, sft.checkpoint.dir + "/sft_final.h5");  // DAPO starts from the warm start
  EXPECT_GE(c.max_position_embeddings, rl.data.max_prompt_length + rl.rollout.max_response_length);
  // The paper's recipe: clip-higher, dynamic sampling, token-level loss, soft overlong punishment.
  EXPECT_GT(rl.algorithm.clip_ratio_high, rl.algorithm.clip_ratio_low);
  EXPECT_TRUE(rl.algorithm.dynamic_sampling);
  EXPECT_EQ(rl.algorithm.loss_agg_mode, LossAggMode::token_mean);
  EXPECT_GT(rl.algorithm.overlong_buffer_len, 0);
}

// jobs/demo_gpu.sh writes its data at run time (40000 SFT pairs are ~25 MB);
// the same command's problems, fewer of them, against the recipe's budgets:
// every prompt fits data.max_prompt_length, and every worked solution ends
// before the soft overlong punishment starts (max_response_length -
// overlong_buffer_len): a correct answer is never penalised for its length.
TEST(DemoGpuInputs, TheScriptsDataFitTheRecipe) {
  std::ifstream script(source("jobs/demo_gpu.sh"));
  const std::string text((std::istreambuf_iterator<char>(script)), std::istreambuf_iterator<char>());
  ASSERT_NE(text.find("demo-data --out \"$out/data\" --seed 2026 --train 4000 --val 200 --sft 40000 --difficulty 6 "
                      "--solution columns"),
            std::string::npos)
      << "jobs/demo_gpu.sh's demo-data line changed: update this test";
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  const Config rl = load_config(source("inputs/demo_gpu.ini"), {});
  const int64_t max_prompt = rl.data.max_prompt_length;
  const int64_t unpenalised = rl.rollout.max_response_length - rl.algorithm.overlong_buffer_len;
  ArithmeticSpec spec = arithmetic_difficulty(6);
  spec.solution = SolutionStyle::columns;
  const ArithmeticSplits splits = make_arithmetic_splits(spec, 2026, {500, 200, 2000});
  int64_t longest = 0, sum = 0, shortest = 1 << 30;
  for (const auto* split : {&splits.train, &splits.val, &splits.sft}) {
    for (const ArithmeticProblem& p : *split) {
      const std::vector<ChatMessage> messages{{"user", p.problem}};
      const std::vector<TokenId> prompt = encode_chat(tok, messages, ChatFormat{}, true, "demo_gpu");
      EXPECT_LE(int64_t(prompt.size()), max_prompt) << p.problem;
      const int64_t response = int64_t(tok.encode(p.solution).size()) + 1;  // + <|im_end|>
      EXPECT_LE(response, unpenalised) << p.solution;
      longest = std::max(longest, response);
      shortest = std::min(shortest, response);
      sum += response;
    }
  }
  // Hundreds of tokens: long enough for response length and entropy to matter.
  const int64_t n = int64_t(splits.train.size() + splits.val.size() + splits.sft.size());
  EXPECT_GE(shortest, 80);
  EXPECT_GE(sum / n, 200);
  EXPECT_GE(longest, 350);
}

}  // namespace
}  // namespace dapo::data
