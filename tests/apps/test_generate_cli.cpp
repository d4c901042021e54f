// `dapo generate` as users run it: greedy continuations of the HF fixture
// models equal HF transformers' token for token (from an imported
// checkpoint and from the HF directory itself); text and chat prompts with a
// tokenizer (response text, EOS stops, truncation policies); the output
// forms for n = 1 and n > 1 with unknown fields kept; error lines for bad
// command lines and bad input lines; and the same output under mpirun with
// dp = 2, tp = 2, tp = 4 and tp x dp = 2 x 2.
#include <gtest/gtest.h>

#include "apps/cli_test_util.h"
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <limits>
#include <algorithm>
#include <iterator>
#include <random>

#include "dapo/data/chat_template.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"
#include "io/io_test_util.h"

namespace {

namespace fs = std::filesystem;
using dapo::test::TempDir;
using dapo::test::write_text;
using Json = nlohmann::ordered_json;

using Result = dapo::test::CliResult;
using dapo::test::read_jsonl;
using dapo::test::run_command;
using dapo::test::run_shell;

std::string dapo() { return dapo::test::dapo_binary(); }
Result run(const std::string& args) { return run_command(dapo() + args); }
Result mpirun(int np, const std::string& args) {
  return run_command("mpirun -np " + std::to_string(np) + " --oversubscribe " + dapo() + args);
}

std::string fixture(const std::string& name) { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/model/" + name; }
std::string tiny_tokenizer() { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json"; }

// A configuration for generation (the training checks of overlong_buffer_len
// and dynamic sampling do not apply to it), then `overrides` for the
// command line.
std::string write_config(const TempDir& dir, const std::string& overrides = "") {
  const std::string path = dir.file("generate.ini");
  write_text(path,
             "[rollout]\nn = 1\ntemperature = 0\nmax_response_length = 12\n[algorithm]\ndynamic_sampling = false\n"
             "overlong_buffer_len = 0\n");
  return path + " " + overrides;
}

// A small random Qwen2 HF directory whose vocabulary covers the tiny
// tokenizer (281 ids): weights small enough that sampling is spread out.
// `nan_in`: a tensor whose first value is NaN (a damaged model).
void write_random_hf_dir(const fs::path& dir, const std::string& nan_in = "") {
  const std::string config = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 288,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "hidden_act": "silu", "use_sliding_window": false, "tie_word_embeddings": false})";
  const auto c = dapo::model::parse_qwen2_config(config, "random");
  std::mt19937 gen(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<dapo::test::HfTensor> tensors;
  for (const auto& spec : dapo::model::qwen2_param_specs(c)) {
    dapo::test::HfTensor t{spec.name, "F32", spec.shape, {}};
    int64_t n = 1;
    for (const int64_t d : spec.shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    const bool norm = spec.name.find("norm") != std::string::npos;
    for (float& x : v) x = norm ? 1.0f + 0.2f * u(gen) : 0.15f * u(gen);
    if (spec.name == nan_in) v[0] = std::numeric_limits<float>::quiet_NaN();
    t.bytes.resize(v.size() * 4);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    tensors.push_back(std::move(t));
  }
  dapo::test::write_hf_dir(dir, config, tensors);
}

TEST(GenerateCli, GreedyContinuationsEqualHfTransformers) {
  for (const std::string name : {"tiny_tied", "tiny_untied"}) {
    if (!fs::exists(fixture(name) + "/expected.json")) GTEST_SKIP() << "fixture " << name << " absent";
    TempDir dir;
    std::ifstream in(fixture(name) + "/expected.json");
    const Json expected = Json::parse(in);
    std::string lines;
    for (const auto& p : expected.at("prompts")) lines += Json{{"prompt_ids", p}, {"name", name}}.dump() + "\n";
    write_text(dir.file("p.jsonl"), lines);
    const std::string ini =
        write_config(dir, "--rollout.max_response_length=" + std::to_string(expected.at("new_tokens").get<int>()));
    // Imported with import-hf into a checkpoint ...
    Result r = run("import-hf --hf-dir " + fixture(name) + " --output " + dir.file("c.h5"));
    ASSERT_EQ(r.code, 0) << r.output;
    r = run("generate --config " + ini + " --checkpoint " + dir.file("c.h5") + " --input " + dir.file("p.jsonl") +
            " --output " + dir.file("o.jsonl") + " --rollout.block_size=4");
    ASSERT_EQ(r.code, 0) << r.output;
    // ... and the HF directory itself as model.path, imported in memory.
    r = run("generate --config " + ini + " --model.path=" + fixture(name) + " --input " + dir.file("p.jsonl") +
            " --output " + dir.file("o2.jsonl"));
    ASSERT_EQ(r.code, 0) << r.output;
    for (const std::string out : {"o.jsonl", "o2.jsonl"}) {
      const std::vector<Json> got = read_jsonl(dir.file(out));
      ASSERT_EQ(got.size(), expected.at("continuations").size()) << name << " " << out;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].at("response_ids"), expected.at("continuations")[i]) << name << " " << out << " prompt " << i;
        EXPECT_EQ(got[i].at("finish_reason"), "length");
        EXPECT_EQ(got[i].at("name"), name);
        EXPECT_FALSE(got[i].contains("response")) << "no tokenizer, no text";
        EXPECT_FALSE(got[i].contains("sample_index"));
      }
    }
  }
}

