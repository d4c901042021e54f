// The inside of a Tokenizer, shared by the loader (tokenizer_load.cpp) and
// the encoder/decoder (tokenizer.cpp). Private to src/data.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dapo/data/bpe_model.h"
#include "dapo/data/tokenizer.h"
#include "dapo/data/tokenizer_regex.h"

namespace dapo::data {

// Added tokens of one kind (raw or normalised) found in text the way HF's
// AddedVocabulary does with a leftmost-longest Aho-Corasick automaton: at
// the leftmost position where some content matches, the longest one wins.
// There are few added tokens, so candidates are bucketed by first byte.
struct AddedMatcher {
  struct Pattern {
    std::string text;   // what is searched (normalised content for normalized tokens)
    size_t token = 0;   // index into Impl::added
  };
  std::vector<Pattern> patterns;
  std::array<std::vector<uint32_t>, 256> by_first_byte;  // pattern indices, longest first

  void build();
  bool empty() const { return patterns.empty(); }
};

// Scratch of one encoding thread, borrowed from Impl's pool for one call.
struct EncodeScratch {
  RegexScratch regex;
  BpeWordCache cache;
  std::string normalized;  // NFC of the current segment
  std::string prefixed;    // " " + piece for ByteLevel(add_prefix_space)
};

struct Tokenizer::Impl {
  std::string source;

  bool nfc = false;
  std::vector<AddedToken> added;
  AddedMatcher raw_added;         // normalized == false, searched before normalisation
  AddedMatcher normalized_added;  // normalized == true, searched after it
  std::vector<SplitRegex> splits; // Split steps, in order
  bool prefix_space = false;      // ByteLevel add_prefix_space
  std::optional<SplitRegex> byte_level_regex;  // ByteLevel use_regex (GPT-2 pattern)
  BpeModel bpe;

  int64_t vocab_size = 0;
  // Per id: the bytes decode() emits, and the token string; kind 0 = no token.
  enum Kind : uint8_t { kNone = 0, kVocab = 1, kAdded = 2, kSpecial = 3 };
  std::vector<uint8_t> kind;
  std::vector<uint32_t> bytes_offset;  // vocab_size + 1 entries into `bytes`
  std::string bytes;
  std::vector<uint32_t> text_offset;   // vocab_size + 1 entries into `text`
  std::string text;
  std::unordered_map<std::string, TokenId> vocab;             // byte-level spelling -> id
  std::unordered_map<std::string, TokenId> added_by_content;  // content -> id

  // Scratch pool: an encode takes one (or makes one) and gives it back.
  mutable std::mutex pool_mutex;
  mutable std::vector<std::unique_ptr<EncodeScratch>> pool;
};

// The GPT-2 byte <-> character table of the ByteLevel pre-tokenizer and
// decoder: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order.
std::array<char32_t, 256> byte_level_chars();
// The bytes decode() produces for a token string: every character mapped
// back through the table, or, when some character is not in it, the
// token's own UTF-8 (HF's ByteLevel decoder does the same per token).
std::string byte_level_decode(std::string_view token);
// The GPT-2 pattern ByteLevel(use_regex = true) splits with.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace dapo::data
