// Prompt files -> PromptDataset: reading whole files, splitting lines,
// the prompt uid, and the uniqueness of uids across files.
#include "dapo/data/dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/core/rng.h"

namespace dapo::data {
namespace {

// FNV-1a, 64 bit: a fixed, documented string hash (std::hash is neither).
uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

std::string PromptRecord::where() const { return cat(file, ":", line); }

uint64_t prompt_uid(std::string_view data_source, std::string_view index) {
  uint64_t h = stream_combine(kStreamHashInit, fnv1a64(data_source));
  h = stream_combine(h, fnv1a64(index));
  return mix64(h);
}

std::vector<PromptRecord> load_prompt_file(const std::string& path) {
  const std::string data = read_text_file(path, "prompt file");
  if (data.compare(0, 4, "PAR1") == 0)
    throw UserError(cat(path, ": a parquet file; dapo reads prompts as JSONL: convert it first with python3 "
                              "jobs/convert_verl_data.py IN.parquet OUT.jsonl (README, \"Prompt data\")"));
  const std::string stem = std::filesystem::path(path).stem().string();

  std::vector<PromptRecord> records;
  size_t begin = 0;
  if (data.compare(0, 3, "\xEF\xBB\xBF") == 0) begin = 3;  // a UTF-8 byte-order mark
  int64_t line_number = 0;
  while (begin < data.size()) {
    const char* start = data.data() + begin;
    const void* nl = std::memchr(start, '\n', data.size() - begin);
    const size_t end = nl ? size_t(static_cast<const char*>(nl) - data.data()) : data.size();
    std::string_view line(start, end - begin);
    ++line_number;
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    records.push_back(parse_prompt_line(line, path, line_number, int64_t(records.size()), stem));
  }
  if (records.empty()) throw UserError(cat(path, ": no prompts (the file has no non-empty line)"));
  return records;
}

std::vector<std::string> split_file_list(const std::string& list, const std::string& key) {
  std::vector<std::string> files;
  if (trim(list).empty()) return files;
  size_t begin = 0;
  while (true) {
    const size_t comma = list.find(',', begin);
    const std::string name =
        trim(std::string_view(list).substr(begin, comma == std::string::npos ? std::string::npos
                                                                             : comma - begin));
    if (name.empty())
      throw UserError(cat(key, " = \"", list, "\": empty file name in the comma-separated list"));
    files.push_back(name);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return files;
}

PromptDataset::PromptDataset(std::vector<PromptRecord> records) : records_(std::move(records)) {
  by_uid_.reserve(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    const PromptRecord& r = records_[i];
    const auto [it, inserted] = by_uid_.emplace(r.uid, int64_t(i));
    if (inserted) continue;
    const PromptRecord& first = records_[size_t(it->second)];
    if (first.data_source == r.data_source && first.index == r.index)
      throw UserError(cat(r.where(), ": duplicate prompt: data_source \"", r.data_source, "\" and index \"",
                          r.index, "\" were already given at ", first.where(),
                          " (prompt uids must be unique: drop repeated rows or give each its own "
                          "extra_info.index; rows without one are numbered within their file, so two "
                          "such files need different data_source values)"));
    throw UserError(cat(r.where(), ": prompt uid of (data_source \"", r.data_source, "\", index \"", r.index,
                        "\") collides with that of (\"", first.data_source, "\", \"", first.index, "\") at ",
                        first.where(), " (a 64-bit hash collision: change one of the two indices)"));
  }
}

PromptDataset PromptDataset::load(const std::vector<std::string>& paths) {
  std::vector<PromptRecord> all;
  for (const std::string& path : paths) {
    std::vector<PromptRecord> part = load_prompt_file(path);
    if (all.empty()) {
      all = std::move(part);
    } else {
      all.insert(all.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
  }
  return PromptDataset(std::move(all));
}

PromptDataset PromptDataset::load_list(const std::string& list, const std::string& key) {
  const std::vector<std::string> paths = split_file_list(list, key);
  if (paths.empty()) throw UserError(cat(key, " is empty: no prompt files to load"));
  return load(paths);
}

int64_t PromptDataset::find(uint64_t uid) const {
  const auto it = by_uid_.find(uid);
  return it == by_uid_.end() ? -1 : it->second;
}

}  // namespace dapo::data
