// Rollout dump writer (every rank its own rows, collectively) and serial
// reader; the file layout is in rollout_dump.h.
#include "dapo/dump/rollout_dump.h"


#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "dapo/core/error.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"

namespace dapo::dump {

namespace fs = std::filesystem;
using io::H5File;
using io::Hyperslab;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// rollout::FinishReason's codes (eos = 0, length = 1); dump does not depend
// on rollout, so the names travel in the file for readers.
constexpr const char* kFinishReasonNames = "eos,length";
constexpr int kOutcomes = 4;

std::string outcome_names() {
  std::string s;
  for (int i = 0; i < kOutcomes; ++i) s += cat(i ? "," : "", rl::group_outcome_name(rl::GroupOutcome(i)));
  return s;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

// ---- this rank's rows, flattened ---------------------------------------------------

// A ragged array being built: data + offsets (rows + 1, local: from 0).
template <class T>
struct Ragged {
  std::vector<T> data;
  std::vector<int64_t> offsets{0};
  template <class It>
  void add(It begin, It end) {
    data.insert(data.end(), begin, end);
    offsets.push_back(int64_t(data.size()));
  }
  void add(const std::string& s) { add(s.begin(), s.end()); }
};

struct LocalRows {
  // prompts
  std::vector<int64_t> uid, round, position;
  std::vector<uint8_t> trained, outcome;
  std::vector<int64_t> response_rows{0};
  Ragged<int32_t> prompt_tokens;
  Ragged<uint8_t> prompt_text, ground_truth, data_source;
  // responses
  std::vector<int64_t> prompt_index, sample_index, length;
  Ragged<int32_t> tokens;
  std::vector<float> old_logprob, sampling_logprob;
  Ragged<uint8_t> text, pred;
  std::vector<uint8_t> finish_reason, in_loss;
  std::vector<double> score, reward, acc, advantage;
};

template <class V>
void check_n(const V& v, int64_t n, const char* name, const rl::GroupData& g) {
  DAPO_CHECK(int64_t(v.size()) == n, "write_rollout_dump: group uid ", g.uid, ": ", name, " has ", v.size(),
             " entries for ", n, " responses");
}

LocalRows flatten(std::span<const DumpGroup> groups) {
  LocalRows L;
  for (const DumpGroup& dg : groups) {
    DAPO_CHECK(dg.group != nullptr, "write_rollout_dump: a DumpGroup without a group");
    const rl::GroupData& g = *dg.group;
    g.validate();
    const int64_t n = g.num_responses();
    DAPO_CHECK(n >= 1, "write_rollout_dump: group uid ", g.uid, " has no responses");
    check_n(g.finish_reason, n, "finish_reason", g);
    check_n(g.score, n, "score", g);
    check_n(g.acc, n, "acc", g);
    check_n(g.reward, n, "reward", g);
    check_n(g.in_loss, n, "in_loss", g);
    check_n(g.response_text, n, "response_text", g);
    check_n(g.pred, n, "pred", g);
    const int64_t p = int64_t(L.uid.size());
    L.uid.push_back(g.uid);
    L.round.push_back(g.round);
    L.position.push_back(g.position);
    L.trained.push_back(dg.trained ? 1 : 0);
    L.outcome.push_back(uint8_t(dg.outcome));
    L.prompt_tokens.add(g.prompt_ids.begin(), g.prompt_ids.end());
    L.prompt_text.add(g.prompt_text);
    L.ground_truth.add(g.ground_truth);
    L.data_source.add(g.data_source);
    for (int64_t k = 0; k < n; ++k) {
      const size_t K = size_t(k);
      const std::span<const int32_t> ids = g.response(k);
      L.prompt_index.push_back(p);
      L.sample_index.push_back(k);
      L.length.push_back(int64_t(ids.size()));
      L.tokens.add(ids.begin(), ids.end());
      if (g.old_logprobs.empty()) {
        L.old_logprob.insert(L.old_logprob.end(), ids.size(), std::numeric_limits<float>::quiet_NaN());
      } else {
        const auto first = g.old_logprobs.begin() + g.response_offsets[K];
        L.old_logprob.insert(L.old_logprob.end(), first, first + int64_t(ids.size()));
      }
      if (g.sampling_logprobs.empty()) {
        L.sampling_logprob.insert(L.sampling_logprob.end(), ids.size(), std::numeric_limits<float>::quiet_NaN());
      } else {
        const auto first = g.sampling_logprobs.begin() + g.response_offsets[K];
        L.sampling_logprob.insert(L.sampling_logprob.end(), first, first + int64_t(ids.size()));
      }
      L.text.add(g.response_text[K]);
      L.pred.add(g.pred[K]);
      L.finish_reason.push_back(g.finish_reason[K]);
      L.in_loss.push_back(g.in_loss[K]);
      L.score.push_back(g.score[K]);
      L.reward.push_back(g.reward[K]);
      L.acc.push_back(g.acc[K]);
      L.advantage.push_back(g.advantage.empty() ? kNaN : g.advantage[K]);
    }
    L.response_rows.push_back(int64_t(L.prompt_index.size()));
  }
  return L;
}

// ---- collective writes -------------------------------------------------------------

// This rank's rows of a dataset: [start, start + count) of `total`.
struct Extent {
  int64_t start = 0, count = 0, total = 0;
};

// Counts exchanged once: what every rank holds of each kind of row.
enum Field : size_t {
  kPrompts, kResponses, kPromptTokens, kPromptText, kGroundTruth, kDataSource, kTokens, kText, kPred, kFields
};

class DumpWriter {
 public:
  DumpWriter(H5File& file, const parallel::Comm& comm, const LocalRows& rows, const io::DatasetOptions& options)
      : f_(file), comm_(comm), options_(options) {
    std::vector<int64_t> mine(kFields);
    mine[kPrompts] = int64_t(rows.uid.size());
    mine[kResponses] = int64_t(rows.prompt_index.size());
    mine[kPromptTokens] = int64_t(rows.prompt_tokens.data.size());
    mine[kPromptText] = int64_t(rows.prompt_text.data.size());
    mine[kGroundTruth] = int64_t(rows.ground_truth.data.size());
    mine[kDataSource] = int64_t(rows.data_source.data.size());
    mine[kTokens] = int64_t(rows.tokens.data.size());
    mine[kText] = int64_t(rows.text.data.size());
    mine[kPred] = int64_t(rows.pred.data.size());
    const std::vector<int64_t> all = comm.all_gather_i64(mine);
    for (size_t field = 0; field < kFields; ++field) {
      Extent& e = extent_[field];
      for (int r = 0; r < comm.size(); ++r) {
        const int64_t c = all[size_t(r) * kFields + field];
        if (r < comm.rank()) e.start += c;
        if (r == comm.rank()) e.count = c;
        e.total += c;
      }
    }
  }

  const Extent& extent(Field field) const { return extent_[field]; }

  // A column of `field`'s rows (or elements).
  void column(const std::string& name, Field field, const std::vector<int64_t>& v) {
    f_.create_dataset(name, DType::i64, {extent_[field].total}, options_);
    f_.write(name, slab(extent_[field]), v.data());
  }
  void column(const std::string& name, Field field, const std::vector<int32_t>& v) {
    f_.create_dataset(name, DType::i32, {extent_[field].total}, options_);
    f_.write(name, slab(extent_[field]), v.data());
  }
  void column(const std::string& name, Field field, const std::vector<float>& v) {
    f_.create_dataset(name, DType::f32, {extent_[field].total}, options_);
    f_.write(name, slab(extent_[field]), v.data());
  }
  void column(const std::string& name, Field field, const std::vector<double>& v) {
    f_.create_f64_dataset(name, {extent_[field].total}, options_);
    f_.write_f64(name, slab(extent_[field]), v.data());
  }
  void column(const std::string& name, Field field, const std::vector<uint8_t>& v) {
    f_.create_bytes_dataset(name, {extent_[field].total}, options_);
    f_.write_bytes(name, slab(extent_[field]), v.data());
  }

  // Offsets (rows + 1) into a column of `elements`, shifted by this rank's
  // first element. Each rank writes the offsets of its own rows; the last
  // rank also writes the closing entry (the total).
  void offsets(const std::string& name, Field rows, Field elements, const std::vector<int64_t>& local) {
    const Extent& r = extent_[rows];
    const bool last = comm_.rank() == comm_.size() - 1;
    std::vector<int64_t> global(local.begin(), local.end() - (last ? 0 : 1));
    for (int64_t& x : global) x += extent_[elements].start;
    f_.create_dataset(name, DType::i64, {r.total + 1}, options_);
    f_.write(name, slab(Extent{r.start, int64_t(global.size()), r.total + 1}), global.data());
  }

  template <class T>
  void ragged(const std::string& name, Field rows, Field elements, const Ragged<T>& v) {
    column(name, elements, v.data);
    offsets(name + "_offsets", rows, elements, v.offsets);
  }

 private:
  static Hyperslab slab(const Extent& e) { return e.count == 0 ? Hyperslab::none() : Hyperslab{{e.start}, {e.count}}; }

  H5File& f_;
  const parallel::Comm& comm_;
  io::DatasetOptions options_;
  Extent extent_[kFields];
};


}  // namespace

void write_rollout_dump(const std::string& path, const parallel::Comm& comm, std::span<const DumpGroup> groups,
                        const DumpInfo& info, const io::DatasetOptions& options) {
  const LocalRows rows = flatten(groups);
  const std::string partial = path + ".partial";
  {
    H5File f = H5File::create_fresh(partial, comm);  // never through a stale .partial symlink
    f.set_attr("/", "format", std::string(kRolloutDumpFormat));
    f.set_attr("/", "format_version", kRolloutDumpFormatVersion);
    f.set_attr("/", "step", info.step);
    f.set_attr("/", "config", info.config_ini);
    f.set_attr("/", "n", info.n);
    f.set_attr("/", "max_response_length", info.max_response_length);
    f.set_attr("/", "world_size", int64_t(comm.size()));

    // Checksums as in checkpoints: HDF5 verifies each chunk's Fletcher-32
    // on every read, so a damaged dump fails to load instead of showing
    // altered text or numbers.
    io::DatasetOptions checked = options;
    checked.fletcher32 = true;
    DumpWriter w(f, comm, rows, checked);
    w.column("/prompts/uid", kPrompts, rows.uid);
    w.column("/prompts/round", kPrompts, rows.round);
    w.column("/prompts/position", kPrompts, rows.position);
    w.column("/prompts/trained", kPrompts, rows.trained);
    w.column("/prompts/outcome", kPrompts, rows.outcome);
    f.set_attr("/prompts/outcome", "names", outcome_names());
    w.offsets("/prompts/response_rows", kPrompts, kResponses, rows.response_rows);
    w.ragged("/prompts/tokens", kPrompts, kPromptTokens, rows.prompt_tokens);
    w.ragged("/prompts/text", kPrompts, kPromptText, rows.prompt_text);
    w.ragged("/prompts/ground_truth", kPrompts, kGroundTruth, rows.ground_truth);
    w.ragged("/prompts/data_source", kPrompts, kDataSource, rows.data_source);

    // prompt_index: this rank's local indices, shifted to file rows.
    std::vector<int64_t> prompt_index = rows.prompt_index;
    for (int64_t& p : prompt_index) p += w.extent(kPrompts).start;
    w.column("/responses/prompt_index", kResponses, prompt_index);
    w.column("/responses/sample_index", kResponses, rows.sample_index);
    w.ragged("/responses/tokens", kResponses, kTokens, rows.tokens);
    w.column("/responses/old_logprob", kTokens, rows.old_logprob);
    w.column("/responses/sampling_logprob", kTokens, rows.sampling_logprob);
    w.ragged("/responses/text", kResponses, kText, rows.text);
    w.ragged("/responses/pred", kResponses, kPred, rows.pred);
    w.column("/responses/finish_reason", kResponses, rows.finish_reason);
    f.set_attr("/responses/finish_reason", "names", std::string(kFinishReasonNames));
    w.column("/responses/length", kResponses, rows.length);
    w.column("/responses/score", kResponses, rows.score);
    w.column("/responses/reward", kResponses, rows.reward);
    w.column("/responses/acc", kResponses, rows.acc);
    w.column("/responses/advantage", kResponses, rows.advantage);
    w.column("/responses/in_loss", kResponses, rows.in_loss);
    f.close();
  }
  std::string error;
  if (comm.rank() == 0) {
    try {
      io::commit_file(partial, path);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(comm, error);
}

void write_rollout_dump(const std::string& path, const parallel::Comm& comm, std::span<const rl::GroupData> trained,
                        std::span<const rl::GroupOutcome> trained_outcomes, std::span<const rl::GroupData> dropped,
                        std::span<const rl::GroupOutcome> dropped_outcomes, const DumpInfo& info) {
  DAPO_CHECK(trained.size() == trained_outcomes.size(), "write_rollout_dump: ", trained.size(), " trained groups, ",
             trained_outcomes.size(), " outcomes");
  DAPO_CHECK(dropped.size() == dropped_outcomes.size(), "write_rollout_dump: ", dropped.size(), " dropped groups, ",
             dropped_outcomes.size(), " outcomes");
  std::vector<DumpGroup> groups;
  groups.reserve(trained.size() + dropped.size());
  for (size_t i = 0; i < trained.size(); ++i) groups.push_back({&trained[i], trained_outcomes[i], true});
  for (size_t i = 0; i < dropped.size(); ++i) groups.push_back({&dropped[i], dropped_outcomes[i], false});
  write_rollout_dump(path, comm, groups, info);
}

// ---- reading ----------------------------------------------------------------------

int64_t RolloutDump::num_responses() const {
  int64_t n = 0;
  for (const DumpedGroup& g : groups) n += g.group.num_responses();
  return n;
}

std::string RolloutDump::finish_reason_name(uint8_t code) const {
  return code < finish_reason_names.size() ? finish_reason_names[code] : std::to_string(int(code));
}

namespace {

class DumpReader {
 public:
  explicit DumpReader(const H5File& f) : f_(f) {}

  // A 1-D dataset of `expected` elements (-1: any), read whole.
  template <class T>
  std::vector<T> column(const std::string& name, int64_t expected, const std::string& what) const {
    const std::vector<int64_t> shape = f_.dataset_shape(name);
    if (shape.size() != 1)
      throw UserError(cat(f_.path(), ": ", name, ": has ", shape.size(), " dimensions, expected 1"));
    if (expected >= 0 && shape[0] != expected)
      throw UserError(cat(f_.path(), ": ", name, ": has ", shape[0], " entries, expected ", expected, " (", what, ")"));
    std::vector<T> v(static_cast<size_t>(shape[0]));
    const Hyperslab s = shape[0] == 0 ? Hyperslab::none() : Hyperslab::whole(shape);
    if constexpr (std::is_same_v<T, uint8_t>) f_.read_bytes(name, s, v.data());
    else if constexpr (std::is_same_v<T, double>) f_.read_f64(name, s, v.data());
    else f_.read(name, s, v.data());
    return v;
  }

  // Offsets of `rows` rows into a column of `elements` elements: rows + 1
  // entries from 0, non-decreasing, ending at `elements`.
  std::vector<int64_t> offsets(const std::string& name, int64_t rows, int64_t elements, const std::string& what) const {
    std::vector<int64_t> o = column<int64_t>(name, rows + 1, what);
    if (o.front() != 0) throw UserError(cat(f_.path(), ": ", name, ": starts at ", o.front(), ", not 0"));
    for (size_t i = 1; i < o.size(); ++i)
      if (o[i] < o[i - 1]) throw UserError(cat(f_.path(), ": ", name, ": decreases at entry ", i));
    if (o.back() != elements)
      throw UserError(cat(f_.path(), ": ", name, ": ends at ", o.back(), " but its data has ", elements, " entries"));
    return o;
  }

  template <class T>
  struct RaggedView {
    std::vector<T> data;
    std::vector<int64_t> offsets;
    int64_t begin(int64_t i) const { return offsets[size_t(i)]; }
    int64_t end(int64_t i) const { return offsets[size_t(i) + 1]; }
    std::string string(int64_t i) const {
      return std::string(reinterpret_cast<const char*>(data.data()) + begin(i), size_t(end(i) - begin(i)));
    }
  };

  template <class T>
  RaggedView<T> ragged(const std::string& name, int64_t rows, const std::string& what) const {
    RaggedView<T> v;
    v.data = column<T>(name, -1, "");
    v.offsets = offsets(name + "_offsets", rows, int64_t(v.data.size()), what);
    return v;
  }

 private:
  const H5File& f_;
};

bool all_nan(std::span<const double> v) {
  for (const double x : v)
    if (!std::isnan(x)) return false;
  return true;
}

}  // namespace

RolloutDump read_rollout_dump(const std::string& path) {
  const H5File f = H5File::open_local(path);
  RolloutDump d;
  d.path = path;
  d.format_version = io::check_format(f, path, kRolloutDumpFormat, "dapo rollout dump", kRolloutDumpFormatVersion);
  d.info.step = f.attr_int("/", "step");
  d.info.config_ini = f.attr_string("/", "config");
  d.info.n = f.attr_int("/", "n");
  d.info.max_response_length = f.attr_int("/", "max_response_length");
  d.world_size = f.attr_int("/", "world_size");
  if (f.has_attr("/responses/finish_reason", "names"))
    d.finish_reason_names = split_names(f.attr_string("/responses/finish_reason", "names"));

  const DumpReader r(f);
  const std::string per_prompt = "one per prompt, as /prompts/uid";
  const std::string per_response = "one per response, as /responses/prompt_index";
  const std::vector<int64_t> uid = r.column<int64_t>("/prompts/uid", -1, "");
  const int64_t P = int64_t(uid.size());
  const auto round = r.column<int64_t>("/prompts/round", P, per_prompt);
  const auto position = r.column<int64_t>("/prompts/position", P, per_prompt);
  const auto trained = r.column<uint8_t>("/prompts/trained", P, per_prompt);
  const auto outcome = r.column<uint8_t>("/prompts/outcome", P, per_prompt);
  const auto prompt_index = r.column<int64_t>("/responses/prompt_index", -1, "");
  const int64_t R = int64_t(prompt_index.size());
  const auto response_rows = r.offsets("/prompts/response_rows", P, R, "prompts + 1, into /responses");
  const auto prompt_tokens = r.ragged<int32_t>("/prompts/tokens", P, "prompts + 1");
  const auto prompt_text = r.ragged<uint8_t>("/prompts/text", P, "prompts + 1");
  const auto ground_truth = r.ragged<uint8_t>("/prompts/ground_truth", P, "prompts + 1");
  const auto data_source = r.ragged<uint8_t>("/prompts/data_source", P, "prompts + 1");

  const auto sample_index = r.column<int64_t>("/responses/sample_index", R, per_response);
  const auto tokens = r.ragged<int32_t>("/responses/tokens", R, "responses + 1");
  const auto old_logprob =
      r.column<float>("/responses/old_logprob", int64_t(tokens.data.size()), "one per token, as /responses/tokens");
  // Format 1 had no sampler log-probs.
  const std::vector<float> sampling_logprob =
      d.format_version >= 2 ? r.column<float>("/responses/sampling_logprob", int64_t(tokens.data.size()),
                                              "one per token, as /responses/tokens")
                            : std::vector<float>(tokens.data.size(), std::numeric_limits<float>::quiet_NaN());
  const auto text = r.ragged<uint8_t>("/responses/text", R, "responses + 1");
  const auto pred = r.ragged<uint8_t>("/responses/pred", R, "responses + 1");
  const auto finish_reason = r.column<uint8_t>("/responses/finish_reason", R, per_response);
  const auto length = r.column<int64_t>("/responses/length", R, per_response);
  const auto score = r.column<double>("/responses/score", R, per_response);
  const auto reward = r.column<double>("/responses/reward", R, per_response);
  const auto acc = r.column<double>("/responses/acc", R, per_response);
  const auto advantage = r.column<double>("/responses/advantage", R, per_response);
  const auto in_loss = r.column<uint8_t>("/responses/in_loss", R, per_response);

  d.groups.resize(size_t(P));
  for (int64_t p = 0; p < P; ++p) {
    const size_t I = size_t(p);
    DumpedGroup& dg = d.groups[I];
    if (outcome[I] >= kOutcomes)
      throw UserError(cat(path, ": /prompts/outcome: entry ", p, " is ", int(outcome[I]), ", not a group outcome (0..",
                          kOutcomes - 1, ")"));
    dg.outcome = rl::GroupOutcome(outcome[I]);
    dg.trained = trained[I] != 0;
    rl::GroupData& g = dg.group;
    g.uid = uid[I];
    g.round = round[I];
    g.position = position[I];
    g.prompt_ids.assign(prompt_tokens.data.begin() + prompt_tokens.begin(p),
                        prompt_tokens.data.begin() + prompt_tokens.end(p));
    g.prompt_text = prompt_text.string(p);
    g.ground_truth = ground_truth.string(p);
    g.data_source = data_source.string(p);
    const int64_t first = response_rows[I], last = response_rows[I + 1];
    if (last == first) throw UserError(cat(path, ": /prompts/response_rows: prompt ", p, " has no responses"));
    std::vector<float> logprobs, sampler;
    for (int64_t row = first; row < last; ++row) {
      const size_t J = size_t(row);
      if (prompt_index[J] != p)
        throw UserError(cat(path, ": /responses/prompt_index: row ", row, " says prompt ", prompt_index[J],
                            " but /prompts/response_rows puts it under prompt ", p));
      if (sample_index[J] != row - first)
        throw UserError(cat(path, ": /responses/sample_index: row ", row, " is ", sample_index[J], ", expected ",
                            row - first, " (its place in its group)"));
      const int64_t len = tokens.end(row) - tokens.begin(row);
      if (length[J] != len)
        throw UserError(cat(path, ": /responses/length: row ", row, " is ", length[J], " but it has ", len, " tokens"));
      g.response_ids.insert(g.response_ids.end(), tokens.data.begin() + tokens.begin(row),
                            tokens.data.begin() + tokens.end(row));
      logprobs.insert(logprobs.end(), old_logprob.begin() + tokens.begin(row), old_logprob.begin() + tokens.end(row));
      sampler.insert(sampler.end(), sampling_logprob.begin() + tokens.begin(row),
                     sampling_logprob.begin() + tokens.end(row));
      g.response_offsets.push_back(int64_t(g.response_ids.size()));
      g.finish_reason.push_back(finish_reason[J]);
      g.score.push_back(score[J]);
      g.acc.push_back(acc[J]);
      g.reward.push_back(reward[J]);
      g.in_loss.push_back(in_loss[J]);
      g.advantage.push_back(advantage[J]);
      g.response_text.push_back(text.string(row));
      g.pred.push_back(pred.string(row));
    }
    bool logprobs_nan = true;
    for (const float x : logprobs)
      if (!std::isnan(x)) logprobs_nan = false;
    if (!logprobs_nan) g.old_logprobs = std::move(logprobs);
    if (std::any_of(sampler.begin(), sampler.end(), [](float x) { return !std::isnan(x); }))
      g.sampling_logprobs = std::move(sampler);
    if (all_nan(g.advantage)) g.advantage.clear();
  }
  return d;
}

}  // namespace dapo::dump
