// `dapo tokenize` as users run it: JSONL through stdin/stdout with the tiny
// tokenizer, fields passing through, and the error lines for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>

#include "test_tokenizer_util.h"

namespace dapo::data {
namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `dapo ARGS` with `input` on stdin.
Result run_dapo(const std::string& args, const std::string& input) {
  const std::string binary = std::string(DAPO_BINARY_DIR) + "/dapo";
  EXPECT_TRUE(std::filesystem::exists(binary)) << binary << " is not built";
  testing::TempFile in("cli_in.jsonl", input);
  testing::TempFile err("cli_err.txt", "");
  const std::string cmd = binary + " " + args + " < " + in.path() + " 2> " + err.path();
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err.path());
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

std::string tiny() { return "--tokenizer " + testing::tiny_path(); }

TEST(TokenizeCli, EncodesTextAndKeepsOtherFieldsInOrder) {
  const Result r = run_dapo("tokenize " + tiny(),
                            "{\"id\": 7, \"text\": \"hello world\", \"meta\": {\"a\": [1]}}\n"
                            "\n"
                            "{\"text\": \"<|im_start|>caf\\u00e9\"}\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"id\":7,\"text\":\"hello world\",\"meta\":{\"a\":[1]},\"ids\":[260,265]}\n"
            "{\"text\":\"<|im_start|>café\",\"ids\":[277,270]}\n");
}

TEST(TokenizeCli, DecodesIdsWithAndWithoutSpecialTokens) {
  const std::string input = "{\"ids\": [277, 260, 265, 195], \"k\": null}\n";
  const Result r = run_dapo("tokenize --decode " + tiny(), input);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[277,260,265,195],\"k\":null,\"text\":\"<|im_start|>hello world\xEF\xBF\xBD\"}\n");
  const Result skip = run_dapo("tokenize --decode --skip-special-tokens " + tiny(), input);
  EXPECT_EQ(skip.code, 0) << skip.err;
  EXPECT_EQ(skip.out, "{\"ids\":[277,260,265,195],\"k\":null,\"text\":\"hello world\xEF\xBF\xBD\"}\n");
}

TEST(TokenizeCli, EncodeThenDecodeRoundTrips) {
  const Result enc = run_dapo("tokenize " + tiny(), "{\"text\": \"a  \\n\\n b 1234 'Sa\\t\"}\n");
  ASSERT_EQ(enc.code, 0) << enc.err;
  const Result dec = run_dapo("tokenize --decode " + tiny(), enc.out);
  ASSERT_EQ(dec.code, 0) << dec.err;
  EXPECT_NE(dec.out.find("\"text\":\"a  \\n\\n b 1234 'Sa\\t\""), std::string::npos) << dec.out;
}

TEST(TokenizeCli, BadLinesNameStdinAndTheLine) {
  const std::string ok = "{\"text\": \"hello\"}\n";
  struct Case {
    std::string args, input, message;
  };
  const std::vector<Case> cases = {
      {"tokenize " + tiny(), ok + "{\"text\": \"a\"\n", "stdin:2: not valid JSON: "},
      {"tokenize " + tiny(), ok + ok + "[1, 2]\n", "stdin:3: not a JSON object"},
      {"tokenize " + tiny(), "{\"txt\": \"a\"}\n", "stdin:1: field \"text\" must be a string"},
      {"tokenize " + tiny(), "{\"text\": 5}\n", "stdin:1: field \"text\" must be a string"},
      {"tokenize --decode " + tiny(), ok, "stdin:1: field \"ids\" must be an array of token ids"},
      {"tokenize --decode " + tiny(), "{\"ids\": [1, \"2\"]}\n", "stdin:1: field \"ids\" holds \"2\", not a token id"},
      {"tokenize --decode " + tiny(), "{\"ids\": [1, 2.5]}\n", "stdin:1: field \"ids\" holds 2.5, not a token id"},
      {"tokenize --decode " + tiny(), "\n{\"ids\": [1, 281]}\n",
       "stdin:2: " + testing::tiny_path() + ": token id 281 is not in the vocabulary (0..280)"},
      {"tokenize", ok, "command line: dapo tokenize needs --tokenizer (the HF tokenizer.json)"},
      {"tokenize --tokenizer /nonexistent.json", ok, "/nonexistent.json: cannot open the tokenizer file"},
  };
  for (const Case& c : cases) {
    const Result r = run_dapo(c.args, c.input);
    EXPECT_EQ(r.code, 2) << c.args << " / " << c.input;
    EXPECT_NE(r.err.find("dapo tokenize: error: " + c.message), std::string::npos)
        << "expected: " << c.message << "\n got: " << r.err;
  }
  // Lines before the bad one were written.
  const Result partial = run_dapo("tokenize " + tiny(), ok + "oops\n");
  EXPECT_EQ(partial.out, "{\"text\":\"hello\",\"ids\":[260]}\n");
}

}  // namespace
}  // namespace dapo::data