TEST(GenerateCli, TextAndChatPromptsWithATokenizer) {
  TempDir dir;
  write_random_hf_dir(dir.path() / "hf");
  fs::copy_file(tiny_tokenizer(), dir.path() / "hf" / "tokenizer.json");  // found beside the model
  const dapo::data::Tokenizer tok = dapo::data::Tokenizer::load(tiny_tokenizer());
  const std::vector<dapo::data::ChatMessage> chat{{"system", "be brief"}, {"user", "what is 2+2?"}};
  const std::vector<int32_t> chat_ids = dapo::data::encode_chat(tok, chat, {}, true);
  Json ids_line{{"prompt_ids", chat_ids}, {"data_source", "s"}, {"extra_info", {{"index", 7}}}, {"k", 1}};
  Json chat_line{{"data_source", "s"},
                 {"prompt", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "what is 2+2?"}}}},
                 {"extra_info", {{"index", "7"}}},
                 {"k", 2}};
  Json text_line{{"prompt", "Hello world, hello xy"}, {"reward_model", {{"ground_truth", "4"}}}};
  write_text(dir.file("p.jsonl"), ids_line.dump() + "\n\n" + chat_line.dump() + "\n" + text_line.dump() + "\n");
  const std::string ini = write_config(dir, "--rollout.n=6 --rollout.temperature=1 --rollout.max_response_length=40");
  const Result r = run("generate --config " + ini + " --model.path=" + dir.file("hf") + " --input " +
                       dir.file("p.jsonl") + " --output " + dir.file("o.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  // The first two lines share (data_source, index): same uid, same draws.
  EXPECT_NE(r.output.find("1 prompts have the (data_source, extra_info.index) of an earlier line"), std::string::npos)
      << r.output;
  const std::vector<Json> got = read_jsonl(dir.file("o.jsonl"));
  ASSERT_EQ(got.size(), 18u);
  int eos = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const Json& line = got[i];
    EXPECT_EQ(line.at("sample_index"), int(i % 6));
    const auto ids = line.at("response_ids").get<std::vector<int32_t>>();
    ASSERT_FALSE(ids.empty());
    const bool ends_eos = ids.back() == 276 || ids.back() == 278;  // <|endoftext|>, <|im_end|>
    EXPECT_EQ(line.at("finish_reason"), ends_eos ? "eos" : "length") << line.dump();
    if (!ends_eos) EXPECT_EQ(ids.size(), 40u);
    for (size_t t = 0; t + 1 < ids.size(); ++t) EXPECT_TRUE(ids[t] != 276 && ids[t] != 278) << "EOS inside";
    eos += ends_eos;
    std::vector<int32_t> known;
    for (const int32_t id : ids)
      if (id < 281) known.push_back(id);
    EXPECT_EQ(line.at("response"), tok.decode(known, true));
  }
  EXPECT_GT(eos, 0);
  // The chat prompt and its token ids give the same responses; other
  // fields stay, in their order.
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_EQ(got[k].at("response_ids"), got[6 + k].at("response_ids")) << k;
    EXPECT_EQ(got[k].at("k"), 1);
    EXPECT_EQ(got[6 + k].at("k"), 2);
    EXPECT_EQ(got[12 + k].at("reward_model").at("ground_truth"), "4");
  }
  EXPECT_EQ(got[0].begin().key(), "prompt_ids");
  EXPECT_EQ(got[6].begin().key(), "data_source");
}

