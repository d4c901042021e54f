// `dapo import-hf` and `dapo export-hf` as users run them: a tiny HF
// directory in, a checkpoint, an HF directory out with the same weights;
// exit codes and error lines for bad command lines and bad inputs; the same
// under mpirun with two ranks.
#include <gtest/gtest.h>

#include "apps/cli_test_util.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "io/io_test_util.h"

namespace {

namespace fs = std::filesystem;
using dapo::test::TempDir;

using Result = dapo::test::CliResult;

Result run_command(const std::string& cmd) {
  return dapo::test::run_shell(cmd + " 2>&1");
}

Result run(const std::string& args) { return run_command(std::string(DAPO_BINARY_DIR) + "/dapo " + args); }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The exported model.safetensors holds exactly the HF directory's values.
void expect_same_weights(const dapo::model::Qwen2Config& config, const std::string& exported, const char* dtype) {
  const dapo::io::SafetensorsFile st(exported);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  for (const auto& spec : dapo::model::qwen2_param_specs(config)) {
    ASSERT_TRUE(st.contains(spec.name)) << spec.name;
    EXPECT_EQ(st.info(spec.name).dtype, dtype);
    std::vector<float> got(dapo::test::full_tensor(spec).size());
    st.read_f32(spec.name, got.data());
    EXPECT_EQ(got, dapo::test::full_tensor(spec)) << spec.name;
  }
}

TEST(HfCli, ImportThenExportGivesTheSameWeights) {
  TempDir dir;
  const auto config = dapo::test::tiny_config(false);
  dapo::test::write_hf_dir(dir.path() / "hf", dapo::test::tiny_config_json(false), dapo::test::tiny_hf_tensors(config), 2);
  const Result imp = run("import-hf --hf-dir " + dir.file("hf") + " --output " + dir.file("c.h5"));
  ASSERT_EQ(imp.code, 0) << imp.output;
  EXPECT_NE(imp.output.find("import-hf: 27 tensors, 5008 parameters"), std::string::npos) << imp.output;
  const Result f32 = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("out32"));
  ASSERT_EQ(f32.code, 0) << f32.output;
  expect_same_weights(config, dir.file("out32/model.safetensors"), "F32");
  // The values are bf16-exact, so a bf16 export loses nothing either.
  const Result b16 = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("out16") + " --dtype bf16");
  ASSERT_EQ(b16.code, 0) << b16.output;
  expect_same_weights(config, dir.file("out16/model.safetensors"), "BF16");
  const auto cfg = dapo::model::load_qwen2_config(dir.file("out16/config.json"));
  EXPECT_EQ(cfg.torch_dtype, "bfloat16");
  EXPECT_EQ(dapo::model::qwen2_config_to_json(cfg), dapo::model::qwen2_config_to_json([&] {
              auto c = config;
              c.torch_dtype = "bfloat16";
              return c;
            }()));
}

// transformers' own Qwen3 saves (tests/fixtures/model, q/k norms, a head
// dim of its own, one with q/k/v/o biases and tied embeddings): import and
// f32 export give back every tensor HF wrote, bit for bit, under the same
// names, and a config.json that parses to the same model.
TEST(HfCli, Qwen3DirectoriesOfTransformersRoundTripExactly) {
  for (const std::string name : {"qwen3_untied", "qwen3_tied_bias"}) {
    const std::string hf = std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/model/" + name;
    if (!fs::exists(hf + "/model.safetensors")) GTEST_SKIP() << hf << " is absent";
    TempDir dir;
    const Result imp = run("import-hf --hf-dir " + hf + " --output " + dir.file("c.h5"));
    ASSERT_EQ(imp.code, 0) << imp.output;
    const Result exp = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("out"));
    ASSERT_EQ(exp.code, 0) << exp.output;
    const dapo::io::SafetensorsFile want(hf + "/model.safetensors"), got(dir.file("out/model.safetensors"));
    EXPECT_EQ(got.names().size(), want.names().size()) << name;
    for (const std::string& t : want.names()) {
      ASSERT_TRUE(got.contains(t)) << name << ": " << t;
      EXPECT_EQ(got.info(t).shape, want.info(t).shape) << t;
      std::vector<float> a(size_t(want.info(t).numel())), b(a.size());
      want.read_f32(t, a.data());
      got.read_f32(t, b.data());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name << ": " << t;
    }
    const auto in = dapo::model::load_qwen2_config(hf + "/config.json");
    auto out = dapo::model::load_qwen2_config(dir.file("out/config.json"));
    EXPECT_EQ(out.model_type, dapo::model::ModelType::qwen3);
    out.torch_dtype = in.torch_dtype;
    EXPECT_EQ(dapo::model::qwen2_config_to_json(out), dapo::model::qwen2_config_to_json(in)) << name;
  }
}

