// Reading tokenizer.json: every component is checked against what dapo
// implements, so a file that HF would tokenize differently is refused with
// the component named instead of being tokenized wrongly.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/data/tokenizer_utf8.h"
#include "tokenizer_impl.h"

namespace dapo::data {
namespace {

using nlohmann::json;

// model.vocab and model.merges (151k entries each in Qwen's file), taken out
// of the parser as it reads them instead of being built into nlohmann's DOM,
// which halves the load time. The DOM keeps them as an empty object / array.
struct BigMembers {
  bool vocab_seen = false;   // model.vocab was an object
  bool merges_seen = false;  // model.merges was an array
  std::vector<std::pair<std::string, json>> vocab;  // (token, id) in file order
  std::vector<json> merges;                         // "a b" or ["a", "b"] (or anything, refused later)
};

// The parser callback that fills BigMembers. Depth 1 holds the root's keys,
// depth 2 the model's, depth 3 the entries of vocab and merges.
class BigMemberFilter {
 public:
  explicit BigMemberFilter(BigMembers& big) : big_(big) {}

  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (event == E::key && depth >= 1 && depth <= 2) {
      path_[size_t(depth)] = parsed.get<std::string>();
      return true;
    }
    if (depth == 2 && path_[1] == "model") {
      if (path_[2] == "vocab" && event == E::object_start) big_.vocab_seen = in_vocab_ = true;
      if (path_[2] == "vocab" && event == E::object_end) in_vocab_ = false;
      if (path_[2] == "merges" && event == E::array_start) big_.merges_seen = in_merges_ = true;
      if (path_[2] == "merges" && event == E::array_end) in_merges_ = false;
      return true;
    }
    if (depth != 3) return true;
    if (in_vocab_) {
      switch (event) {
        case E::key:  // dropped from the DOM together with its value
          big_.vocab.emplace_back(std::move(parsed.get_ref<std::string&>()), json());
          return false;
        case E::value:
          big_.vocab.back().second = std::move(parsed);
          return true;
        case E::object_start:
        case E::array_start:
          big_.vocab.back().second = json::array();  // not an id; reported by the loader
          return false;
        default:
          return true;
      }
    }
    if (in_merges_) {
      if (event == E::value || event == E::array_end || event == E::object_end) {
        big_.merges.push_back(std::move(parsed));
        return false;
      }
    }
    return true;
  }

 private:
  BigMembers& big_;
  std::array<std::string, 3> path_;
  bool in_vocab_ = false;
  bool in_merges_ = false;
};

// Errors name the file and the JSON path of the component at fault.
class Loader {
 public:
  Loader(const json& root, BigMembers& big, std::string source, Tokenizer::Impl& impl)
      : root_(root), big_(big), source_(std::move(source)), t_(impl) {}

  void run() {
    if (!root_.is_object()) fail("", "the file is not a JSON object");
    for (const char* key : {"model", "pre_tokenizer", "decoder"})
      if (!root_.contains(key)) fail(key, "missing");
    load_model(root_["model"]);
    load_normalizer(root_.value("normalizer", json()), "normalizer");
    load_pre_tokenizer(root_["pre_tokenizer"]);
    load_decoder(root_["decoder"]);
    load_post_processor(root_.value("post_processor", json()));
    load_added_tokens(root_.value("added_tokens", json::array()));
    build_id_tables();
    for (const char* key : {"truncation", "padding"})
      if (root_.contains(key) && !root_[key].is_null())
        DAPO_DEBUG(source_, ": ", key, " is set and ignored (dapo truncates prompts itself)");
  }

 private:
  [[noreturn]] void fail(const std::string& component, const std::string& what) const {
    throw UserError(component.empty() ? cat(source_, ": ", what) : cat(source_, ": ", component, ": ", what));
  }

  std::string type_of(const json& node, const std::string& component) const {
    if (!node.is_object()) fail(component, "must be an object");
    if (!node.contains("type") || !node["type"].is_string()) fail(component, "has no \"type\"");
    return node["type"].get<std::string>();
  }

  bool flag(const json& node, const char* key, bool fallback, const std::string& component) const {
    if (!node.contains(key) || node[key].is_null()) return fallback;
    if (!node[key].is_boolean()) fail(component, cat("\"", key, "\" must be true or false"));
    return node[key].get<bool>();
  }

  std::string text(const json& node, const char* key, const std::string& component) const {
    if (!node.contains(key) || !node[key].is_string()) fail(component, cat("\"", key, "\" must be a string"));
    return node[key].get<std::string>();
  }

  // ---- model --------------------------------------------------------------

