// The tokenizer pipeline on the tiny hand-made tokenizer.json
// (tests/fixtures/tokenizer/make_tiny.py): ids worked out by hand from its
// merges, added tokens, NFC, the Split regex, decoding, round trips of
// arbitrary UTF-8 and of random bytes, and concurrent use.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "dapo/data/tokenizer.h"
#include "dapo/data/tokenizer_utf8.h"
#include "test_tokenizer_util.h"

namespace dapo::data {
namespace {

using testing::load_json;
using testing::tiny_json;
using testing::tiny_path;
using Ids = std::vector<TokenId>;

// Token ids of the tiny tokenizer (see make_tiny.py): bytes are their own
// ids, merge rank r made token 256 + r.
enum : TokenId {
  kHe = 256, kLl = 257, kHell = 258, kLlo = 259, kHello = 260, kGw = 261, kOr = 262, kGwor = 263, kLd = 264,
  kGworld = 265, kApS = 266, kEAcute = 267, kCa = 268, kCaf = 269, kCafe = 270, k12 = 271, kSpace2 = 272,
  kNewline2 = 273, kSa = 274, kXy = 275, kEndOfText = 276, kImStart = 277, kImEnd = 278, kThink = 279,
  kEAcuteX = 280,
};

class TinyTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::load(tiny_path())); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static Ids enc(std::string_view s) { return tok_->encode(s); }
  static Tokenizer* tok_;
};
Tokenizer* TinyTokenizer::tok_ = nullptr;

TEST_F(TinyTokenizer, VocabAndAddedTokenIds) {
  EXPECT_EQ(tok_->vocab_size(), 281);
  EXPECT_EQ(tok_->token_to_id("hello"), kHello);
  EXPECT_EQ(tok_->token_to_id("\xC4\xA0world"), kGworld);  // "Ġworld"
  EXPECT_EQ(tok_->token_to_id("<|im_end|>"), kImEnd);
  EXPECT_EQ(tok_->token_to_id("xy"), kXy);  // an added token that was already a token keeps its id
  EXPECT_EQ(tok_->token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tok_->id_to_token(kGw), "\xC4\xA0w");
  EXPECT_EQ(tok_->id_to_token(kImStart), "<|im_start|>");
  EXPECT_EQ(tok_->id_to_token(281), std::nullopt);
  EXPECT_EQ(tok_->id_to_token(-1), std::nullopt);
  EXPECT_TRUE(tok_->is_special(kEndOfText));
  EXPECT_FALSE(tok_->is_special(kThink));
  EXPECT_FALSE(tok_->is_special(kHello));
  ASSERT_EQ(tok_->added_tokens().size(), 6u);
  EXPECT_EQ(tok_->added_tokens()[4].content, "e\xCC\x81x");
  EXPECT_TRUE(tok_->added_tokens()[4].normalized);
  EXPECT_EQ(tok_->source(), tiny_path());
}

TEST_F(TinyTokenizer, MergesApplyByRankNotByPosition) {
  // h e l l o: he (rank 0), then ll (1); now (he,ll) has rank 2 and (ll,o)
  // rank 3, so hell wins although llo would also be possible, then hello.
  EXPECT_EQ(enc("hello"), (Ids{kHello}));
  EXPECT_EQ(enc("llo"), (Ids{kLlo}));
  EXPECT_EQ(enc("helo"), (Ids{kHe, 'l', 'o'}));
  // " world": Ġw, or, Ġwor, ld, Ġworld.
  EXPECT_EQ(enc("hello world"), (Ids{kHello, kGworld}));
  EXPECT_EQ(enc("world"), (Ids{'w', kOr, kLd}));
  EXPECT_EQ(enc(""), Ids{});
}

