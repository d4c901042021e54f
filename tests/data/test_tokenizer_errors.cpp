// tokenizer.json files dapo cannot tokenize as HF does are refused with a
// message naming the file and the component; every message is checked here.
#include <gtest/gtest.h>

#include "test_tokenizer_util.h"

namespace dapo::data {
namespace {

using nlohmann::json;
using testing::load_error;
using testing::tiny_json;

// Loads a variant of the tiny file and checks the message: it names the
// file, then contains `expected`.
void expect_refused(const json& doc, const std::string& expected) {
  const std::string msg = load_error(doc, "variant_tokenizer.json");
  EXPECT_NE(msg.find("variant_tokenizer.json: "), std::string::npos) << msg;
  EXPECT_NE(msg.find(expected), std::string::npos) << "expected: " << expected << "\n got: " << msg;
}

TEST(TokenizerErrors, FileAndJson) {
  try {
    Tokenizer::load("/nonexistent/tokenizer.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/tokenizer.json: cannot open the tokenizer file");
  }
  testing::TempFile truncated("truncated.json", tiny_json().dump().substr(0, 500));
  try {
    Tokenizer::load(truncated.path());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(truncated.path() + ": not valid JSON: "), std::string::npos) << e.what();
  }
  expect_refused(json::array(), "the file is not a JSON object");
  json doc = tiny_json();
  doc.erase("model");
  expect_refused(doc, "model: missing");
}

TEST(TokenizerErrors, Normalizer) {
  json doc = tiny_json();
  doc["normalizer"] = {{"type", "Lowercase"}};
  expect_refused(doc, "normalizer: type 'Lowercase' is not supported (supported: NFC, a Sequence of NFC, null)");
  doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({json{{"type", "NFC"}}, json{{"type", "NFKC"}}})}};
  expect_refused(doc, "normalizer.normalizers[1]: type 'NFKC' is not supported");
  doc["normalizer"] = {{"type", "Sequence"}};
  expect_refused(doc, "normalizer: \"normalizers\" must be an array");
  doc["normalizer"] = {{"kind", "NFC"}};
  expect_refused(doc, "normalizer: has no \"type\"");
}

TEST(TokenizerErrors, AcceptedNormalizers) {
  for (const json& n : {json(nullptr), json{{"type", "NFC"}},
                        json{{"type", "Sequence"}, {"normalizers", json::array()}},
                        json{{"type", "Sequence"}, {"normalizers", json::array({json{{"type", "NFC"}}})}}}) {
    json doc = tiny_json();
    doc["normalizer"] = n;
    EXPECT_EQ(load_error(doc), "") << n.dump();
  }
}

TEST(TokenizerErrors, PreTokenizer) {
  json doc = tiny_json();
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_refused(doc, "pre_tokenizer: type 'Whitespace' is not supported");
  doc["pre_tokenizer"] = nullptr;
  expect_refused(doc, "pre_tokenizer: null is not supported");
  json split = tiny_json()["pre_tokenizer"]["pretokenizers"][0];
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({split})}};
  expect_refused(doc, "pre_tokenizer: has no ByteLevel step");
  json byte_level = tiny_json()["pre_tokenizer"]["pretokenizers"][1];
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({byte_level, split})}};
  expect_refused(doc, "pre_tokenizer.pretokenizers[1]: a Split step after ByteLevel is not supported");
  json removed = split;
  removed["behavior"] = "Removed";
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({removed, byte_level})}};
  expect_refused(doc, "pre_tokenizer.pretokenizers[0]: Split behavior 'Removed' is not supported (only Isolated)");
  json inverted = split;
  inverted["invert"] = true;
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({inverted, byte_level})}};
  expect_refused(doc, "pre_tokenizer.pretokenizers[0]: Split with invert true is not supported");
  json no_pattern = split;
  no_pattern["pattern"] = "abc";
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({no_pattern, byte_level})}};
  expect_refused(doc, "pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
  json bad_regex = split;
  bad_regex["pattern"] = {{"Regex", "(abc"}};
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({bad_regex, byte_level})}};
  expect_refused(doc, "pre_tokenizer.pretokenizers[0]: the pattern '(abc' does not compile (PCRE2: ");
  json boundary = split;
  boundary["pattern"] = {{"Regex", "\\bx"}};
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({boundary, byte_level})}};
  expect_refused(doc, "pre_tokenizer.pretokenizers[0]: the word boundary \\b in the pattern '\\bx' is not supported");
  json digits = {{"type", "Digits"}, {"individual_digits", true}};
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({digits, byte_level})}};
  expect_refused(doc, "pre_tokenizer.pretokenizers[0]: type 'Digits' is not supported");
  json flagged = byte_level;
  flagged["add_prefix_space"] = "yes";
  doc["pre_tokenizer"] = flagged;
  expect_refused(doc, "pre_tokenizer: \"add_prefix_space\" must be true or false");
}

