// The tokenizer's parts on their own: UTF-8 repair and NFC, the Oniguruma ->
// PCRE2 pattern rewrite and Isolated splitting, and the two BPE merge loops
// against a naive reference.
#include <gtest/gtest.h>

#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "dapo/core/error.h"
#include "dapo/data/bpe_model.h"
#include "dapo/data/tokenizer_regex.h"
#include "dapo/data/tokenizer_utf8.h"

namespace dapo::data {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// NFC straight from utf8proc, bypassing nfc()'s quick check.
std::string utf8proc_nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  std::string r(reinterpret_cast<const char*>(out));
  std::free(out);
  return r;
}

// ---- UTF-8 ------------------------------------------------------------------

TEST(Utf8, LossyRepairReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy(""), "");
  EXPECT_EQ(utf8_lossy("plain \xC3\xA9 \xF0\x9F\x98\x80"), "plain \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(utf8_lossy("\x80"), kFffd);
  EXPECT_EQ(utf8_lossy("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(utf8_lossy("\xE4\xB8"), kFffd);                  // truncated at the end: one
  EXPECT_EQ(utf8_lossy("\xE4\xB8" "a"), kFffd + "a");        // truncated inside: one
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(utf8_lossy("\xC0\x80"), kFffd + kFffd);          // C0 is never a lead byte
  EXPECT_EQ(utf8_lossy("\xE0\x80\x80"), kFffd + kFffd + kFffd);  // overlong: E0 needs A0..BF
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate: ED needs 80..9F
  EXPECT_EQ(utf8_lossy("\xF0\x80\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(utf8_lossy("\xF5\x80"), kFffd + kFffd);
  EXPECT_EQ(utf8_lossy("\xF0\x9F\xC3\xA9"), kFffd + "\xC3\xA9");
  EXPECT_EQ(utf8_lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_TRUE(utf8_valid("\xEF\xBF\xBF\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(utf8_valid("\xED\xBF\xBF"));
}

TEST(Utf8, LossyOutputIsAlwaysValidAndIdempotent) {
  std::mt19937 rng(5);
  for (int i = 0; i < 5000; ++i) {
    std::string s(rng() % 16, '\0');
    for (char& c : s) c = char(0x70 + rng() % 0x90);  // mostly non-ASCII bytes
    const std::string r = utf8_lossy(s);
    ASSERT_TRUE(utf8_valid(r));
    ASSERT_EQ(utf8_lossy(r), r);
    if (utf8_valid(s)) ASSERT_EQ(r, s);
  }
}

TEST(Utf8, NfcComposesReordersAndKeepsWhatIsComposed) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                       // e + acute -> é
  EXPECT_EQ(nfc("A\xCC\x8A"), "\xC3\x85");                       // A + ring -> Å
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                    // Angstrom sign (singleton) -> Å
  EXPECT_EQ(nfc("a\xCC\x87\xCC\xA3"), "\xE1\xBA\xA1\xCC\x87");   // a + dot above + dot below -> ạ + dot above
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");    // jamo L + V -> 가
  EXPECT_EQ(nfc("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");    // 가 + jamo T -> 각
  EXPECT_EQ(nfc("\xEF\xAC\x81"), "\xEF\xAC\x81");                // ﬁ is a compatibility form: NFC keeps it
  for (const char* kept : {"plain ASCII", "\xE4\xBD\xA0\xE5\xA5\xBD", "\xEA\xB0\x80", "\xC3\xA9",
                           "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB"})
    EXPECT_EQ(nfc(kept), kept) << kept;
}

TEST(Utf8, QuickCheckNeverSkipsAStringNfcWouldChange) {
  EXPECT_TRUE(nfc_quick_check("ascii"));
  EXPECT_TRUE(nfc_quick_check("\xE4\xBD\xA0\xE5\xA5\xBD"));  // CJK
  EXPECT_TRUE(nfc_quick_check("\xEA\xB0\x80"));              // a Hangul syllable alone
  EXPECT_TRUE(nfc_quick_check("caf\xC3\xA9 \xC3\x85"));   // precomposed letters are their own NFC
  EXPECT_FALSE(nfc_quick_check("e\xCC\x81"));
  EXPECT_FALSE(nfc_quick_check("\xEA\xB0\x80\xE1\x86\xA8"));  // syllable + trailing jamo
  EXPECT_FALSE(nfc_quick_check("\xE2\x84\xAB"));
  // Over random strings of characters near composition rules, the quick
  // check's "yes" is always right.
  const std::vector<char32_t> pool = {'a', 'e', 'A', 0xE9, 0x301, 0x323, 0x307, 0x1100, 0x1161, 0x11A8, 0xAC00,
                                      0x212B, 0x3099, 0x304B, 0x0B47, 0x0B3E, 0x0DD9, 0x0DCF, 0x4E00, 0x1F600,
                                      0x0CC6, 0x0CD5, 0x1025, 0x102E, 0x00C5, 0x00EA, 0x1EA1, 0x0F73, 0x0344,
                                      0x0F71, 0x0F72, 0x00E8, 0x1E69, 0x0073, 0x0323, 0x0307};
  std::mt19937 rng(9);
  int skipped = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) append_utf8(s, pool[rng() % pool.size()]);
    if (nfc_quick_check(s)) {
      ++skipped;
      ASSERT_EQ(utf8proc_nfc(s), s);
    }
  }
  EXPECT_GT(skipped, 100);
  // Every single code point of the first three planes the check passes is its own NFC.
  for (char32_t cp = 1; cp < 0x30000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(s, cp);
    if (nfc_quick_check(s)) ASSERT_EQ(utf8proc_nfc(s), s) << std::hex << uint32_t(cp);
  }
}

// ---- regex ------------------------------------------------------------------

TEST(SplitRegexRewrite, OnigurumaEscapesBecomeTheirPcre2Equivalents) {
  const std::string space = "\\x{09}-\\x{0D}\\x{20}\\x{85}";
  EXPECT_NE(onig_to_pcre2("\\s+", "w").find("[" + space), std::string::npos);
  EXPECT_NE(onig_to_pcre2("(?!\\S)", "w").find("(?![^" + space), std::string::npos);
  EXPECT_NE(onig_to_pcre2("[^\\s\\p{L}]", "w").find("[^" + space), std::string::npos);
  EXPECT_EQ(onig_to_pcre2("\\h\\H", "w"), "[0-9a-fA-F][^0-9a-fA-F]");
  EXPECT_EQ(onig_to_pcre2("\\v\\u00e9[\\b]", "w"), "\\x{0B}\\x{00e9}[\\x{08}]");
  EXPECT_EQ(onig_to_pcre2("\\p{L}\\d\\(x[]a][[:alpha:]]", "w"), "\\p{L}\\d\\(x[]a][[:alpha:]]");
  const auto error = [](const std::string& p) {
    try {
      onig_to_pcre2(p, "T.json: pre_tokenizer");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error("a\\b"), "T.json: pre_tokenizer: the word boundary \\b in the pattern 'a\\b' is not supported "
                           "(dapo matches with PCRE2, not Oniguruma)");
  EXPECT_NE(error("\\B").find("the escape \\B"), std::string::npos);
  EXPECT_NE(error("[^\\S]").find("the escape \\S inside a character class"), std::string::npos);
  EXPECT_NE(error("[a[b]]").find("a nested character class"), std::string::npos);
  EXPECT_NE(error("[a-z&&[^aeiou]]").find("a class intersection (&&)"), std::string::npos);
  EXPECT_NE(error("[[:alpha").find("an unterminated POSIX bracket"), std::string::npos);
  EXPECT_NE(error("\\u12").find("a malformed \\u escape"), std::string::npos);
  EXPECT_NE(error("x\\").find("a trailing backslash"), std::string::npos);
}

std::vector<std::string> pieces(const SplitRegex& re, std::string_view text) {
  RegexScratch scratch;
  std::vector<std::string> out;
  re.split(text, scratch, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using Strings = std::vector<std::string>;

TEST(SplitRegex, IsolatedKeepsMatchesAndGapsAndDropsEmptyPieces) {
  const SplitRegex digits("\\d+", false, "w");
  EXPECT_EQ(pieces(digits, "ab12cd345"), (Strings{"ab", "12", "cd", "345"}));
  EXPECT_EQ(pieces(digits, "12"), (Strings{"12"}));
  EXPECT_EQ(pieces(digits, "none"), (Strings{"none"}));
  EXPECT_EQ(pieces(digits, ""), Strings{});
  // Empty matches split the text where they occur.
  const SplitRegex before_x("(?=x)", false, "w");
  EXPECT_EQ(pieces(before_x, "axbxx"), (Strings{"a", "xb", "x", "x"}));
  const SplitRegex star("a*", false, "w");
  EXPECT_EQ(pieces(star, "baac\xC3\xA9"), (Strings{"b", "aa", "c", "\xC3\xA9"}));
  const SplitRegex literal("a.", true, "w");
  EXPECT_EQ(pieces(literal, "xa.ya.za"), (Strings{"x", "a.", "y", "a.", "za"}));
}

TEST(SplitRegex, QwenPatternAsOnigurumaReadsIt) {
  const SplitRegex qwen(
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+",
      false, "w");
  EXPECT_EQ(pieces(qwen, "I'LL do it's 2024!"),
            (Strings{"I", "'LL", " do", " it", "'s", " ", "2", "0", "2", "4", "!"}));
  EXPECT_EQ(pieces(qwen, "x  \n\n y"), (Strings{"x", "  \n\n", " y"}));
  EXPECT_EQ(pieces(qwen, "$\\frac{a}{b}$."), (Strings{"$\\", "frac", "{a", "}{", "b", "}$."}));
  // U+0085 is white space for Oniguruma (White_Space); U+180E is not,
  // although PCRE2's own \s matches it.
  EXPECT_EQ(pieces(qwen, "a\xC2\x85!"), (Strings{"a", "\xC2\x85", "!"}));
  EXPECT_EQ(pieces(qwen, "a \xE1\xA0\x8E" "b"), (Strings{"a", " \xE1\xA0\x8E", "b"}));
  // Case-insensitive contractions follow Unicode case folding: 'ſ (long s) is 's.
  EXPECT_EQ(pieces(qwen, "x'\xC5\xBFt"), (Strings{"x", "'\xC5\xBF", "t"}));
  // Letters of other scripts and combining marks.
  EXPECT_EQ(pieces(qwen, "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C"), (Strings{"\xE4\xBD\xA0\xE5\xA5\xBD", "\xEF\xBC\x8C"}));
  EXPECT_EQ(pieces(qwen, "e\xCC\x81t\xC3\xA9"), (Strings{"e", "\xCC\x81t\xC3\xA9"}));
}

TEST(SplitRegex, MatchesThatOutgrowTheJitStackRerunInTheInterpreter) {
  // A repeated group keeps one JIT backtracking frame per character: 200k
  // spaces need several MB of JIT stack.
  const SplitRegex re("(?:\\s|x)+(?!\\S)|\\s+|\\S+", false, "w");
  const std::string text = "a" + std::string(200000, ' ') + "b" + std::string(100, '\n') + "c";
  RegexScratch big, tiny(4096);
  std::vector<std::string> a, b;
  re.split(text, big, [&](std::string_view p) { a.emplace_back(p); });
  re.split(text, tiny, [&](std::string_view p) { b.emplace_back(p); });
  EXPECT_EQ(a, (Strings{"a", std::string(199999, ' '), " ", "b", std::string(99, '\n'), "\n", "c"}));
  EXPECT_EQ(a, b);
}

TEST(SplitRegex, FindReportsMatchesFromAnOffset) {
  const SplitRegex re("b+", false, "w");
  RegexScratch scratch;
  size_t b = 0, e = 0;
  ASSERT_TRUE(re.find("abbcb", 0, scratch, &b, &e));
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(e, 3u);
  ASSERT_TRUE(re.find("abbcb", 3, scratch, &b, &e));
  EXPECT_EQ(b, 4u);
  EXPECT_FALSE(re.find("abbcb", 5, scratch, &b, &e));
}

// ---- BPE --------------------------------------------------------------------

// The textbook loop: merge the lowest-ranked adjacent pair, leftmost first.
std::vector<TokenId> naive_bpe(std::vector<TokenId> s, const std::vector<BpeMerge>& merges) {
  for (;;) {
    size_t best_rank = merges.size(), best_pos = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i)
      for (size_t r = merges.size(); r-- > 0;)  // the last listing of a pair is its rank
        if (merges[r].left == s[i] && merges[r].right == s[i + 1]) {
          if (r < best_rank) {
            best_rank = r;
            best_pos = i;
          }
          break;
        }
    if (best_rank == merges.size()) return s;
    s[best_pos] = merges[best_rank].result;
    s.erase(s.begin() + long(best_pos) + 1);
  }
}

TEST(BpeModel, LinearAndHeapLoopsEqualTheNaiveReference) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 300; ++trial) {
    // Tokens 0..5 are symbols; merges make new tokens from existing ones,
    // with repeats, so ranks collide and chains form.
    std::vector<BpeMerge> merges;
    TokenId next = 6;
    for (int m = 0; m < 12; ++m) {
      const TokenId l = TokenId(rng() % uint32_t(next)), r = TokenId(rng() % uint32_t(next));
      const bool repeat = !merges.empty() && rng() % 5 == 0;
      merges.push_back(repeat ? merges[rng() % merges.size()] : BpeMerge{l, r, next++});
    }
    std::array<TokenId, 256> bytes;
    bytes.fill(-1);
    const BpeModel model(bytes, merges, {}, {});
    for (int w = 0; w < 20; ++w) {
      std::vector<TokenId> symbols(1 + rng() % 120);
      for (TokenId& t : symbols) t = TokenId(rng() % 6);
      const std::vector<TokenId> expected = naive_bpe(symbols, merges);
      std::vector<TokenId> a = symbols, b = symbols;
      model.merge_linear(a);
      model.merge_heap(b);
      ASSERT_EQ(a, expected) << trial << "/" << w;
      ASSERT_EQ(b, expected) << trial << "/" << w;
    }
  }
}

TEST(BpeModel, EncodeWordUsesByteTokensAndTheCache) {
  std::array<TokenId, 256> bytes;
  for (int b = 0; b < 256; ++b) bytes[size_t(b)] = b;
  const std::vector<BpeMerge> merges = {{'a', 'b', 256}, {256, 'c', 257}};
  const BpeModel model(bytes, merges, {}, {});
  BpeWordCache cache;
  std::vector<TokenId> out;
  model.encode_word("abcab", out, &cache);
  EXPECT_EQ(out, (std::vector<TokenId>{257, 256}));
  EXPECT_EQ(cache.size(), 1u);
  model.encode_word("abcab", out, &cache);  // from the cache, appended
  EXPECT_EQ(out, (std::vector<TokenId>{257, 256, 257, 256}));
  EXPECT_EQ(cache.size(), 1u);
  out.clear();
  model.encode_word("x", out, &cache);  // single bytes bypass the cache
  EXPECT_EQ(out, (std::vector<TokenId>{'x'}));
  EXPECT_EQ(cache.size(), 1u);
  const std::string long_word(BpeWordCache::kMaxWordBytes + 1, 'a');
  out.clear();
  model.encode_word(long_word, out, &cache);
  EXPECT_EQ(out.size(), long_word.size());
  EXPECT_EQ(cache.size(), 1u);  // too long to cache
}

TEST(BpeWordCache, StartsOverWhenFull) {
  BpeWordCache cache;
  const TokenId id = 7;
  std::vector<std::string> words;
  for (int i = 0; i < 70000; ++i) words.push_back("w" + std::to_string(i));
  for (const auto& w : words) cache.put(w, BpeWordCache::hash(w), &id, 1);
  EXPECT_LT(cache.size(), 70000u);
  std::vector<TokenId> out;
  EXPECT_TRUE(cache.get(words.back(), BpeWordCache::hash(words.back()), out));
  EXPECT_FALSE(cache.get(words.front(), BpeWordCache::hash(words.front()), out));
  EXPECT_EQ(out, (std::vector<TokenId>{7}));
}

}  // namespace
}  // namespace dapo::data