  void load_model(const json& m) {
    if (!m.is_object()) fail("model", "must be an object");
    const std::string type = m.contains("type") ? type_of(m, "model") : "BPE";
    if (type != "BPE") fail("model", cat("type '", type, "' is not supported (only byte-level BPE)"));
    if (m.contains("dropout") && !m["dropout"].is_null() &&
        !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
      fail("model", "dropout is not supported (it makes encoding random)");
    if (flag(m, "byte_fallback", false, "model")) fail("model", "byte_fallback is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && !(m[key].is_string() && m[key].get<std::string>().empty()))
        fail("model", cat(key, " is not supported"));

    if (!big_.vocab_seen) fail("model.vocab", "must be an object");
    TokenId max_id = -1;
    for (const auto& [token, value] : big_.vocab) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > int64_t(INT32_MAX - 1))
        fail("model.vocab", cat("the id of '", token, "' is not an integer in [0, 2^31-1)"));
      max_id = std::max(max_id, TokenId(value.get<int64_t>()));
    }
    std::vector<int32_t> owner(size_t(max_id + 1), -1);  // id -> index of its entry
    t_.vocab.reserve(big_.vocab.size());
    for (size_t i = 0; i < big_.vocab.size(); ++i) {
      auto& [token, value] = big_.vocab[i];
      const TokenId id = TokenId(value.get<int64_t>());
      if (owner[size_t(id)] >= 0)
        fail("model.vocab", cat("id ", id, " is given to both '", big_.vocab[size_t(owner[size_t(id)])].first,
                                "' and '", token, "'"));
      owner[size_t(id)] = int32_t(i);
      if (!t_.vocab.emplace(token, id).second) fail("model.vocab", cat("'", token, "' is listed twice"));
    }
    model_vocab_len_ = TokenId(t_.vocab.size());
    max_id_ = max_id;

    // Byte tokens, and the raw bytes of every token for ignore_merges.
    const std::array<char32_t, 256> chars = byte_level_chars();
    std::array<TokenId, 256> byte_ids;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, chars[size_t(b)]);
      const auto it = t_.vocab.find(s);
      byte_ids[size_t(b)] = it == t_.vocab.end() ? -1 : it->second;
    }
    const bool ignore_merges = flag(m, "ignore_merges", false, "model");
    std::unordered_map<std::string, TokenId> whole;
    if (ignore_merges) {
      whole.reserve(t_.vocab.size());
      for (const auto& [token, id] : t_.vocab) whole.emplace(byte_level_decode(token), id);
    }