TEST(TokenizerErrors, Model) {
  json doc = tiny_json();
  doc["model"]["type"] = "WordPiece";
  expect_refused(doc, "model: type 'WordPiece' is not supported (only byte-level BPE)");
  doc = tiny_json();
  doc["model"]["byte_fallback"] = true;
  expect_refused(doc, "model: byte_fallback is not supported");
  doc = tiny_json();
  doc["model"]["dropout"] = 0.1;
  expect_refused(doc, "model: dropout is not supported");
  doc = tiny_json();
  doc["model"]["continuing_subword_prefix"] = "##";
  expect_refused(doc, "model: continuing_subword_prefix is not supported");
  doc = tiny_json();
  doc["model"]["end_of_word_suffix"] = "</w>";
  expect_refused(doc, "model: end_of_word_suffix is not supported");
  doc = tiny_json();
  doc["model"]["unk_token"] = "<unk>";
  expect_refused(doc, "model: unk_token '<unk>' is not in the vocab");
  doc = tiny_json();
  doc["model"]["vocab"] = json::array();
  expect_refused(doc, "model.vocab: must be an object");
  doc = tiny_json();
  doc["model"]["vocab"]["dup"] = 5;
  expect_refused(doc, "model.vocab: id 5 is given to both");
  doc = tiny_json();
  doc["model"]["vocab"]["neg"] = -3;
  expect_refused(doc, "model.vocab: the id of 'neg' is not an integer in [0, 2^31-1)");
  doc = tiny_json();
  doc["model"]["merges"].push_back({"q", "z"});
  expect_refused(doc, "model.merges: entry 20 ('q', 'z'): token 'qz' is not in the vocab");
  doc = tiny_json();
  doc["model"]["merges"].push_back("a b c");
  expect_refused(doc, "model.merges: entry 20 'a b c' is not two tokens separated by one space");
  doc = tiny_json();
  doc["model"]["merges"].push_back(42);
  expect_refused(doc, "model.merges: entry 20 is neither \"a b\" nor [\"a\", \"b\"]");
  doc = tiny_json();
  doc["model"].erase("merges");
  expect_refused(doc, "model.merges: must be an array");
  doc = tiny_json();
  doc["model"]["vocab"]["obj"] = {{"id", 3}};
  expect_refused(doc, "model.vocab: the id of 'obj' is not an integer in [0, 2^31-1)");
  doc = tiny_json();
  doc["model"]["merges"].push_back({{"left", "a"}});
  expect_refused(doc, "model.merges: entry 20 is neither");
  doc = tiny_json();
  doc["model"]["merges"].push_back({"a", "b", "c"});
  expect_refused(doc, "model.merges: entry 20 is neither");
  // JSON text with a token listed twice (a DOM cannot hold it).
  std::string text = tiny_json().dump();
  const std::string vocab_key = "\"vocab\":{";
  text.insert(text.find(vocab_key) + vocab_key.size(), "\"hello\":999,");
  try {
    Tokenizer::from_json(text, "dup.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("dup.json: model.vocab: 'hello' is listed twice"), std::string::npos)
        << e.what();
  }
  // Optional fields at their neutral values are accepted.
  doc = tiny_json();
  doc["model"]["dropout"] = 0.0;
  doc["model"]["continuing_subword_prefix"] = nullptr;
  doc["model"].erase("type");
  EXPECT_EQ(load_error(doc), "");
}

TEST(TokenizerErrors, DecoderPostProcessorAndAddedTokens) {
  json doc = tiny_json();
  doc["decoder"] = {{"type", "WordPiece"}};
  expect_refused(doc, "decoder: type 'WordPiece' is not supported (only ByteLevel)");
  doc["decoder"] = nullptr;
  expect_refused(doc, "decoder: null is not supported");
  doc = tiny_json();
  doc["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_refused(doc, "post_processor: type 'TemplateProcessing' is not supported");
  doc = tiny_json();
  doc["added_tokens"][2]["single_word"] = true;
  expect_refused(doc, "added_tokens[2]: '<|im_end|>': single_word is not supported");
  doc = tiny_json();
  doc["added_tokens"][1].erase("content");
  expect_refused(doc, "added_tokens[1]: \"content\" must be a string");
  doc = tiny_json();
  doc["added_tokens"] = json::object();
  expect_refused(doc, "added_tokens: must be an array");
  doc = tiny_json();
  doc["post_processor"] = nullptr;
  doc["truncation"] = {{"max_length", 8}};  // ignored, as transformers does
  EXPECT_EQ(load_error(doc), "");
}

}  // namespace
}  // namespace dapo::data