TEST_F(TinyTokenizer, SplitRegexIsolatesDigitsContractionsAndWhitespace) {
  EXPECT_EQ(enc("1234"), (Ids{'1', '2', '3', '4'}));  // \p{N} one at a time: the merge "1 2" never applies
  EXPECT_EQ(enc("'sa"), (Ids{kApS, 'a'}));             // the contraction alternative comes first
  // (?i:'s) takes "'S" alone, so "Sa" cannot merge; a case-sensitive
  // pattern would give "'Sa" as one piece -> ', Sa.
  EXPECT_EQ(enc("'Sa"), (Ids{'\'', 'S', 'a'}));
  EXPECT_EQ(enc("Sa"), (Ids{kSa}));
  // "  \n\n" is one piece (\s*[\r\n]+); " b" keeps its space.
  EXPECT_EQ(enc("a  \n\n b"), (Ids{'a', kSpace2, kNewline2, ' ', 'b'}));
  // \s+(?!\S) leaves the last space of a run to the next word.
  EXPECT_EQ(enc("a   b"), (Ids{'a', kSpace2, ' ', 'b'}));
  // At the end of the text the whole run is one piece; equal ranks merge leftmost first.
  EXPECT_EQ(enc("a   "), (Ids{'a', kSpace2, ' '}));
  // Punctuation runs take their trailing newlines.
  EXPECT_EQ(enc("a.!\n\nb"), (Ids{'a', '.', '!', kNewline2, 'b'}));
  EXPECT_EQ(enc(" xy"), (Ids{' ', kXy}));  // the added token "xy" is matched before the regex
}

TEST_F(TinyTokenizer, NfcComposesBeforeMerging) {
  const std::string composed = "caf\xC3\xA9";      // café with U+00E9
  const std::string decomposed = "cafe\xCC\x81";   // café with e + U+0301
  EXPECT_EQ(enc(composed), (Ids{kCafe}));
  EXPECT_EQ(enc(decomposed), (Ids{kCafe}));
  EXPECT_EQ(tok_->decode(enc(decomposed)), composed);
}

TEST_F(TinyTokenizer, AddedTokensAreMatchedBeforePreTokenization) {
  EXPECT_EQ(enc("<|im_start|>user\nhello<|im_end|>\n"),
            (Ids{kImStart, 'u', 's', 'e', 'r', '\n', kHello, kImEnd, '\n'}));
  EXPECT_EQ(enc("<think>hello</think>"), (Ids{kThink, kHello, '<', '/', 't', 'h', 'i', 'n', 'k', '>'}));
  // The normalized added token "e\u0301x" is searched in the NFC text as "\u00e9x",
  // so both spellings in the input find it.
  EXPECT_EQ(enc("a\xC3\xA9x"), (Ids{'a', kEAcuteX}));
  EXPECT_EQ(enc("ae\xCC\x81xb"), (Ids{'a', kEAcuteX, 'b'}));
  // Without the x it is only an é.
  EXPECT_EQ(enc("\xC3\xA9"), (Ids{kEAcute}));
  // A special token split by text is just text.
  EXPECT_EQ(enc("<|im_"), (Ids{'<', '|', 'i', 'm', '_'}));
}

TEST_F(TinyTokenizer, SplitSpecialTokensEncodesSpecialContentAsText) {
  EncodeOptions opt;
  opt.split_special_tokens = true;
  EXPECT_EQ(tok_->encode("<|im_end|>", opt), (Ids{'<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'}));
  // Non-special added tokens are still matched.
  EXPECT_EQ(tok_->encode("<think>", opt), (Ids{kThink}));
}

TEST_F(TinyTokenizer, DecodeReversesTheByteLevelMapping) {
  EXPECT_EQ(tok_->decode(Ids{kHello, kGworld}), "hello world");
  EXPECT_EQ(tok_->decode(Ids{kSpace2, kNewline2, '\t'}), "  \n\n\t");
  EXPECT_EQ(tok_->decode(Ids{}), "");
  const Ids chat{kImStart, 'u', '\n', kHello, kImEnd, kThink, kEndOfText};
  EXPECT_EQ(tok_->decode(chat), "<|im_start|>u\nhello<|im_end|><think><|endoftext|>");
  // skip_special_tokens drops special added tokens only.
  EXPECT_EQ(tok_->decode(chat, true), "u\nhello<think>");
}

