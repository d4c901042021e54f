// The tokenizer: an HF `tokenizer.json` of byte-level BPE (Qwen2 / Qwen2.5 /
// Qwen3, and GPT-2-style files) loaded once and used to encode text to token
// ids and decode ids back to text with the same results as HF `tokenizers`
// (Tokenizer.encode(text, add_special_tokens=False).ids and
// Tokenizer.decode(ids, skip_special_tokens)).
//
// Supported tokenizer.json (anything else is a UserError naming the file and
// the component, e.g. "T.json: normalizer: type 'Lowercase' is not supported"):
//   normalizer      null | NFC | Sequence of NFC
//   pre_tokenizer   ByteLevel (GPT-2 regex when use_regex), or a Sequence of
//                   Split(pattern, behavior Isolated, invert false) steps
//                   followed by ByteLevel (Qwen: use_regex false)
//   model           BPE with vocab and merges ("a b" strings or [a, b]
//                   pairs), byte_fallback false, no dropout, no subword
//                   prefix/suffix; unk_token, fuse_unk, ignore_merges honoured
//   added_tokens    matched before normalisation (normalized false) or after
//                   it (normalized true), leftmost-longest on exact content;
//                   lstrip/rstrip honoured, single_word refused
//   decoder         ByteLevel;  post_processor  null | ByteLevel
// `truncation` and `padding` are ignored (as transformers does: dapo applies
// data.max_prompt_length itself).
//
// Text in: UTF-8; ill-formed bytes are first replaced by U+FFFD (HF only
// accepts valid strings). NFC uses utf8proc's Unicode tables and the Split
// regex PCRE2's, where HF uses the unicode-normalization crate and
// Oniguruma: characters assigned in Unicode versions newer than utf8proc's /
// PCRE2's may split or normalise differently.
//
// Thread safety: a Tokenizer is immutable after load; encode and decode are
// const and may run on many threads at once. Each thread borrows private
// scratch (regex match data, a word cache) from a pool inside the tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dapo::data {

using TokenId = int32_t;

// One entry of tokenizer.json's `added_tokens`, with the id HF assigns it.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;     // skipped by decode(..., skip_special_tokens = true)
  bool normalized = false;  // matched in the normalised text instead of the raw text
  bool lstrip = false;      // the match swallows white space on its left
  bool rstrip = false;      // ... and on its right
};

struct EncodeOptions {
  // HF's split_special_tokens: special added tokens written in the text are
  // encoded as plain text instead of as their ids (non-special added tokens
  // are still matched). Off, as in HF, by default.
  bool split_special_tokens = false;
};

class Tokenizer {
 public:
  // Reads `path` (tokenizer.json). Throws UserError naming the file: missing
  // or unreadable file, invalid JSON, an unsupported component, a merge or
  // unk_token that is not in the vocab, duplicate vocab ids.
  static Tokenizer load(const std::string& path);
  // The same from JSON text; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (no BOS/EOS added: add_special_tokens=False).
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // The same, appended to `out`.
  void encode_append(std::string_view text, std::vector<TokenId>& out, const EncodeOptions& options = {}) const;

  // The text of `ids`: the bytes of each token (byte-level mapping reversed),
  // concatenated, with ill-formed UTF-8 replaced as HF does (one U+FFFD per
  // maximal ill-formed subpart). With skip_special_tokens, added tokens
  // marked special produce nothing. An id that names no token is a UserError
  // "SOURCE: token id N is not in the vocabulary (0..V-1)".
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // Largest id of the vocab and the added tokens, plus one (Qwen3: 151669;
  // the model's embedding may have more rows).
  int64_t vocab_size() const;
  // The id of a token: an added token's content, or a vocab entry in its
  // byte-level spelling ("Ġworld"); nullopt when there is none.
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The token string of an id (added content or byte-level spelling);
  // nullopt when no token has this id.
  std::optional<std::string> id_to_token(TokenId id) const;
  // Whether `id` is a token of this vocabulary (decode accepts it).
  bool has_id(TokenId id) const;
  bool is_special(TokenId id) const;
  const std::vector<AddedToken>& added_tokens() const;
  // Where the tokenizer came from (the path given to load), for messages.
  const std::string& source() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dapo::data
