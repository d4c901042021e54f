// Encoding and decoding, in HF tokenizers' order: added tokens in the raw
// text, NFC, added tokens in the normalised text, Split steps, ByteLevel,
// BPE per word (through a per-thread word cache); decoding reverses the
// byte-level mapping and repairs UTF-8 the way Rust's from_utf8_lossy does.
#include "dapo/data/tokenizer.h"

#include "dapo/core/error.h"
#include "dapo/data/tokenizer_utf8.h"
#include "tokenizer_impl.h"

namespace dapo::data {
namespace {

// Unicode White_Space (what the \s of Rust's regex crate matches, which HF
// uses for lstrip / rstrip).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Start of the white space that ends text[0..end).
size_t white_space_before(std::string_view text, size_t end) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = end;
  while (i > 0) {
    size_t b = i - 1;
    while (b > 0 && (p[b] & 0xC0) == 0x80) --b;
    if (!is_white_space(utf8_code_point(p + b, i - b))) break;
    i = b;
  }
  return i;
}

// End of the white space that starts text[begin..).
size_t white_space_after(std::string_view text, size_t begin) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = begin;
  while (i < text.size()) {
    const size_t len = utf8_sequence_length(p + i, text.size() - i);
    if (len == 0 || !is_white_space(utf8_code_point(p + i, len))) break;
    i += len;
  }
  return i;
}

// HF's AddedVocabulary::find_matches: on_text(piece) for the text between
// matches, on_token(id) for each match, in order.
template <class OnText, class OnToken>
void split_added(const AddedMatcher& m, const std::vector<AddedToken>& added, std::string_view text,
                 const EncodeOptions& options, OnText&& on_text, OnToken&& on_token) {
  if (m.empty()) {
    if (!text.empty()) on_text(text);
    return;
  }
  size_t emitted = 0;  // text[0..emitted) has been handed on
  size_t i = 0;
  while (i < text.size()) {
    const auto& bucket = m.by_first_byte[static_cast<unsigned char>(text[i])];
    const AddedMatcher::Pattern* hit = nullptr;
    for (const uint32_t k : bucket) {
      const std::string& pat = m.patterns[k].text;
      if (text.compare(i, pat.size(), pat) == 0) {
        hit = &m.patterns[k];
        break;  // the bucket is sorted longest first
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->text.size();
    i = stop;  // the automaton resumes after the match whatever happens to it
    const AddedToken& tok = added[hit->token];
    if (options.split_special_tokens && tok.special) continue;
    if (tok.lstrip) start = std::max(white_space_before(text, start), emitted);
    if (tok.rstrip) stop = white_space_after(text, stop);
    if (emitted < start) on_text(text.substr(emitted, start - emitted));
    on_token(tok.id);
    emitted = stop;
  }
  if (emitted < text.size()) on_text(text.substr(emitted));
}

// One encode call: the tokenizer, the borrowed scratch, the output.
class Encoder {
 public:
  Encoder(const Tokenizer::Impl& t, EncodeScratch& s, std::vector<TokenId>& out, const EncodeOptions& options)
      : t_(t), s_(s), out_(out), options_(options) {}

  void run(std::string_view text) {
    split_added(
        t_.raw_added, t_.added, text, options_, [&](std::string_view piece) { normalize(piece); },
        [&](TokenId id) { out_.push_back(id); });
  }

 private:
  void normalize(std::string_view piece) {
    if (t_.nfc && !nfc_quick_check(piece)) {
      s_.normalized = nfc(piece);
      piece = s_.normalized;
    }
    split_added(
        t_.normalized_added, t_.added, piece, options_, [&](std::string_view p) { pre_tokenize(p, 0); },
        [&](TokenId id) { out_.push_back(id); });
  }

  void pre_tokenize(std::string_view piece, size_t step) {
    if (step < t_.splits.size()) {
      t_.splits[step].split(piece, s_.regex, [&](std::string_view sub) { pre_tokenize(sub, step + 1); });
      return;
    }
    if (t_.prefix_space && piece.front() != ' ') {
      s_.prefixed.assign(1, ' ');
      s_.prefixed.append(piece);
      piece = s_.prefixed;
    }
    if (t_.byte_level_regex) {
      t_.byte_level_regex->split(piece, s_.regex,
                                 [&](std::string_view word) { t_.bpe.encode_word(word, out_, &s_.cache); });
    } else {
      t_.bpe.encode_word(piece, out_, &s_.cache);
    }
  }

  const Tokenizer::Impl& t_;
  EncodeScratch& s_;
  std::vector<TokenId>& out_;
  const EncodeOptions& options_;
};

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::encode_append(std::string_view text, std::vector<TokenId>& out, const EncodeOptions& options) const {
  std::string repaired;
  if (!utf8_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::unique_ptr<EncodeScratch> scratch;
  {
    std::lock_guard<std::mutex> lock(impl_->pool_mutex);
    if (!impl_->pool.empty()) {
      scratch = std::move(impl_->pool.back());
      impl_->pool.pop_back();
    }
  }
  if (!scratch) scratch = std::make_unique<EncodeScratch>();
  struct GiveBack {
    const Impl& t;
    std::unique_ptr<EncodeScratch>& s;
    ~GiveBack() {
      std::lock_guard<std::mutex> lock(t.pool_mutex);
      t.pool.push_back(std::move(s));
    }
  } give_back{*impl_, scratch};
  Encoder(*impl_, *scratch, out, options).run(text);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(text, ids, options);
  return ids;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::string bytes;
  for (const TokenId id : ids) {
    if (id < 0 || id >= t.vocab_size || t.kind[size_t(id)] == Impl::kNone)
      throw UserError(cat(t.source, ": token id ", id, " is not in the vocabulary (0..", t.vocab_size - 1, ")"));
    if (skip_special_tokens && t.kind[size_t(id)] == Impl::kSpecial) continue;
    bytes.append(t.bytes, t.bytes_offset[size_t(id)], t.bytes_offset[size_t(id) + 1] - t.bytes_offset[size_t(id)]);
  }
  return utf8_valid(bytes) ? bytes : utf8_lossy(bytes);
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (const auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end()) return it->second;
  if (const auto it = impl_->vocab.find(key); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  const Impl& t = *impl_;
  if (id < 0 || id >= t.vocab_size || t.kind[size_t(id)] == Impl::kNone) return std::nullopt;
  return t.text.substr(t.text_offset[size_t(id)], t.text_offset[size_t(id) + 1] - t.text_offset[size_t(id)]);
}

bool Tokenizer::has_id(TokenId id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->kind[size_t(id)] != Impl::kNone;
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->kind[size_t(id)] == Impl::kSpecial;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace dapo::data
