// refuse_output_clash: an output that is one of a command's inputs - by
// path, through a symlink or a hard link - is refused with a message naming
// both; a new file, stdout and devices pass; an HF directory's inputs are
// its config.json, index and safetensors files.
#include "dapo/io/output_clash.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::read_text;
using test::TempDir;
using test::write_text;

TEST(OutputClash, SameFileByPathSymlinkAndHardLinkIsRefused) {
  TempDir dir;
  write_text(dir.file("in.jsonl"), "x\n");
  const std::vector<InputFile> inputs{{dir.file("other.jsonl"), "--data"}, {dir.file("in.jsonl"), "--input"}};
  EXPECT_EQ(error_of([&] { refuse_output_clash(dir.file("in.jsonl"), "--output", inputs); }),
            dir.file("in.jsonl") + ": the output (--output) is the input " + dir.file("in.jsonl") +
                " (--input): writing it would destroy the input; name another output file");
  fs::create_symlink("in.jsonl", dir.path() / "sym.jsonl");
  EXPECT_EQ(error_of([&] { refuse_output_clash(dir.file("sym.jsonl"), "--output", inputs); }),
            dir.file("sym.jsonl") + ": the output (--output) is the input " + dir.file("in.jsonl") +
                " (the same file) (--input): writing it would destroy the input; name another output file");
  fs::create_hard_link(dir.path() / "in.jsonl", dir.path() / "hard.jsonl");
  EXPECT_NE(error_of([&] { refuse_output_clash(dir.file("hard.jsonl"), "--output", inputs); })
                .find("is the input " + dir.file("in.jsonl")),
            std::string::npos);
  // A new file, another file, stdout and a device do not clash.
  EXPECT_EQ(error_of([&] { refuse_output_clash(dir.file("new.jsonl"), "--output", inputs); }), "");
  write_text(dir.file("other2.jsonl"), "y\n");
  EXPECT_EQ(error_of([&] { refuse_output_clash(dir.file("other2.jsonl"), "--output", inputs); }), "");
  EXPECT_EQ(error_of([&] { refuse_output_clash("-", "--output", {{"-", "--input"}}); }), "");
  EXPECT_EQ(error_of([&] { refuse_output_clash("/dev/null", "--output", {{"/dev/null", "--input"}}); }), "");
  EXPECT_EQ(read_text(dir.file("in.jsonl")), "x\n");
}

TEST(OutputClash, ModelInputsCoverAnHfDirectorysFiles) {
  TempDir dir;
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(true), test::tiny_hf_tensors(test::tiny_config(true)), 2);
  write_text(dir.file("hf/README.md"), "not read\n");
  std::vector<InputFile> inputs;
  add_model_inputs(inputs, dir.file("hf"), "--hf-dir");
  std::vector<std::string> names;
  for (const InputFile& f : inputs) names.push_back(fs::path(f.path).filename().string() + " " + f.option);
  EXPECT_EQ(names, (std::vector<std::string>{"config.json --hf-dir", "model-00001-of-00002.safetensors --hf-dir",
                                             "model-00002-of-00002.safetensors --hf-dir",
                                             "model.safetensors.index.json --hf-dir"}));
  EXPECT_NE(error_of([&] { refuse_output_clash(dir.file("hf/model.safetensors.index.json"), "--output", inputs); })
                .find("(--hf-dir)"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { refuse_output_clash(dir.file("hf/README.md"), "--output", inputs); }), "");
}

}  // namespace
}  // namespace dapo::io
