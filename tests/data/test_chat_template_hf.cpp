// model.chat_template = hf: Qwen2.5's and Qwen3's own chat templates render
// every conversation of tests/fixtures/chat_template/{qwen2_5,qwen3}_cases.jsonl
// byte for byte as transformers 5.17's apply_chat_template does (the
// templates are stored in the fixtures, so this never skips), and encode to
// its token ids when the real tokenizers are there (DAPO_QWEN25_TOKENIZER,
// DAPO_QWEN_TOKENIZER; jobs/test.sh fetches them with
// jobs/fetch_qwen_tokenizer.sh). Then how the template is found beside
// tokenizer.json (resolve_chat_format, encode_chat) and its errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dapo/core/error.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/hf_chat_template.h"
#include "dapo/data/tokenizer.h"

namespace dapo::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct Fixture {
  Json meta;
  std::vector<Json> cases;
};

Fixture load_fixture(const std::string& name) {
  const std::string path = std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/chat_template/" + name + "_cases.jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  Fixture f;
  std::string line;
  if (std::getline(in, line)) f.meta = Json::parse(line).at("meta");
  while (std::getline(in, line))
    if (!line.empty()) f.cases.push_back(Json::parse(line));
  return f;
}

// The special tokens transformers passed (the fixture's special_tokens_map).
std::shared_ptr<const HfChatTemplate> fixture_template(const Fixture& f) {
  return HfChatTemplate::from_text(f.meta.at("chat_template"), f.meta.at("special_tokens_map"),
                                   f.meta.at("name").get<std::string>() + " chat_template");
}

void expect_texts(const std::string& name) {
  const Fixture f = load_fixture(name);
  ASSERT_GT(f.cases.size(), 70u);
  EXPECT_EQ(f.meta.at("transformers"), "5.17.0");
  const auto t = fixture_template(f);
  int errors = 0;
  for (const Json& c : f.cases) {
    SCOPED_TRACE(name + " " + c.at("name").get<std::string>());
    std::string got, err;
    try {
      got = t->render(c.at("messages"), c.at("add_generation_prompt"), c.at("kwargs"));
    } catch (const UserError& e) {
      err = e.what();
    }
    if (c.contains("error")) {
      ++errors;
      EXPECT_NE(err, "") << "transformers: " << c["error"];
      continue;
    }
    EXPECT_EQ(err, "");
    EXPECT_EQ(got, c.at("text").get<std::string>());
  }
  EXPECT_LT(errors, 10);
}

TEST(ChatTemplateHf, Qwen25TextsEqualTransformers) { expect_texts("qwen2_5"); }
TEST(ChatTemplateHf, Qwen3TextsEqualTransformers) { expect_texts("qwen3"); }

// The fixture's ids are apply_chat_template(tokenize=True), which is the
// tokenizer's encoding of the text (add_special_tokens=False): dapo's
// tokenizer must give the same.
void expect_ids(const std::string& name, const char* env) {
  const char* path = std::getenv(env);
  if (!path || !*path) GTEST_SKIP() << env << " is not set (jobs/fetch_qwen_tokenizer.sh fetches the tokenizer)";
  const Tokenizer tok = Tokenizer::load(path);
  const Fixture f = load_fixture(name);
  int compared = 0;
  for (const Json& c : f.cases) {
    if (!c.contains("ids")) continue;
    SCOPED_TRACE(name + " " + c.at("name").get<std::string>());
    EXPECT_EQ(tok.encode(c.at("text").get<std::string>()), c.at("ids").get<std::vector<TokenId>>());
    ++compared;
  }
  EXPECT_GT(compared, 60);
  // The template found beside the fetched tokenizer.json is the fixture's.
  const ChatFormat format = resolve_chat_format(ChatTemplate::auto_, path);
  EXPECT_EQ(format.kind, ChatTemplate::hf);
  const std::vector<ChatMessage> messages = {{"system", "S"}, {"user", "Hi"}};
  const auto t = fixture_template(f);
  Json list = Json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  EXPECT_EQ(render_chat(messages, format, true), t->render(list, true));
  EXPECT_EQ(encode_chat(tok, messages, ChatFormat{ChatTemplate::auto_}, true), tok.encode(t->render(list, true)));
}

TEST(ChatTemplateHf, Qwen25IdsEqualTransformers) { expect_ids("qwen2_5", "DAPO_QWEN25_TOKENIZER"); }
TEST(ChatTemplateHf, Qwen3IdsEqualTransformers) { expect_ids("qwen3", "DAPO_QWEN_TOKENIZER"); }

// ---- finding the template beside tokenizer.json ----------------------------------------

class TokenizerDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dapo_chat_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json", tokenizer());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tokenizer() const { return (dir_ / "tokenizer.json").string(); }
  std::string config_path() const { return (dir_ / "tokenizer_config.json").string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(dir_ / name) << text; }
  void write_config(const Json& config) const { write("tokenizer_config.json", config.dump()); }

  fs::path dir_;
};

const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

