// An output that is also an input: every command that writes a file a user
// names checks it against every file it reads before it writes anything,
// so `--output` can never replace the prompts, the data, the checkpoint,
// the tokenizer or the HF weights it was given.
#pragma once

#include <string>
#include <vector>

namespace dapo::io {

// A file a command reads, and the option or key that named it
// ("--input", "--checkpoint", "model.tokenizer", ...).
struct InputFile {
  std::string path;
  std::string option;
};

// The files a model source reads: a checkpoint file itself, or of an HF
// model directory its config.json, model.safetensors.index.json and every
// *.safetensors file in it. Each named by `option`.
void add_model_inputs(std::vector<InputFile>& inputs, const std::string& path, const std::string& option);

// A tokenizer.json and the tokenizer_config.json beside it (the chat
// template), each named by `option`. Nothing for an empty path.
void add_tokenizer_inputs(std::vector<InputFile>& inputs, const std::string& path, const std::string& option);

// UserError (exit code 2) when the output `output` (named by the option
// `output_option`) is the same file as one of `inputs`: same device and
// inode by stat(), so through symlinks and hard links. Only an existing
// regular file can clash: an output that does not exist yet, "-" (stdout),
// or a device such as /dev/stdout (which may be the terminal that
// /dev/stdin also is) passes. The message names both paths and both
// options: "OUT: the output (--output) is the input IN (--input): writing
// it would destroy the input; name another output file".
void refuse_output_clash(const std::string& output, const std::string& output_option,
                         const std::vector<InputFile>& inputs);

// UserError (exit code 2) when `output` is "-" for a command whose output
// cannot be a stream (`what`: "an HDF5 file, which is written by seeking",
// "a model folder of several files"): "-" means standard output for the
// commands that write text, and a file of that name would be a surprise.
void refuse_standard_output(const std::string& output, const std::string& output_option, const std::string& what);

}  // namespace dapo::io
