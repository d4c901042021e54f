// A model's safetensors over one file or the shards of an HF index.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dapo/core/error.h"
#include "dapo/io/safetensors.h"

namespace dapo::io {

namespace fs = std::filesystem;

SafetensorsSet SafetensorsSet::open_file(const std::string& path) {
  SafetensorsSet set;
  set.origin_ = path;
  set.files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& name : set.files_[0]->names()) set.where_[name] = 0;
  return set;
}

SafetensorsSet SafetensorsSet::open_index(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw UserError(cat(index_path, ": cannot open the safetensors index"));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cat(index_path, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw UserError(cat(index_path, ": no \"weight_map\" object (tensor name -> shard file)"));
  SafetensorsSet set;
  set.origin_ = index_path;
  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, size_t> shard_index;
  for (const auto& [name, v] : j["weight_map"].items()) {
    if (!v.is_string()) throw UserError(cat(index_path, ": weight_map entry of '", name, "' is not a file name"));
    const std::string shard = v.get<std::string>();
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      // Shards live in the model's folder: an index naming
      // "../../etc/passwd" or "/etc/passwd" must not open it. Checked
      // lexically, so the symlinks of a Hugging Face cache (shard -> blob
      // outside the snapshot folder) still work.
      const fs::path rel(shard);
      const bool escapes = shard.empty() || rel.is_absolute() || rel.has_root_name() ||
                           std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; });
      if (escapes)
        throw UserError(cat(index_path, ": shard '", printable(shard), "' (of tensor '", printable(name),
                            "') is not a file name inside ", dir.empty() ? std::string(".") : dir.string()));
      const fs::path p = dir / shard;
      if (!fs::is_regular_file(p))
        throw UserError(cat(index_path, ": shard '", shard, "' (of tensor '", name, "') does not exist"));
      set.files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
      it = shard_index.emplace(shard, set.files_.size() - 1).first;
    }
    if (!set.files_[it->second]->contains(name))
      throw UserError(cat(index_path, ": weight_map puts tensor '", name, "' in shard '", shard, "', which has no such tensor"));
    set.where_[name] = it->second;
  }
  return set;
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  if (!fs::is_directory(dir)) throw UserError(cat(dir, ": not a directory"));
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) return open_index(index.string());
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single)) return open_file(single.string());
  throw UserError(cat(dir, ": has neither model.safetensors nor model.safetensors.index.json"));
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsSet::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw UserError(cat(origin_, ": no tensor '", name, "'"));
  return *files_[it->second];
}

}  // namespace dapo::io
