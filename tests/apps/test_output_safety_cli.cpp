// Nothing a user owns is lost to a command: an --output that is one of the
// command's inputs (by path, symlink or hard link) is refused with exit
// code 2 and a message naming both paths and the option, the input left
// whole (generate, eval, verify, render, import-hf, export-hf, info
// --save); a stale `.partial` symlink is removed, never written through
// (generate, import-hf); export-hf refuses a non-empty folder (an older
// sharded model there would survive beside the new files).
#include <gtest/gtest.h>

#include <filesystem>

#include "apps/cli_test_util.h"
#include "io/io_test_util.h"

namespace {

namespace fs = std::filesystem;
using dapo::test::read_text;
using dapo::test::TempDir;
using dapo::test::write_text;
using Result = dapo::test::CliResult;

Result run(const std::string& args) { return dapo::test::run_command(dapo::test::dapo_binary() + args); }
std::string fixture(const std::string& name) { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/model/" + name; }
std::string tiny_tokenizer() { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json"; }

std::string write_config(const TempDir& dir) {
  const std::string path = dir.file("generate.ini");
  write_text(path,
             "[rollout]\nn = 1\ntemperature = 0\nmax_response_length = 4\n[algorithm]\ndynamic_sampling = false\n"
             "overlong_buffer_len = 0\n");
  return path;
}

// Exit 2, one message naming the output, the input and the option; the
// input's bytes unchanged.
void expect_refused(const Result& r, const std::string& command, const std::string& output, const std::string& input,
                    const std::string& option, const std::string& before) {
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dapo " + command + ": error: " + output + ": the output (--output) is the input " + input),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(" + option + "): writing it would destroy the input; name another output file"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(read_text(input), before) << input;
}

TEST(OutputSafetyCli, GenerateRefusesItsInputsAsOutput) {
  TempDir dir;
  const std::string ini = write_config(dir);
  const std::string prompts = "{\"prompt_ids\": [1, 2]}\n";
  write_text(dir.file("p.jsonl"), prompts);
  const std::string gen = "generate --config " + ini + " --model.path=" + fixture("tiny_tied") + " --input " +
                          dir.file("p.jsonl") + " --output ";
  expect_refused(run(gen + dir.file("p.jsonl")), "generate", dir.file("p.jsonl"), dir.file("p.jsonl"), "--input",
                 prompts);
  fs::create_symlink("p.jsonl", dir.path() / "sym.jsonl");
  expect_refused(run(gen + dir.file("sym.jsonl")), "generate", dir.file("sym.jsonl"), dir.file("p.jsonl"), "--input",
                 prompts);
  fs::create_hard_link(dir.path() / "p.jsonl", dir.path() / "hard.jsonl");
  expect_refused(run(gen + dir.file("hard.jsonl")), "generate", dir.file("hard.jsonl"), dir.file("p.jsonl"),
                 "--input", prompts);

  // The checkpoint it reads, and the tokenizer.
  Result r = run("import-hf --hf-dir " + fixture("tiny_tied") + " --output " + dir.file("c.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = read_text(dir.file("c.h5"));
  r = run("generate --config " + ini + " --checkpoint " + dir.file("c.h5") + " --input " + dir.file("p.jsonl") +
          " --output " + dir.file("c.h5"));
  expect_refused(r, "generate", dir.file("c.h5"), dir.file("c.h5"), "--checkpoint", ckpt);
  fs::copy_file(tiny_tokenizer(), dir.path() / "tokenizer.json");
  const std::string tok = read_text(dir.file("tokenizer.json"));
  r = run(gen + dir.file("tokenizer.json") + " --model.tokenizer=" + dir.file("tokenizer.json"));
  expect_refused(r, "generate", dir.file("tokenizer.json"), dir.file("tokenizer.json"), "model.tokenizer", tok);
  // An HF directory as the model: its weights and config.
  fs::copy(fixture("tiny_tied"), dir.path() / "hf", fs::copy_options::recursive);
  const std::string weights = read_text(dir.file("hf/model.safetensors"));
  r = run("generate --config " + ini + " --model.path=" + dir.file("hf") + " --input " + dir.file("p.jsonl") +
          " --output " + dir.file("hf/model.safetensors"));
  expect_refused(r, "generate", dir.file("hf/model.safetensors"), dir.file("hf/model.safetensors"), "model.path",
                 weights);
  // Another file is written as before.
  r = run(gen + dir.file("o.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(dapo::test::read_jsonl(dir.file("o.jsonl")).size(), 1u);
}

TEST(OutputSafetyCli, EvalVerifyRenderAndInfoRefuseTheirInputsAsOutput) {
  TempDir dir;
  const std::string ini = write_config(dir);
  const std::string data = "{\"prompt\": \"1+1?\", \"reward_model\": {\"ground_truth\": \"2\"}}\n";
  write_text(dir.file("d.jsonl"), data);
  Result r = run("eval --config " + ini + " --model.path=" + fixture("tiny_tied") + " --model.tokenizer=" +
                 tiny_tokenizer() + " --data " + dir.file("d.jsonl") + " --output " + dir.file("d.jsonl"));
  expect_refused(r, "eval", dir.file("d.jsonl"), dir.file("d.jsonl"), "--data", data);

  const std::string responses = "{\"response\": \"The answer is \\\\boxed{2}\", \"ground_truth\": \"2\"}\n";
  write_text(dir.file("v.jsonl"), responses);
  r = run("verify --input " + dir.file("v.jsonl") + " --output " + dir.file("v.jsonl"));
  expect_refused(r, "verify", dir.file("v.jsonl"), dir.file("v.jsonl"), "--input", responses);

  r = run("render --input " + dir.file("d.jsonl") + " --model.tokenizer=" + tiny_tokenizer() + " --output " +
          dir.file("d.jsonl"));
  expect_refused(r, "render", dir.file("d.jsonl"), dir.file("d.jsonl"), "--input", data);

  const std::string conf = read_text(ini);
  r = run("info --config " + ini + " --save " + ini);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(ini + ": the output (--save) is the input " + ini + " (--config)"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_text(ini), conf);
}

TEST(OutputSafetyCli, ImportAndExportRefuseTheirInputsAsOutput) {
  TempDir dir;
  fs::copy(fixture("tiny_tied"), dir.path() / "hf", fs::copy_options::recursive);
  const std::string weights = read_text(dir.file("hf/model.safetensors"));
  Result r = run("import-hf --hf-dir " + dir.file("hf") + " --output " + dir.file("hf/model.safetensors"));
  expect_refused(r, "import-hf", dir.file("hf/model.safetensors"), dir.file("hf/model.safetensors"), "--hf-dir",
                 weights);
  EXPECT_FALSE(fs::exists(dir.file("hf/model.safetensors.partial")));

  r = run("import-hf --hf-dir " + dir.file("hf") + " --output " + dir.file("c.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = read_text(dir.file("c.h5"));
  r = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("c.h5"));
  expect_refused(r, "export-hf", dir.file("c.h5"), dir.file("c.h5"), "--checkpoint", ckpt);
}

// "-" is standard output for the commands that write text; those whose
// output is an HDF5 file or a folder refuse it instead of creating a file
// called "-".
TEST(OutputSafetyCli, DashIsRefusedWhereTheOutputCannotBeAStream) {
  TempDir dir;
  const std::string in_dir = "cd " + dir.path().string() + " && " + dapo::test::dapo_binary();
  Result r = dapo::test::run_command(in_dir + "import-hf --hf-dir " + fixture("tiny_tied") + " --output -");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dapo import-hf: error: command line: --output -: the output is an HDF5 checkpoint, "
                          "written by seeking, which cannot go to standard output; name a path (./- for a file "
                          "called '-')"),
            std::string::npos)
      << r.output;
  r = dapo::test::run_command(in_dir + "import-hf --hf-dir " + fixture("tiny_tied") + " --output " + dir.file("c.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = dapo::test::run_command(in_dir + "export-hf --checkpoint " + dir.file("c.h5") + " --output -");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--output -: the output is a model folder of several files"), std::string::npos) << r.output;
  r = dapo::test::run_command(in_dir + "demo-data --out - --seed 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--out -: the output is a folder of three files"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.path() / "-")));
}

// A stale .partial symlink (left by anyone) is removed, and the file it
// points to is left alone; the output is written as usual.
TEST(OutputSafetyCli, PartialSymlinksAreNeverWrittenThrough) {
  TempDir dir;
  write_text(dir.file("victim.txt"), "precious\n");
  write_text(dir.file("p.jsonl"), "{\"prompt_ids\": [1, 2]}\n");
  fs::create_symlink(dir.file("victim.txt"), dir.path() / "o.jsonl.partial");
  Result r = run("generate --config " + write_config(dir) + " --model.path=" + fixture("tiny_tied") + " --input " +
                 dir.file("p.jsonl") + " --output " + dir.file("o.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(dapo::test::read_jsonl(dir.file("o.jsonl")).size(), 1u);
  EXPECT_EQ(read_text(dir.file("victim.txt")), "precious\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.path() / "o.jsonl.partial")));

  fs::create_symlink(dir.file("victim.txt"), dir.path() / "X.h5.partial");
  r = run("import-hf --hf-dir " + fixture("tiny_tied") + " --output " + dir.file("X.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(dir.file("victim.txt")), "precious\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.path() / "X.h5.partial")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir.path() / "X.h5")));
}

// export-hf onto a folder that holds a sharded model would leave the old
// shards and index beside the new model.safetensors: refused, nothing
// touched. An empty folder, or a new one, is written.
TEST(OutputSafetyCli, ExportRefusesANonEmptyFolder) {
  TempDir dir;
  const auto config = dapo::test::tiny_config(true);
  dapo::test::write_hf_dir(dir.path() / "sharded", dapo::test::tiny_config_json(true),
                           dapo::test::tiny_hf_tensors(config), 2);
  Result r = run("import-hf --hf-dir " + dir.file("sharded") + " --output " + dir.file("c.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string index = read_text(dir.file("sharded/model.safetensors.index.json"));
  const std::string cfg = read_text(dir.file("sharded/config.json"));
  r = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("sharded"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dapo export-hf: error: " + dir.file("sharded") +
                          ": the output folder is not empty (it holds config.json, model-00001-of-00002.safetensors, "
                          "model-00002-of-00002.safetensors, model.safetensors.index.json); export-hf writes into a "
                          "new or empty folder only: name a new folder, or empty this one"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("sharded/model.safetensors")));
  EXPECT_EQ(read_text(dir.file("sharded/model.safetensors.index.json")), index);
  EXPECT_EQ(read_text(dir.file("sharded/config.json")), cfg);

  fs::create_directory(dir.path() / "empty");
  r = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("empty"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("import-hf --hf-dir " + dir.file("empty") + " --output " + dir.file("back.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  // ... and a second export onto it is refused likewise.
  r = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("empty"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("it holds config.json, model.safetensors)"), std::string::npos) << r.output;
  r = run("export-hf --help");
  EXPECT_NE(r.output.find("non-empty one is refused)"), std::string::npos) << r.output;  // help lines wrap
}

}  // namespace