TEST_F(TinyTokenizer, DecodeReplacesIllFormedUtf8AsHfDoes) {
  // Byte tokens have the byte's value as id, so these are raw byte strings.
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tok_->decode(Ids{0xF0, 0x9F, 0x98, 0x80}), "\xF0\x9F\x98\x80");  // a whole emoji
  EXPECT_EQ(tok_->decode(Ids{0xF0, 0x9F, 0x98}), fffd);                     // truncated: one U+FFFD
  EXPECT_EQ(tok_->decode(Ids{0xE4, 0xB8, 'a'}), fffd + "a");
  EXPECT_EQ(tok_->decode(Ids{0xC0, 0x80}), fffd + fffd);                    // overlong: each byte
  EXPECT_EQ(tok_->decode(Ids{0xED, 0xA0, 0x80}), fffd + fffd + fffd);       // surrogate: each byte
  EXPECT_EQ(tok_->decode(Ids{0x80, kHello}), fffd + "hello");
  EXPECT_EQ(tok_->decode(Ids{0xC3, kImEnd}), fffd + "<|im_end|>");
  // Split across tokens the bytes still join: C3 + A9 = é.
  EXPECT_EQ(tok_->decode(Ids{0xC3, 0xA9}), "\xC3\xA9");
}

TEST_F(TinyTokenizer, DecodeRefusesIdsThatNameNoToken) {
  for (const TokenId bad : {281, -1, 100000}) {
    try {
      tok_->decode(Ids{kHello, bad});
      FAIL() << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(cat("token id ", bad, " is not in the vocabulary (0..280)")),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("tiny_tokenizer.json"), std::string::npos) << e.what();
    }
  }
}

// Random text over characters the pipeline treats differently: ASCII
// letters, digits, punctuation and white space, Latin-1, combining marks,
// CJK, Hangul (syllables and jamo), emoji with joiners and the added tokens.
std::string random_text(std::mt19937& rng, int length) {
  static const std::vector<std::string> atoms = {
      "a", "Z", "s", "'", "'S", "7", "0", " ", "  ", "\n", "\r\n", "\t", ".", "\\", "$", "{", "\xC3\xA9",
      "e\xCC\x81", "\xCC\x81", "\xCC\xA3", "\xE4\xBD\xA0", "\xE5\xA5\xBD", "\xEA\xB0\x80", "\xE1\x84\x80",
      "\xE1\x85\xA1", "\xE1\x86\xA8", "\xF0\x9F\x91\xA9", "\xE2\x80\x8D", "\xF0\x9F\x92\xBB", "\xC2\x85",
      "\xE1\xA0\x8E", "\xC2\xA0", "\xE2\x80\xAF", "\xE2\x84\xAB", "<|im_start|>", "<|im_end|>", "<think>", "xy",
      "hello", " world", "\xEF\xBF\xBD"};
  // A mark right after an added token stays uncomposed (see
  // AddedTokensCutTheTextBeforeNfc), so NFC(text) would not be the round trip.
  auto is_added = [](const std::string& a) { return a == "xy" || a[0] == '<'; };
  std::string s, last = " ";
  for (int i = 0; i < length; ++i) {
    const std::string& a = atoms[rng() % atoms.size()];
    if (is_added(last) && a[0] == '\xCC') continue;
    s += a;
    last = a;
  }
  return s;
}

TEST_F(TinyTokenizer, AddedTokensCutTheTextBeforeNfc) {
  // As in HF: "xy" (not normalized) is taken from the raw text, so the dot
  // below that follows it is normalised alone and does not compose with y.
  EXPECT_EQ(enc("xy\xCC\xA3"), (Ids{kXy, 0xCC, 0xA3}));
  EXPECT_EQ(nfc("xy\xCC\xA3"), "x\xE1\xBB\xB5");
  EXPECT_EQ(tok_->decode(enc("xy\xCC\xA3")), "xy\xCC\xA3");
}

TEST_F(TinyTokenizer, RoundTripOfArbitraryUtf8IsItsNfc) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string s = random_text(rng, 1 + int(rng() % 30));
    ASSERT_EQ(tok_->decode(enc(s)), nfc(s)) << i;
  }
}