// --output - is standard output, as for verify and render (no file named
// "-"), and --output /dev/stdout into a pipe works too: both write the
// bytes --output FILE writes.
TEST(GenerateCli, OutputDashAndDevStdoutWriteToAPipe) {
  TempDir dir;
  write_random_hf_dir(dir.path() / "hf");
  write_text(dir.file("p.jsonl"), "{\"prompt_ids\":[1,2,3]}\n{\"prompt_ids\":[4,5]}\n");
  const std::string args = "generate --config " + write_config(dir, "--rollout.n=2") + " --model.path=" +
                           dir.file("hf") + " --input " + dir.file("p.jsonl") + " --output ";
  Result r = run(args + dir.file("o.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir.file("o.jsonl"));
  const std::string want((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(std::count(want.begin(), want.end(), '\n'), 4) << want;
  for (const std::string out : {"-", "/dev/stdout"}) {
    // In the temporary folder, so that a file named "-" would show.
    r = run_shell("cd " + dir.path().string() + " && " + dapo() + args + out + " 2>" + dir.file("err") + " | cat");
    EXPECT_EQ(r.code, 0) << out;
    EXPECT_EQ(r.output, want) << out;
    EXPECT_FALSE(fs::exists(dir.path() / "-")) << out;
  }
}

TEST(GenerateCli, LongPromptsFollowTheTruncationPolicy) {
  TempDir dir;
  write_random_hf_dir(dir.path() / "hf");
  const std::string ids12 = "[1,2,3,4,5,6,7,8,9,10,11,12]";
  write_text(dir.file("p.jsonl"), "{\"prompt_ids\": [5, 6]}\n{\"prompt_ids\": " + ids12 +
                                      ", \"extra_info\": {\"index\": 9}}\n{\"prompt_ids\": [7]}\n");
  const std::string ini = write_config(dir, "--rollout.temperature=1 --rollout.max_response_length=5");
  const std::string common = "generate --config " + ini + " --model.path=" + dir.file("hf") + " --data.max_prompt_length=4";
  // left: the last 4 ids, which sample like the same 4 ids given directly.
  Result r = run(common + " --input " + dir.file("p.jsonl") + " --output " + dir.file("left.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("truncated 1 prompt"), std::string::npos) << r.output;
  const auto left = read_jsonl(dir.file("left.jsonl"));
  ASSERT_EQ(left.size(), 3u);
  // The same uid needs the same data_source, i.e. the same file stem.
  fs::create_directory(dir.path() / "sub");
  write_text(dir.file("sub/p.jsonl"), "{\"prompt_ids\": [9,10,11,12], \"extra_info\": {\"index\": 9}}\n");
  r = run(common + " --input " + dir.file("sub/p.jsonl") + " --output " + dir.file("same.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_jsonl(dir.file("same.jsonl"))[0].at("response_ids"), left[1].at("response_ids"));
  // skip: the line is left out of the output.
  r = run(common + " --data.truncation=skip --input " + dir.file("p.jsonl") + " --output " + dir.file("skip.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto skip = read_jsonl(dir.file("skip.jsonl"));
  ASSERT_EQ(skip.size(), 2u);
  EXPECT_EQ(skip[0].at("prompt_ids"), Json::parse("[5, 6]"));
  EXPECT_EQ(skip[1].at("prompt_ids"), Json::parse("[7]"));
  EXPECT_EQ(skip[1].at("response_ids"), left[2].at("response_ids"));
  // error: file:line.
  r = run(common + " --data.truncation=error --input " + dir.file("p.jsonl") + " --output " + dir.file("e.jsonl"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo generate: error: " + dir.file("p.jsonl") +
                          ":2: prompt is 12 tokens, longer than data.max_prompt_length = 4"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("e.jsonl")));
}

TEST(GenerateCli, BadInputLinesNameFileAndLine) {
  TempDir dir;
  write_random_hf_dir(dir.path() / "hf");
  const std::string ini = write_config(dir);
  const std::string common = "generate --config " + ini + " --model.path=" + dir.file("hf") + " --output " +
                             dir.file("o.jsonl") + " --input ";
  // (every message is checked in-process by tests/rollout/test_generate_jsonl.cpp)
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt_ids\": [1]}\n[1, 2]\n", ":2: expected a JSON object, got array"},
      {"\n{\"prompt_ids\": [1, 288]}\n", ":2: field prompt_ids[1]: 288 is not a token id of the model (0..287)"},
      {"{\"prompt\": \"hello\"}\n", ":1: field prompt: a text prompt needs a tokenizer"},
  };
  for (const auto& [text, message] : cases) {
    write_text(dir.file("bad.jsonl"), text);
    const Result r = run(common + dir.file("bad.jsonl"));
    EXPECT_EQ(r.code, 2) << text;
    EXPECT_NE(r.output.find("dapo generate: error: " + dir.file("bad.jsonl") + message), std::string::npos)
        << text << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir.file("o.jsonl")));
  }
  const Result r = run(common + dir.file("missing.jsonl"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("missing.jsonl") + ": cannot open the input file"), std::string::npos) << r.output;
}

TEST(GenerateCli, BadCommandLinesAndModels) {
  TempDir dir;
  const std::string ini = write_config(dir);
  write_text(dir.file("p.jsonl"), "{\"prompt_ids\": [1]}\n");
  const std::string io = " --input " + dir.file("p.jsonl") + " --output " + dir.file("o.jsonl");
  Result r = run("generate --config " + ini + " --input " + dir.file("p.jsonl"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo generate: error: command line: dapo generate needs --input P.jsonl and --output O.jsonl"),
            std::string::npos)
      << r.output;
  r = run("generate --config " + ini + io);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no model: give --checkpoint C.h5, or model.path"), std::string::npos) << r.output;
  r = run("generate --config " + ini + io + " --checkpoint " + dir.file("none.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("none.h5") + ": no such file or directory (--checkpoint)"), std::string::npos)
      << r.output;
  write_text(dir.file("text.h5"), "not a checkpoint\n");
  r = run("generate --config " + ini + io + " --checkpoint " + dir.file("text.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("text.h5") + ": not an HDF5 file"), std::string::npos) << r.output;
  r = run("generate --config " + ini + io + " --model.path=" + fixture("tiny_tied") + " --rollout.max_num_seqs=-1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("command line: rollout.max_num_seqs: must be >= 0 (0 means as many as the KV pool holds)"),
            std::string::npos)
      << r.output;
  r = run("generate --config " + ini + io + " --model.path=" + fixture("tiny_tied") + " --model.tokenizer=" +
          dir.file("t.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("t.json") + ": no such file (model.tokenizer)"), std::string::npos) << r.output;
  // The tokenizer's ids must fit the model's vocabulary (96 < 281).
  write_text(dir.file("t.jsonl"), "{\"prompt\": \"<|im_end|>\"}\n");
  r = run("generate --config " + ini + " --input " + dir.file("t.jsonl") + " --output " + dir.file("o.jsonl") +
          " --model.path=" + fixture("tiny_tied") + " --model.tokenizer=" + tiny_tokenizer());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("t.jsonl") + ":1: field prompt: the tokenizer gives id 278, outside the model's "
                          "vocabulary (0..95)"),
            std::string::npos)
      << r.output;
  // A KV budget that cannot hold the prompt and its response.
  r = run("generate --config " + ini + io + " --model.path=" + fixture("tiny_tied") + " --rollout.kv_cache_gib=0.000001");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("cannot hold one block"), std::string::npos) << r.output;
}

// --output onto a symlink writes its target and keeps the link; onto a FIFO
// writes into the FIFO (a reader gets the lines) instead of renaming a file
// over it.
TEST(GenerateCli, OutputThroughSymlinksAndFifos) {
  TempDir dir;
  const std::string ini = write_config(dir);
  write_text(dir.file("p.jsonl"), "{\"prompt_ids\": [1, 2]}\n");
  const std::string gen =
      "generate --config " + ini + " --model.path=" + fixture("tiny_tied") + " --input " + dir.file("p.jsonl");
  fs::create_symlink("real.jsonl", dir.path() / "link.jsonl");
  Result r = run(gen + " --output " + dir.file("link.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link.jsonl"));
  EXPECT_EQ(read_jsonl(dir.file("real.jsonl")).size(), 1u);

  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // A reader in the background (timeout: a dapo that replaced the FIFO
  // would leave it waiting for a writer forever).
  r = run_shell("{ timeout 60 cat " + fifo + " > " + dir.file("from_fifo.jsonl") + " & c=$!; " + dapo() + gen +
                " --output " + fifo + " 2>&1; rc=$?; wait $c; exit $rc; }");
  ASSERT_EQ(r.code, 0) << r.output;
  struct stat st {};
  ASSERT_EQ(stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_EQ(read_jsonl(dir.file("from_fifo.jsonl")), read_jsonl(dir.file("real.jsonl")));
}

// Models that cannot run are refused when loaded, with exit code 2 and one
// line: a config.json with two billion layers (before anything is sized by
// it), NaN weights (import-hf warns, generate refuses); and a prompt whose
// response could run past max_position_embeddings. n > 1 at temperature 0
// is warned about.
TEST(GenerateCli, ModelsAndLengthsThatCannotRunAreRefused) {
  TempDir dir;
  const std::string ini = write_config(dir);
  write_text(dir.file("p.jsonl"), "{\"prompt_ids\": [1, 2]}\n");
  const std::string io = " --input " + dir.file("p.jsonl") + " --output " + dir.file("o.jsonl");

  fs::copy(fixture("tiny_tied"), dir.path() / "huge");
  Json config = Json::parse(dapo::test::read_text(dir.file("huge/config.json")));
  config["num_hidden_layers"] = 2000000000;
  write_text(dir.file("huge/config.json"), config.dump());
  Result r = run("generate --config " + ini + io + " --model.path=" + dir.file("huge"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("huge") + "/config.json: num_hidden_layers = 2000000000 but there are no tensors "
                          "of layer 3"),
            std::string::npos)
      << r.output;

  write_random_hf_dir(dir.path() / "nan", "model.layers.1.mlp.down_proj.weight");
  r = run("import-hf --hf-dir " + dir.file("nan") + " --output " + dir.file("nan.h5"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("import-hf: non-finite values in tensor model.layers.1.mlp.down_proj.weight of " +
                          dir.file("nan/model.safetensors") + " (1 NaN or Inf)"),
            std::string::npos)
      << r.output;
  r = run("generate --config " + ini + io + " --checkpoint " + dir.file("nan.h5"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("non-finite values in tensor /model/model.layers.1.mlp.down_proj.weight of " +
                          dir.file("nan.h5") + " (1 NaN or Inf of "),
            std::string::npos)
      << r.output;
  r = run("generate --config " + ini + io + " --model.path=" + dir.file("nan"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("non-finite values in tensor model.layers.1.mlp.down_proj.weight of " +
                          dir.file("nan/model.safetensors") + ": the model cannot run"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("fatal"), std::string::npos) << r.output;

  r = run("generate --config " + ini + io + " --model.path=" + fixture("tiny_tied") +
          " --rollout.max_response_length=255");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("p.jsonl") + ":1: a prompt of 2 tokens + rollout.max_response_length = 255 is 257 "
                          "positions, more than the model's max_position_embeddings = 256"),
            std::string::npos)
      << r.output;

  r = run("generate --config " + ini + io + " --model.path=" + fixture("tiny_tied") + " --rollout.n=3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("generate: rollout.n = 3 (command line) at rollout.temperature = 0 (greedy): every prompt "
                          "gets 3 identical responses"),
            std::string::npos)
      << r.output;
}

// The same output whatever the number of ranks and their split into tp x dp.
TEST(GenerateCli, SameOutputUnderMpirun) {
  if (!fs::exists(fixture("tiny_untied") + "/config.json")) GTEST_SKIP() << "fixture absent";
  TempDir dir;
  std::string lines;
  std::mt19937 gen(3);
  for (int i = 0; i < 7; ++i) {
    std::vector<int> ids;
    for (int t = 0; t < 2 + (i * 5) % 9; ++t) ids.push_back(int(gen() % 128));
    lines += Json{{"prompt_ids", ids}, {"line", i}}.dump() + "\n";
  }
  write_text(dir.file("p.jsonl"), lines);
  const std::string ini = write_config(dir, "--rollout.n=3 --rollout.temperature=1 --rollout.max_response_length=10");
  const std::string args = "generate --config " + ini + " --model.path=" + fixture("tiny_untied") + " --input " +
                           dir.file("p.jsonl") + " --output ";
  Result r = run(args + dir.file("one.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string one = dapo::test::read_text(dir.file("one.jsonl"));
  ASSERT_EQ(read_jsonl(dir.file("one.jsonl")).size(), 21u);
  struct Launch {
    int np, tp;
  };
  for (const Launch l : {Launch{2, 1}, Launch{2, 2}, Launch{4, 4}, Launch{4, 2}}) {
    const std::string out = dir.file("np" + std::to_string(l.np) + "_tp" + std::to_string(l.tp) + ".jsonl");
    r = mpirun(l.np, args + out + " --parallel.tp=" + std::to_string(l.tp));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(dapo::test::read_text(out), one) << "np " << l.np << " tp " << l.tp;
  }
  // An error is reported once and every rank exits.
  r = mpirun(2, "generate --config " + ini + " --model.path=" + fixture("tiny_untied") + " --input " +
                   dir.file("nothing.jsonl") + " --output " + dir.file("x.jsonl") + " --parallel.tp=2");
  EXPECT_NE(r.code, 0);
  size_t count = 0;
  for (size_t at = r.output.find("cannot open the input file"); at != std::string::npos;
       at = r.output.find("cannot open the input file", at + 1))
    ++count;
  EXPECT_EQ(count, 1u) << r.output;
}

}  // namespace
