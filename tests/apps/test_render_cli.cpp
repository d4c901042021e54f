// `dapo render` as users run it: prompts JSONL in, one line per prompt out
// (data_source, index, prompt_text, prompt_ids) through model.chat_template,
// with the tokenizer files alone; exit code 2 with a message naming the file
// (and line) on bad input. With the real tokenizers (DAPO_QWEN_TOKENIZER,
// DAPO_QWEN25_TOKENIZER) the output equals transformers' apply_chat_template
// on the fixture conversations.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "apps/cli_test_util.h"
#include "dapo/data/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using dapo::test::CliResult;

class RenderCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dapo_render_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tok");
    fs::copy_file(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json", tokenizer());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tokenizer() const { return (dir_ / "tok" / "tokenizer.json").string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  void write_config(const Json& config) const { std::ofstream(dir_ / "tok" / "tokenizer_config.json") << config.dump(); }
  CliResult render(const std::string& args) const {
    return dapo::test::run_shell(dapo::test::dapo_binary() + "render " + args + " 2>" + (dir_ / "err").string());
  }
  std::string err() const {
    std::ifstream in(dir_ / "err");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::vector<Json> lines(const std::string& text) const {
    std::vector<Json> out;
    size_t start = 0;
    for (size_t nl = text.find('\n'); nl != std::string::npos; start = nl + 1, nl = text.find('\n', start))
      out.push_back(Json::parse(text.substr(start, nl - start)));
    return out;
  }

  fs::path dir_;
};

const char* kPrompts =
    "{\"data_source\": \"math\", \"prompt\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
    "{\"role\": \"user\", \"content\": \"hello world\"}], \"reward_model\": {\"ground_truth\": \"1\"}, "
    "\"extra_info\": {\"index\": \"a\"}}\n"
    "{\"problem\": \"café?\", \"answer\": \"2\"}\n"
    "{\"prompt\": \"raw text\", \"reward_model\": {\"ground_truth\": \"3\"}}\n";

TEST_F(RenderCli, RendersEachPromptWithTheTokenizersTemplate) {
  write_config({{"eos_token", "<|im_end|>"},
                {"chat_template",
                 "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{{ eos_token }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}});
  const std::string in = write("p.jsonl", kPrompts);
  const CliResult r = render("--input " + in + " --model.tokenizer=" + tokenizer());
  ASSERT_EQ(r.code, 0) << err();
  const std::vector<Json> out = lines(r.output);
  ASSERT_EQ(out.size(), 3u);
  const dapo::data::Tokenizer tok = dapo::data::Tokenizer::load(tokenizer());
  const std::string first =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(out[0], (Json{{"data_source", "math"}, {"index", "a"}, {"prompt_text", first},
                          {"prompt_ids", tok.encode(first)}}));
  EXPECT_EQ(out[1]["prompt_text"], "<|im_start|>user\ncafé?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(out[1]["index"], "1");
  EXPECT_EQ(out[2]["prompt_text"], "raw text");  // a text prompt takes no template
  EXPECT_EQ(out[2]["prompt_ids"], tok.encode("raw text"));
  EXPECT_NE(err().find("render: 3 prompts (2 chat, chat template hf ("), std::string::npos) << err();
}

TEST_F(RenderCli, WritesTheOutputFileAndTakesOverridesAndStdin) {
  write_config({{"chat_template", "TEMPLATE {{ messages[-1].content }}"}});
  const std::string in = write("p.jsonl", kPrompts);
  const std::string out = (dir_ / "out.jsonl").string();
  CliResult r = render("--input " + in + " --output " + out + " --model.tokenizer=" + tokenizer() +
                       " --model.chat_template=chatml");
  ASSERT_EQ(r.code, 0) << err();
  EXPECT_EQ(r.output, "");
  const std::vector<Json> file = dapo::test::read_jsonl(out);
  ASSERT_EQ(file.size(), 3u);
  EXPECT_EQ(file[1]["prompt_text"], "<|im_start|>user\ncafé?<|im_end|>\n<|im_start|>assistant\n");
  r = dapo::test::run_shell("printf '{\"problem\": \"x\", \"answer\": \"1\"}\\n' | " + dapo::test::dapo_binary() +
                            "render --input - --model.tokenizer=" + tokenizer() + " 2>/dev/null");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(lines(r.output).at(0)["prompt_text"], "TEMPLATE x");  // auto: the template beside the tokenizer
}

TEST_F(RenderCli, ErrorsNameWhatIsWrong) {
  const std::string in = write("p.jsonl", kPrompts);
  CliResult r = render("--model.tokenizer=" + tokenizer());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(err().find("dapo render needs --input"), std::string::npos) << err();
  r = render("--input " + in);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(err().find("dapo render needs a tokenizer"), std::string::npos) << err();
  r = render("--input " + in + " --model.tokenizer=" + tokenizer() + " --model.chat_template=hf");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(err().find((dir_ / "tok" / "tokenizer_config.json").string() + ": no such file"), std::string::npos)
      << err();
  write_config({{"chat_template", "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}"}});
  r = render("--input " + in + " --model.tokenizer=" + tokenizer());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(err().find(in + ":1: " + (dir_ / "tok" / "tokenizer_config.json").string() +
                       ": chat_template:1:41: raise_exception: no system"),
            std::string::npos)
      << err();
  write_config({{"chat_template", "{% if %}"}});
  fs::remove(dir_ / "err");
  r = render("--input " + in + " --model.tokenizer=" + (dir_ / "tok" / "tokenizer.json").string());
  EXPECT_EQ(r.code, 2);
}

// The real Qwen templates and tokenizers: the text and ids of the fixture's
// system + user conversation, as transformers made them.
void expect_fixture(const char* env, const std::string& name, const fs::path& dir) {
  const char* tok = std::getenv(env);
  if (!tok || !*tok) GTEST_SKIP() << env << " is not set (jobs/fetch_qwen_tokenizer.sh fetches the tokenizer)";
  const std::vector<Json> cases =
      dapo::test::read_jsonl(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/chat_template/" + name + "_cases.jsonl");
  const Json* fixture = nullptr;
  for (const Json& c : cases)
    if (c.contains("name") && c["name"] == "system_user/agp=1") fixture = &c;
  ASSERT_TRUE(fixture);
  const std::string in = (dir / "p.jsonl").string();
  std::ofstream(in) << Json{{"prompt", (*fixture)["messages"]}, {"reward_model", {{"ground_truth", "2"}}}}.dump()
                    << "\n";
  const CliResult r = dapo::test::run_shell(dapo::test::dapo_binary() + "render --input " + in +
                                            " --model.tokenizer=" + tok + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  const Json out = Json::parse(r.output.substr(0, r.output.find('\n')));
  EXPECT_EQ(out["prompt_text"], (*fixture)["text"]);
  EXPECT_EQ(out["prompt_ids"], (*fixture)["ids"]);
}

TEST_F(RenderCli, Qwen25AsTransformers) { expect_fixture("DAPO_QWEN25_TOKENIZER", "qwen2_5", dir_); }
TEST_F(RenderCli, Qwen3AsTransformers) { expect_fixture("DAPO_QWEN_TOKENIZER", "qwen3", dir_); }

}  // namespace
