// refuse_output_clash and the input lists of model sources (output_clash.h).
#include "dapo/io/output_clash.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "dapo/core/error.h"

namespace dapo::io {

namespace fs = std::filesystem;

void add_model_inputs(std::vector<InputFile>& inputs, const std::string& path, const std::string& option) {
  if (path.empty()) return;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    inputs.push_back({path, option});
    return;
  }
  std::vector<std::string> files;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool weights = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (weights || name == "config.json" || name == "model.safetensors.index.json")
      files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  for (std::string& f : files) inputs.push_back({std::move(f), option});
}

void add_tokenizer_inputs(std::vector<InputFile>& inputs, const std::string& path, const std::string& option) {
  if (path.empty()) return;
  inputs.push_back({path, option});
  inputs.push_back({(fs::path(path).parent_path() / "tokenizer_config.json").string(), option});
}

void refuse_output_clash(const std::string& output, const std::string& output_option,
                         const std::vector<InputFile>& inputs) {
  if (output.empty() || output == "-") return;
  struct stat out {};
  if (::stat(output.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return;  // new, or a device: no clash
  for (const InputFile& in : inputs) {
    if (in.path.empty() || in.path == "-") continue;
    struct stat st {};
    if (::stat(in.path.c_str(), &st) != 0) continue;
    if (st.st_dev != out.st_dev || st.st_ino != out.st_ino) continue;
    const std::string same = in.path == output ? "" : " (the same file)";
    throw UserError(cat(output, ": the output (", output_option, ") is the input ", in.path, same, " (", in.option,
                        "): writing it would destroy the input; name another output file"));
  }
}

void refuse_standard_output(const std::string& output, const std::string& output_option, const std::string& what) {
  if (output != "-") return;
  throw UserError(cat("command line: ", output_option, " -: the output is ", what,
                      ", which cannot go to standard output; name a path (./- for a file called '-')"));
}

}  // namespace dapo::io