    BpeModel::Options options;
    options.fuse_unk = flag(m, "fuse_unk", false, "model");
    options.ignore_merges = ignore_merges;
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      const std::string unk = text(m, "unk_token", "model");
      const auto it = t_.vocab.find(unk);
      if (it == t_.vocab.end()) fail("model", cat("unk_token '", unk, "' is not in the vocab"));
      options.unk = it->second;
    }

    if (!big_.merges_seen) fail("model.merges", "must be an array");
    const std::vector<json>& merges = big_.merges;
    std::vector<BpeMerge> rules;
    rules.reserve(merges.size());
    std::string joined, left, right;
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& e = merges[r];
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail("model.merges", cat("entry ", r, " '", s, "' is not two tokens separated by one space"));
        left.assign(s, 0, space);
        right.assign(s, space + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        left = e[0].get_ref<const std::string&>();
        right = e[1].get_ref<const std::string&>();
      } else {
        fail("model.merges", cat("entry ", r, " is neither \"a b\" nor [\"a\", \"b\"]"));
      }
      joined.assign(left).append(right);
      const auto l = t_.vocab.find(left), rt = t_.vocab.find(right), j = t_.vocab.find(joined);
      for (const auto& [it, name] : {std::pair{l, &left}, std::pair{rt, &right}, std::pair{j, &joined}})
        if (it == t_.vocab.end())
          fail("model.merges", cat("entry ", r, " ('", left, "', '", right, "'): token '", *name,
                                   "' is not in the vocab"));
      rules.push_back({l->second, rt->second, j->second});
    }
    t_.bpe = BpeModel(byte_ids, rules, options, std::move(whole));
  }

  // ---- normalizer ---------------------------------------------------------

  void load_normalizer(const json& n, const std::string& component) {
    if (n.is_null()) return;
    const std::string type = type_of(n, component);
    if (type == "NFC") {
      t_.nfc = true;
    } else if (type == "Sequence") {
      if (!n.contains("normalizers") || !n["normalizers"].is_array())
        fail(component, "\"normalizers\" must be an array");
      for (size_t i = 0; i < n["normalizers"].size(); ++i)
        load_normalizer(n["normalizers"][i], cat(component, ".normalizers[", i, "]"));
    } else {
      fail(component, cat("type '", type, "' is not supported (supported: NFC, a Sequence of NFC, null)"));
    }
  }

  // ---- pre-tokenizer ------------------------------------------------------

  void load_pre_tokenizer(const json& p) {
    if (p.is_null())
      fail("pre_tokenizer", "null is not supported (byte-level BPE needs a ByteLevel pre-tokenizer)");
    std::vector<std::pair<const json*, std::string>> steps;
    flatten(p, "pre_tokenizer", steps);
    bool have_byte_level = false;
    for (const auto& [step, component] : steps) {
      const std::string type = type_of(*step, component);
      if (have_byte_level) fail(component, cat("a ", type, " step after ByteLevel is not supported"));
      if (type == "Split") {
        const std::string behavior = step->value("behavior", std::string("Isolated"));
        if (behavior != "Isolated")
          fail(component, cat("Split behavior '", behavior, "' is not supported (only Isolated)"));
        if (flag(*step, "invert", false, component)) fail(component, "Split with invert true is not supported");
        if (!step->contains("pattern") || !(*step)["pattern"].is_object())
          fail(component, "\"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
        const json& pat = (*step)["pattern"];
        if (pat.contains("Regex") && pat["Regex"].is_string()) {
          t_.splits.emplace_back(pat["Regex"].get<std::string>(), false, cat(source_, ": ", component));
        } else if (pat.contains("String") && pat["String"].is_string()) {
          t_.splits.emplace_back(pat["String"].get<std::string>(), true, cat(source_, ": ", component));
        } else {
          fail(component, "\"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
        }
      } else if (type == "ByteLevel") {
        have_byte_level = true;
        t_.prefix_space = flag(*step, "add_prefix_space", true, component);
        if (flag(*step, "use_regex", true, component))
          t_.byte_level_regex.emplace(kGpt2Pattern, false, cat(source_, ": ", component));
      } else {
        fail(component, cat("type '", type,
                            "' is not supported (supported: ByteLevel, or a Sequence of Split steps and ByteLevel)"));
      }
    }
    if (!have_byte_level)
      fail("pre_tokenizer", "has no ByteLevel step (dapo supports byte-level BPE only)");
  }

  void flatten(const json& p, const std::string& component,
               std::vector<std::pair<const json*, std::string>>& steps) const {
    if (type_of(p, component) != "Sequence") {
      steps.emplace_back(&p, component);
      return;
    }
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      fail(component, "\"pretokenizers\" must be an array");
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      flatten(p["pretokenizers"][i], cat(component, ".pretokenizers[", i, "]"), steps);
  }

  // ---- decoder and post-processor -----------------------------------------

  void load_decoder(const json& d) {
    if (d.is_null()) fail("decoder", "null is not supported (byte-level BPE decodes with ByteLevel)");
    const std::string type = type_of(d, "decoder");
    if (type != "ByteLevel") fail("decoder", cat("type '", type, "' is not supported (only ByteLevel)"));
  }

  void load_post_processor(const json& p) {
    if (p.is_null()) return;
    const std::string type = type_of(p, "post_processor");
    if (type != "ByteLevel")
      fail("post_processor", cat("type '", type,
                                 "' is not supported (only ByteLevel or null: dapo adds no tokens around a text)"));
  }

  // ---- added tokens -------------------------------------------------------

  // Ids as HF assigns them when it reads the file (AddedVocabulary::add_tokens):
  // a content that is already a token keeps that id, a new one gets the next
  // id after the vocab. A file whose ids disagree is tokenized as HF would.
  void load_added_tokens(const json& list) {
    if (!list.is_array()) fail("added_tokens", "must be an array");
    TokenId next_id = model_vocab_len_;
    for (size_t i = 0; i < list.size(); ++i) {
      const json& a = list[i];
      const std::string component = cat("added_tokens[", i, "]");
      if (!a.is_object()) fail(component, "must be an object");
      AddedToken tok;
      tok.content = text(a, "content", component);
      if (!utf8_valid(tok.content)) fail(component, "content is not valid UTF-8");
      tok.special = flag(a, "special", false, component);
      tok.normalized = flag(a, "normalized", !tok.special, component);
      tok.lstrip = flag(a, "lstrip", false, component);
      tok.rstrip = flag(a, "rstrip", false, component);
      if (flag(a, "single_word", false, component))
        fail(component, cat("'", tok.content, "': single_word is not supported"));
      if (tok.content.empty()) continue;  // HF ignores empty added tokens
      if (const auto it = t_.added_by_content.find(tok.content); it != t_.added_by_content.end()) {
        tok.id = it->second;  // listed twice: the later properties win, as in HF
        for (AddedToken& old : t_.added)
          if (old.content == tok.content) old = tok;
        continue;
      }
      if (const auto it = t_.vocab.find(tok.content); it != t_.vocab.end()) {
        tok.id = it->second;
      } else {
        tok.id = next_id++;
      }
      if (a.contains("id") && a["id"].is_number_integer() && a["id"].get<int64_t>() != tok.id)
        DAPO_WARN(source_, ": ", component, " '", tok.content, "' has id ", a["id"].get<int64_t>(),
                  " in the file, but HF tokenizers gives it id ", tok.id, "; using ", tok.id);
      t_.added_by_content.emplace(tok.content, tok.id);
      t_.added.push_back(tok);
      max_id_ = std::max(max_id_, tok.id);
    }
    for (size_t k = 0; k < t_.added.size(); ++k) {
      const AddedToken& tok = t_.added[k];
      if (tok.normalized) {
        t_.normalized_added.patterns.push_back({t_.nfc ? nfc(tok.content) : tok.content, k});
      } else {
        t_.raw_added.patterns.push_back({tok.content, k});
      }
    }
    t_.raw_added.build();
    t_.normalized_added.build();
  }

  // ---- id tables ----------------------------------------------------------

  void build_id_tables() {
    const size_t n = size_t(max_id_ + 1);
    t_.vocab_size = int64_t(n);
    std::vector<const std::string*> token(n, nullptr);
    t_.kind.assign(n, Tokenizer::Impl::kNone);
    for (const auto& [s, id] : t_.vocab) {
      token[size_t(id)] = &s;
      t_.kind[size_t(id)] = Tokenizer::Impl::kVocab;
    }
    for (const AddedToken& a : t_.added) {  // an added token shadows a vocab entry with its id
      token[size_t(a.id)] = &a.content;
      t_.kind[size_t(a.id)] = a.special ? Tokenizer::Impl::kSpecial : Tokenizer::Impl::kAdded;
    }
    t_.bytes_offset.assign(n + 1, 0);
    t_.text_offset.assign(n + 1, 0);
    for (size_t id = 0; id < n; ++id) {
      if (token[id]) {
        t_.bytes += byte_level_decode(*token[id]);
        t_.text += *token[id];
      }
      t_.bytes_offset[id + 1] = uint32_t(t_.bytes.size());
      t_.text_offset[id + 1] = uint32_t(t_.text.size());
    }
  }

  const json& root_;
  BigMembers& big_;
  std::string source_;
  Tokenizer::Impl& t_;
  TokenId model_vocab_len_ = 0;
  TokenId max_id_ = -1;
};

}  // namespace