TEST_F(TokenizerDir, AutoAndHfTakeTheConfigsTemplateWithItsSpecialTokens) {
  write_config({{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                {"eos_token", "</s>"},
                {"unk_token", nullptr},
                {"chat_template", kTemplate}});
  const std::vector<ChatMessage> m = {{"user", "hi"}, {"assistant", "yo"}};
  for (const ChatTemplate kind : {ChatTemplate::auto_, ChatTemplate::hf}) {
    const ChatFormat f = resolve_chat_format(kind, tokenizer());
    EXPECT_EQ(f.kind, ChatTemplate::hf);
    ASSERT_TRUE(f.hf);
    EXPECT_EQ(render_chat(m, f, true), "<s><user>hi</s><assistant>yo</s><assistant>");
    EXPECT_EQ(render_chat(m, f, false), "<s><user>hi</s><assistant>yo</s>");
  }
  // unk_token is null: undefined in the template, as in transformers 5.
  EXPECT_EQ(resolve_chat_format(ChatTemplate::hf, tokenizer()).hf->special_tokens(),
            (Json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  // chatml and none ignore the file.
  EXPECT_EQ(resolve_chat_format(ChatTemplate::chatml, tokenizer()).kind, ChatTemplate::chatml);
  EXPECT_FALSE(resolve_chat_format(ChatTemplate::none, tokenizer()).hf);
}

TEST_F(TokenizerDir, EncodeChatResolvesFromTheTokenizersPath) {
  write_config({{"eos_token", "</s>"}, {"chat_template", kTemplate}});
  const Tokenizer tok = Tokenizer::load(tokenizer());
  const std::vector<ChatMessage> m = {{"user", "hello world"}};
  EXPECT_EQ(encode_chat(tok, m, ChatFormat{ChatTemplate::auto_}, true), tok.encode("<user>hello world</s><assistant>"));
  EXPECT_EQ(encode_chat(tok, m, ChatFormat{ChatTemplate::chatml}, true),
            tok.encode("<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"));
}

TEST_F(TokenizerDir, TheNamedDefaultOfATemplateListIsTaken) {
  write_config({{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "TOOLS"}},
                                              {{"name", "default"}, {"template", "DEFAULT {{ messages|length }}"}}})}});
  EXPECT_EQ(render_chat(std::vector<ChatMessage>{{"user", "x"}}, resolve_chat_format(ChatTemplate::hf, tokenizer()), true),
            "DEFAULT 1");
  write_config({{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "TOOLS"}}})}});
  // A new directory per test: the cache keys on the path, so use a fresh one.
  EXPECT_THROW(HfChatTemplate::find_beside(tokenizer()), UserError);
}

TEST_F(TokenizerDir, ChatTemplateJinjaWinsOverTheConfig) {
  write_config({{"eos_token", "</s>"}, {"chat_template", "CONFIG"}});
  write("chat_template.jinja", "FILE {{ eos_token }}\n");
  const auto t = HfChatTemplate::find_beside(tokenizer());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ((*t)->render(Json::array({{{"role", "user"}, {"content", "x"}}}), true), "FILE </s>");
}

TEST_F(TokenizerDir, WithoutATemplateAutoIsChatmlAndHfAnError) {
  // No tokenizer_config.json at all.
  EXPECT_EQ(resolve_chat_format(ChatTemplate::auto_, tokenizer()).kind, ChatTemplate::chatml);
  try {
    resolve_chat_format(ChatTemplate::hf, tokenizer());
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(config_path() + ": no such file (model.chat_template = hf"), std::string::npos)
        << e.what();
  }
  // No tokenizer: auto is chatml, hf stays unresolved and fails when used.
  EXPECT_EQ(resolve_chat_format(ChatTemplate::auto_, "").kind, ChatTemplate::chatml);
  const ChatFormat unresolved = resolve_chat_format(ChatTemplate::hf, "");
  EXPECT_THROW(render_chat(std::vector<ChatMessage>{{"user", "x"}}, unresolved, true), UserError);
}

TEST_F(TokenizerDir, AConfigWithoutChatTemplate) {
  write_config({{"eos_token", "</s>"}});
  EXPECT_FALSE(HfChatTemplate::find_beside(tokenizer()).has_value());
  EXPECT_EQ(resolve_chat_format(ChatTemplate::auto_, tokenizer()).kind, ChatTemplate::chatml);
  try {
    resolve_chat_format(ChatTemplate::hf, tokenizer());
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(config_path() + ": has no chat_template"), std::string::npos) << e.what();
  }
}

TEST_F(TokenizerDir, ATemplateThatDoesNotParseNamesTheFileLineAndColumn) {
  write_config({{"chat_template", "{% for m in messages %}\n  {{ m.content | nosuchfilter }}\n{% endfor %}"}});
  try {
    resolve_chat_format(ChatTemplate::auto_, tokenizer());
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), config_path() + ": chat_template:2:18: No filter named 'nosuchfilter'.");
  }
  write("tokenizer_config.json", "{not json");
  EXPECT_THROW(HfChatTemplate::find_beside(tokenizer()), UserError);
}

TEST_F(TokenizerDir, TheTemplatesRaiseExceptionNamesTheRecord) {
  write_config({{"chat_template",
                 "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
                 "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"}});
  const ChatFormat f = resolve_chat_format(ChatTemplate::hf, tokenizer());
  try {
    render_chat(std::vector<ChatMessage>{{"system", "s"}}, f, true, "train.jsonl:7");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "train.jsonl:7: " + config_path() +
                                         ": chat_template:1:71: raise_exception: Only user and assistant roles are "
                                         "supported!");
  }
}

}  // namespace
}  // namespace dapo::data