TEST_F(TinyTokenizer, RandomBytesEncodeAsTheirRepairAndDecodeToItsNfc) {
  std::mt19937 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(1 + rng() % 24, '\0');
    for (char& c : bytes) c = char(rng() % 256);
    const std::string repaired = utf8_lossy(bytes);
    ASSERT_EQ(enc(bytes), enc(repaired)) << i;
    ASSERT_EQ(tok_->decode(enc(bytes)), nfc(repaired)) << i;
    // Decoding the bytes as byte tokens is the lossy repair itself.
    Ids ids(bytes.begin(), bytes.end());
    for (TokenId& id : ids) id &= 0xFF;
    ASSERT_EQ(tok_->decode(ids), repaired) << i;
  }
}

TEST_F(TinyTokenizer, ConcurrentEncodingGivesTheSameIds) {
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(random_text(rng, 40));
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(enc(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tok_->encode(texts[(i + size_t(k) * 37) % texts.size()]) != expected[(i + size_t(k) * 37) % texts.size()])
            ++mismatches[size_t(k)];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

TEST_F(TinyTokenizer, LongInputsDoNotExhaustTheRegexStack) {
  // \s+(?!\S) backtracks over a long run; \p{L}+ runs over a long word.
  const std::string spaces(1 << 20, ' ');
  const Ids a = enc(spaces + "x");
  // Pieces: 2^20 - 1 spaces (2^19 - 1 pairs and one single), then " x".
  EXPECT_EQ(a.size(), size_t(1 << 19) + 2);
  EXPECT_EQ(a.front(), kSpace2);
  EXPECT_EQ((Ids{a.end() - 3, a.end()}), (Ids{' ', ' ', 'x'}));
  EXPECT_EQ(tok_->decode(a), spaces + "x");
  const std::string word(1 << 18, 'l');
  const Ids b = enc(word);
  EXPECT_EQ(b, Ids(size_t(1) << 17, kLl));
}

// ---- variants of the tiny file ---------------------------------------------

TEST(TokenizerVariants, Gpt2StyleByteLevelWithItsOwnRegexAndPrefixSpace) {
  nlohmann::json doc = tiny_json();
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                          {"use_regex", true}};
  const Tokenizer tok = load_json(doc);
  // add_prefix_space: "hello world" -> " hello", " world".
  EXPECT_EQ(tok.encode("hello world"), (Ids{' ', kHello, kGworld}));
  // GPT-2's regex is case-sensitive and keeps digit runs together: "12" merges.
  EXPECT_EQ(tok.encode(" 12"), (Ids{' ', k12}));
  EXPECT_EQ(tok.encode(" 'Sa"), (Ids{' ', '\'', kSa}));
  // Every segment between added tokens gets its own prefix space.
  EXPECT_EQ(tok.encode("<think>hello"), (Ids{kThink, ' ', kHello}));
  // No normalizer: the decomposed é stays decomposed.
  // GPT-2's \p{L}+ stops at the mark, which becomes its own piece.
  EXPECT_EQ(tok.encode(" cafe\xCC\x81"), (Ids{' ', kCaf, 'e', 0xCC, 0x81}));
}

TEST(TokenizerVariants, MergesAsStringsEqualMergesAsPairs) {
  nlohmann::json doc = tiny_json();
  for (auto& m : doc["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer tok = load_json(doc);
  EXPECT_EQ(tok.encode("hello world"), (Ids{kHello, kGworld}));
}

TEST(TokenizerVariants, ARepeatedMergeKeepsItsLaterRank) {
  nlohmann::json doc = tiny_json();
  // (l, l) listed again at the end takes rank 20. "hello" still ends as
  // hello (he, then ll at rank 20 as nothing else applies, then hell, hello),
  doc["model"]["merges"].push_back({"l", "l"});
  const Tokenizer tok = load_json(doc);
  EXPECT_EQ(tok.encode("hello"), (Ids{kHello}));
  // "ld" (rank 8) now beats "ll" (rank 20) in "lld".
  EXPECT_EQ(tok.encode("lld"), (Ids{'l', kLd}));
  const Tokenizer plain = load_json(tiny_json());
  EXPECT_EQ(plain.encode("lld"), (Ids{kLl, 'd'}));
}

TEST(TokenizerVariants, MissingByteTokensAreDroppedOrBecomeUnk) {
  nlohmann::json doc = tiny_json();
  doc["model"]["vocab"].erase("q");
  doc["model"]["vocab"].erase("z");
  const Tokenizer dropped = load_json(doc);
  EXPECT_EQ(dropped.encode("aqzb"), (Ids{'a', 'b'}));  // HF drops characters without a token
  doc["model"]["unk_token"] = "?";
  const Tokenizer unk = load_json(doc);
  EXPECT_EQ(unk.encode("aqzb"), (Ids{'a', '?', '?', 'b'}));
  EXPECT_EQ(unk.encode("q"), (Ids{'?'}));
  doc["model"]["fuse_unk"] = true;
  const Tokenizer fused = load_json(doc);
  EXPECT_EQ(fused.encode("aqzbq"), (Ids{'a', '?', 'b', '?'}));
}

TEST(TokenizerVariants, IgnoreMergesTakesWholeWordsFromTheVocab) {
  nlohmann::json doc = tiny_json();
  doc["model"]["vocab"]["lo"] = 500;  // a token no merge produces
  const Tokenizer merging = load_json(doc);
  EXPECT_EQ(merging.encode("lo"), (Ids{'l', 'o'}));
  doc["model"]["ignore_merges"] = true;
  const Tokenizer whole = load_json(doc);
  EXPECT_EQ(whole.encode("lo"), (Ids{500}));
  EXPECT_EQ(whole.encode("hello"), (Ids{kHello}));
  EXPECT_EQ(whole.vocab_size(), 501);
  // HF numbers new added tokens from the vocab's entry count (now 277), not
  // from its largest id, whatever ids the file gives them.
  EXPECT_EQ(whole.token_to_id("<|endoftext|>"), 277);
}

TEST(TokenizerVariants, LeftmostLongestAmongOverlappingAddedTokens) {
  nlohmann::json doc = tiny_json();
  doc["added_tokens"].push_back({{"id", 281}, {"content", "<|im"}, {"special", false}, {"normalized", false},
                                 {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  doc["added_tokens"].push_back({{"id", 282}, {"content", "m_st"}, {"special", false}, {"normalized", false},
                                 {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  const Tokenizer tok = load_json(doc);
  EXPECT_EQ(tok.encode("<|im_start|>"), (Ids{kImStart}));       // longest at the leftmost start
  EXPECT_EQ(tok.encode("<|im_st"), (Ids{281, '_', 's', 't'}));  // leftmost wins over "m_st"
  EXPECT_EQ(tok.encode("im_st"), (Ids{'i', 282}));
}

TEST(TokenizerVariants, LstripAndRstripSwallowWhiteSpace) {
  nlohmann::json doc = tiny_json();
  doc["added_tokens"].push_back({{"id", 281}, {"content", "<mask>"}, {"special", true}, {"normalized", false},
                                 {"lstrip", true}, {"rstrip", true}, {"single_word", false}});
  const Tokenizer tok = load_json(doc);
  EXPECT_EQ(tok.encode("a  <mask> \n b"), (Ids{'a', 281, 'b'}));
  EXPECT_EQ(tok.encode("<mask>"), (Ids{281}));
  // U+3000 (ideographic space) is white space too.
  EXPECT_EQ(tok.encode("a\xE3\x80\x80<mask>"), (Ids{'a', 281}));
}

TEST(TokenizerVariants, AddedTokenIdsFollowHfWhenTheFileDisagrees) {
  nlohmann::json doc = tiny_json();
  doc["added_tokens"][0]["id"] = 9000;  // HF ignores it and gives the next free id
  const Tokenizer tok = load_json(doc);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), kEndOfText);
  EXPECT_EQ(tok.vocab_size(), 281);
}

TEST(TokenizerVariants, SplitWithALiteralString) {
  nlohmann::json doc = tiny_json();
  doc["pre_tokenizer"]["pretokenizers"][0] = {
      {"type", "Split"}, {"pattern", {{"String", "ll"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const Tokenizer tok = load_json(doc);
  // "hello" -> "he", "ll", "o": no "hello" token across the pieces.
  EXPECT_EQ(tok.encode("hello"), (Ids{kHe, kLl, 'o'}));
  EXPECT_EQ(tok.encode("a.b"), (Ids{'a', '.', 'b'}));  // '.' is not a regex wildcard here
}

}  // namespace
}  // namespace dapo::data