void AddedMatcher::build() {
  for (auto& bucket : by_first_byte) bucket.clear();
  for (uint32_t i = 0; i < patterns.size(); ++i)
    by_first_byte[static_cast<unsigned char>(patterns[i].text[0])].push_back(i);
  for (auto& bucket : by_first_byte)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return patterns[a].text.size() > patterns[b].text.size(); });
}

std::array<char32_t, 256> byte_level_chars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    chars[size_t(b)] = printable ? char32_t(b) : next++;
  }
  return chars;
}

std::string byte_level_decode(std::string_view token) {
  static const std::array<int16_t, 324> to_byte = [] {  // immutable after initialisation
    std::array<int16_t, 324> t;
    t.fill(-1);
    const auto chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) t[chars[size_t(b)]] = int16_t(b);
    return t;
  }();
  std::string out;
  out.reserve(token.size());
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    const size_t len = utf8_sequence_length(p + i, token.size() - i);
    if (len == 0) return std::string(token);
    const char32_t cp = utf8_code_point(p + i, len);
    if (cp >= to_byte.size() || to_byte[cp] < 0) return std::string(token);
    out.push_back(char(to_byte[cp]));
    i += len;
  }
  return out;
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  json root;
  BigMembers big;
  try {
    root = json::parse(json_text, BigMemberFilter(big));
  } catch (const json::parse_error& e) {
    throw UserError(cat(source, ": not valid JSON: ", e.what()));
  }
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  try {
    Loader(root, big, source, *impl).run();
  } catch (const json::exception& e) {  // a value of an unexpected JSON type deep inside
    throw UserError(cat(source, ": unexpected content: ", e.what()));
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(cat(path, ": cannot open the tokenizer file"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError(cat(path, ": cannot read the tokenizer file"));
  return from_json(text.str(), path);
}

}  // namespace dapo::data