TEST(HfCli, BadCommandLinesAndInputsExitWithTwo) {
  TempDir dir;
  Result r = run("import-hf --hf-dir " + dir.file("hf"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo import-hf: error: command line: dapo import-hf needs --hf-dir D and --output C.h5"),
            std::string::npos)
      << r.output;
  r = run("export-hf --output " + dir.file("o"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo export-hf needs --checkpoint C.h5 and --output D"), std::string::npos) << r.output;
  r = run("export-hf --checkpoint c.h5 --output o --dtype fp8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--dtype 'fp8' (expected f32 or bf16)"), std::string::npos) << r.output;

  const auto config = dapo::test::tiny_config(false);
  dapo::test::write_hf_dir(dir.path() / "hf", dapo::test::tiny_config_json(false),
                           dapo::test::tiny_hf_tensors(config, "model.norm.weight"));
  r = run("import-hf --hf-dir " + dir.file("hf") + " --output " + dir.file("c.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo import-hf: error: " + dir.file("hf/model.safetensors") +
                          ": missing tensor 'model.norm.weight'"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("c.h5")));
  // A config.json with fewer layers than the weights: refused, not cut.
  auto three = config;
  three.num_hidden_layers = 3;
  dapo::test::write_hf_dir(dir.path() / "hf3", dapo::test::tiny_config_json(false), dapo::test::tiny_hf_tensors(three));
  r = run("import-hf --hf-dir " + dir.file("hf3") + " --output " + dir.file("c.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo import-hf: error: " + dir.file("hf3/config.json") + ": num_hidden_layers = 2 but " +
                          dir.file("hf3/model.safetensors") + " holds layers up to 2 (12 tensors of layers >= 2: "),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("c.h5")));
  dapo::test::write_text(dir.file("c.h5"), "not a checkpoint, only some text in a file\n");
  r = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("out"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo export-hf: error: " + dir.file("c.h5") + ": not an HDF5 file"), std::string::npos)
      << r.output;
}

// Two ranks share the import; an error is reported once, and every rank
// exits with 2 (no MPI_Abort needed: both ranks raised it).
TEST(HfCli, ImportUnderMpirun) {
  TempDir dir;
  const auto config = dapo::test::tiny_config(true);
  dapo::test::write_hf_dir(dir.path() / "hf", dapo::test::tiny_config_json(true), dapo::test::tiny_hf_tensors(config));
  const std::string mpirun = "mpirun -np 2 --oversubscribe " + std::string(DAPO_BINARY_DIR) + "/dapo ";
  Result r = run_command(mpirun + "import-hf --hf-dir " + dir.file("hf") + " --output " + dir.file("c.h5"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "import-hf: 26 tensors"), 1u) << r.output;
  r = run("export-hf --checkpoint " + dir.file("c.h5") + " --output " + dir.file("out"));
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_weights(config, dir.file("out/model.safetensors"), "F32");
  r = run_command(mpirun + "import-hf --hf-dir " + dir.file("nothing") + " --output " + dir.file("d.h5"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count(r.output, "dapo import-hf: error: " + dir.file("nothing") + ": not a directory"), 1u) << r.output;
}

}  // namespace
