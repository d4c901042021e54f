// import-hf / export-hf as library calls: tiny HF directories (single file
// and sharded, bf16 + f32 + f16) import exactly; import -> export -> import
// is bit-identical; exports carry what transformers needs; bad inputs fail
// with the file and tensor named and leave no output behind; NaN weights
// import with a warning and are refused by a load.
#include "dapo/io/hf_convert.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "dapo/io/checkpoint.h"
#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// Every /model tensor of a checkpoint, full.
std::map<std::string, std::vector<float>> load_all(const std::string& path, const parallel::Comm& comm) {
  std::map<std::string, std::vector<float>> out;
  load_model_checkpoint(path, comm, 0, 1, [&](const model::ParamSpec& spec, const model::SliceSpec&) {
    int64_t n = 1;
    for (const int64_t d : spec.shape) n *= d;
    out[spec.name].assign(size_t(n), 0.f);
    return out[spec.name].data();
  });
  return out;
}

TEST(ImportHf, SingleAndShardedDirectoriesImportExactly) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const auto config = test::tiny_config(false);
  // Mixed dtypes as real saves have them, one tensor in f16.
  const auto tensors = test::tiny_hf_tensors(config, "", {{"model.layers.1.mlp.up_proj.weight", "F32"}});
  for (const int shards : {1, 3}) {
    const fs::path hf = dir.path() / ("hf" + std::to_string(shards));
    test::write_hf_dir(hf, test::tiny_config_json(false), tensors, shards);
    const std::string out = dir.file("c" + std::to_string(shards) + ".h5");
    const ImportSummary s = import_hf(hf.string(), out, world);
    EXPECT_FALSE(fs::exists(out + ".partial"));
    const auto specs = model::qwen2_param_specs(config);
    EXPECT_EQ(s.tensors, int64_t(specs.size()));
    EXPECT_EQ(s.ignored, (std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"}));
    int64_t params = 0;
    const auto got = load_all(out, world);
    for (const auto& spec : specs) {
      const auto want = test::full_tensor(spec);  // bf16-exact values: every dtype holds them exactly
      EXPECT_EQ(got.at(spec.name), want) << spec.name;
      params += int64_t(want.size());
    }
    EXPECT_EQ(s.parameters, params);
    const CheckpointReader r(out, world);
    EXPECT_EQ(r.info().step, 0);
    EXPECT_EQ(r.info().config_ini, "");
    EXPECT_EQ(r.info().tp, 1);
    EXPECT_EQ(r.info().model.vocab_size, 32);
  }
}

TEST(ImportHf, F16WeightsConvertExactly) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const auto config = test::tiny_config(true);
  auto tensors = test::tiny_hf_tensors(config);
  // Replace the embedding with f16 bits whose values we know.
  for (auto& t : tensors)
    if (t.name == "model.embed_tokens.weight") {
      t.dtype = "F16";
      t.bytes.assign(size_t(32 * 16 * 2), 0);
      for (size_t i = 0; i < 32 * 16; ++i) {
        const uint16_t h = uint16_t(0x3c00 + (i % 1024));  // 1 + k/1024
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
      }
    }
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(true), tensors);
  import_hf((dir.path() / "hf").string(), dir.file("c.h5"), world);
  const auto got = load_all(dir.file("c.h5"), world);
  const auto& e = got.at("model.embed_tokens.weight");
  for (size_t i = 0; i < e.size(); ++i) ASSERT_EQ(e[i], 1.0f + float(i % 1024) / 1024.0f) << i;
}

TEST(ExportHf, RoundTripIsBitIdenticalAndLoadable) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  for (const bool tied : {false, true}) {
    const std::string tag = tied ? "tied" : "untied";
    const auto config = test::tiny_config(tied);
    // A tied HF save may carry lm_head.weight anyway: ignored.
    auto tensors = test::tiny_hf_tensors(config);
    if (tied) tensors.push_back(test::make_hf_tensor("lm_head.weight", "BF16", {32, 16}));
    const fs::path hf = dir.path() / ("hf_" + tag);
    test::write_hf_dir(hf, test::tiny_config_json(tied), tensors);
    const std::string c1 = dir.file(tag + "1.h5"), c2 = dir.file(tag + "2.h5");
    const fs::path exported = dir.path() / ("out_" + tag) / "nested";
    import_hf(hf.string(), c1, world);
    const ExportSummary es = export_hf(c1, exported.string(), ExportDtype::f32, world);
    EXPECT_EQ(es.tensors, int64_t(model::qwen2_param_specs(config).size()));
    import_hf(exported.string(), c2, world);
    const auto a = load_all(c1, world), b = load_all(c2, world);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, values] : a) {
      ASSERT_EQ(values.size(), b.at(name).size());
      EXPECT_EQ(std::memcmp(values.data(), b.at(name).data(), values.size() * 4), 0) << name;
    }
    // What transformers reads: config.json of a Qwen2ForCausalLM with the
    // dtype, safetensors with format "pt", HF names, no lm_head when tied.
    const auto cfg = nlohmann::json::parse(test::read_text((exported / "config.json").string()));
    EXPECT_EQ(cfg["model_type"], "qwen2");
    EXPECT_EQ(cfg["architectures"][0], "Qwen2ForCausalLM");
    EXPECT_EQ(cfg["torch_dtype"], "float32");
    EXPECT_EQ(cfg["tie_word_embeddings"], tied);
    const SafetensorsFile st((exported / "model.safetensors").string());
    EXPECT_EQ(st.metadata().at("format"), "pt");
    EXPECT_EQ(st.contains("lm_head.weight"), !tied);
    EXPECT_EQ(st.info("model.layers.1.mlp.down_proj.weight").shape, (std::vector<int64_t>{16, 24}));
    EXPECT_EQ(st.info("model.norm.weight").dtype, "F32");
    EXPECT_FALSE(fs::exists(exported / "model.safetensors.partial"));
    EXPECT_FALSE(fs::exists(exported / "config.json.partial"));
  }
}

TEST(ExportHf, Bf16RoundsToNearestEven) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  CheckpointInfo info;
  info.model = test::tiny_config(true);
  const std::string ckpt = dir.file("c.h5");
  std::map<std::string, std::vector<float>> full;
  save_model_checkpoint(ckpt, world, ShardPlace{}, info, [&](const model::ParamSpec& spec, const model::SliceSpec&) {
    return (full[spec.name] = test::full_tensor(spec, true)).data();  // not bf16-exact
  });
  export_hf(ckpt, dir.file("bf16"), ExportDtype::bf16, world);
  const auto cfg = nlohmann::json::parse(test::read_text(dir.file("bf16/config.json")));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  const SafetensorsFile st(dir.file("bf16/model.safetensors"));
  int64_t inexact = 0;
  for (const auto& [name, values] : full) {
    EXPECT_EQ(st.info(name).dtype, "BF16");
    std::vector<float> got(values.size());
    st.read_f32(name, got.data());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(got[i], to_f32(to_bf16(values[i]))) << name << "[" << i << "]";
      inexact += got[i] != values[i];
    }
  }
  EXPECT_GT(inexact, 0) << "the test data must need rounding";
  EXPECT_EQ(parse_export_dtype("bfloat16"), ExportDtype::bf16);
  EXPECT_EQ(parse_export_dtype("f32"), ExportDtype::f32);
  EXPECT_EQ(error_of([] { parse_export_dtype("fp8"); }), "command line: --dtype 'fp8' (expected f32 or bf16)");
}

TEST(ImportHf, BadInputsNameTheFileAndTensorAndWriteNothing) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const auto config = test::tiny_config(false);
  const std::string out = dir.file("out.h5");
  auto import_error = [&](const std::string& name, const std::string& config_json, const std::vector<test::HfTensor>& t,
                          int shards = 1) {
    const fs::path hf = dir.path() / name;
    test::write_hf_dir(hf, config_json, t, shards);
    const std::string err = error_of([&] { import_hf(hf.string(), out, world); });
    EXPECT_FALSE(fs::exists(out)) << name;
    EXPECT_FALSE(fs::exists(out + ".partial")) << name;
    return err;
  };
  const std::string k = "model.layers.1.self_attn.k_proj.weight";
  const std::string json = test::tiny_config_json(false);
  EXPECT_EQ(import_error("missing", json, test::tiny_hf_tensors(config, k)),
            (dir.path() / "missing" / "model.safetensors").string() + ": missing tensor '" + k + "' (" +
                (dir.path() / "missing").string() + "/config.json needs it)");
  EXPECT_EQ(import_error("missing_sharded", json, test::tiny_hf_tensors(config, "lm_head.weight"), 2),
            (dir.path() / "missing_sharded" / "model.safetensors.index.json").string() +
                ": missing tensor 'lm_head.weight' (" + (dir.path() / "missing_sharded").string() + "/config.json needs it)");
  EXPECT_EQ(import_error("shape", json, test::tiny_hf_tensors(config, "", {}, {{k, {4, 16}}})),
            (dir.path() / "shape" / "model.safetensors").string() + ": tensor '" + k + "' has shape (4, 16) but " +
                (dir.path() / "shape").string() + "/config.json needs (8, 16)");
  EXPECT_EQ(import_error("dtype", json, test::tiny_hf_tensors(config, "", {{k, "I32"}})),
            (dir.path() / "dtype" / "model.safetensors").string() + ": tensor '" + k +
                "' has dtype I32 (dapo reads F32, BF16, F16)");
  EXPECT_NE(import_error("llama", R"({"model_type": "llama", "hidden_size": 16})", test::tiny_hf_tensors(config))
                .find((dir.path() / "llama" / "config.json").string() + ": model_type 'llama' is not supported"),
            std::string::npos);
  // Files missing altogether.
  fs::create_directories(dir.path() / "empty");
  EXPECT_EQ(error_of([&] { import_hf((dir.path() / "empty").string(), out, world); }),
            (dir.path() / "empty" / "config.json").string() + ": cannot open the model configuration");
  test::write_text((dir.path() / "empty" / "config.json").string(), json);
  EXPECT_EQ(error_of([&] { import_hf((dir.path() / "empty").string(), out, world); }),
            (dir.path() / "empty").string() + ": has neither model.safetensors nor model.safetensors.index.json");
  EXPECT_EQ(error_of([&] { import_hf(dir.file("nope"), out, world); }), dir.file("nope") + ": not a directory");
  // A truncated weights file.
  const fs::path cut = dir.path() / "cut";
  test::write_hf_dir(cut, json, test::tiny_hf_tensors(config));
  fs::resize_file(cut / "model.safetensors", fs::file_size(cut / "model.safetensors") - 10);
  EXPECT_NE(error_of([&] { import_hf(cut.string(), out, world); })
                .find((cut / "model.safetensors").string() + ": truncated: tensor '"),
            std::string::npos);
  // The output's directory must exist.
  test::write_hf_dir(dir.path() / "good", json, test::tiny_hf_tensors(config));
  EXPECT_EQ(error_of([&] { import_hf((dir.path() / "good").string(), dir.file("no/such/c.h5"), world); }),
            dir.file("no/such/c.h5") + ": directory " + dir.file("no/such") + " does not exist");
  // A layer count the tensors cannot back is refused before anything is
  // sized by it (2e9 layers would exhaust memory in the parameter list).
  std::string huge = json;
  huge.replace(huge.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 2000000000");
  EXPECT_EQ(import_error("huge", huge, test::tiny_hf_tensors(config)),
            (dir.path() / "huge" / "config.json").string() +
                ": num_hidden_layers = 2000000000 but there are no tensors of layer 2 (model.layers.N.*; 28 tensors "
                "in all): a damaged or mismatched model configuration");
  // An output that is no regular file is refused, not replaced by a rename.
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { import_hf((dir.path() / "good").string(), dir.file("fifo"), world); }),
            dir.file("fifo") + ": not a regular file (a device, FIFO or socket): a checkpoint is an HDF5 file, "
                               "written beside it and renamed into place");
  struct stat st {};
  ASSERT_EQ(stat(dir.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// A config.json that says fewer layers than the weights hold, or a tensor
// that is no part of a Qwen2 model, would leave weights out: refused, with
// the file, the tensors and the config key named. What Qwen2 saves carry
// besides the parameters (inv_freq buffers, a tied model's lm_head) still
// imports.
TEST(ImportHf, WeightsTheModelWouldLeaveOutAreRefused) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const std::string out = dir.file("out.h5");
  auto import_error = [&](const std::string& name, const std::string& config_json, const std::vector<test::HfTensor>& t,
                          int shards = 1) {
    const fs::path hf = dir.path() / name;
    test::write_hf_dir(hf, config_json, t, shards);
    const std::string err = error_of([&] { import_hf(hf.string(), out, world); });
    EXPECT_FALSE(fs::exists(out)) << name;
    EXPECT_FALSE(fs::exists(out + ".partial")) << name;
    return err;
  };
  // Weights of 4 layers, a config.json of 2.
  auto four = test::tiny_config(false);
  four.num_hidden_layers = 4;
  std::string json = test::tiny_config_json(false);
  EXPECT_EQ(import_error("layers", json, test::tiny_hf_tensors(four), 2),
            (dir.path() / "layers" / "config.json").string() + ": num_hidden_layers = 2 but " +
                (dir.path() / "layers" / "model.safetensors.index.json").string() +
                " holds layers up to 3 (24 tensors of layers >= 2: 'model.layers.2.input_layernorm.weight', "
                "'model.layers.2.mlp.down_proj.weight', 'model.layers.2.mlp.gate_proj.weight' and 21 more): a damaged "
                "or mismatched model configuration, refused rather than leaving those layers out: set "
                "num_hidden_layers to the model's layer count (4 if every layer is there)");
  // Unknown tensors beside a complete model.
  const auto config = test::tiny_config(false);
  auto tensors = test::tiny_hf_tensors(config);
  tensors.push_back(test::make_hf_tensor("model.layers.0.mlp.up_proj.weight_scale", "F32", {24}));
  EXPECT_EQ(import_error("unknown1", json, tensors),
            (dir.path() / "unknown1" / "model.safetensors").string() +
                ": 1 tensor is not part of the model of " + (dir.path() / "unknown1").string() +
                "/config.json ('model.layers.0.mlp.up_proj.weight_scale'): dapo would leave them out; a model of "
                "another architecture, or weights dapo does not know (adapters, quantization scales), are refused "
                "rather than dropped");
  for (const char* extra : {"a.weight", "b.weight", "c.weight", "score.weight"})
    tensors.push_back(test::make_hf_tensor(extra, "F32", {16}));
  EXPECT_NE(import_error("unknown5", json, tensors)
                .find(": 5 tensors are not part of the model of " + (dir.path() / "unknown5").string() +
                      "/config.json ('a.weight', 'b.weight', 'c.weight' and 2 more): dapo would leave them out"),
            std::string::npos);
  // An untied config with a tied model's weights lacks lm_head (as before);
  // a tied config ignores a saved lm_head, and per-layer and model-wide
  // inv_freq buffers.
  const auto tied = test::tiny_config(true);
  auto tied_tensors = test::tiny_hf_tensors(tied);
  tied_tensors.push_back(test::make_hf_tensor("lm_head.weight", "BF16", {32, 16}));
  tied_tensors.push_back(test::make_hf_tensor("model.layers.1.self_attn.rotary_emb.inv_freq", "F32", {2}));
  tied_tensors.push_back(test::make_hf_tensor("model.rotary_emb.inv_freq", "F32", {2}));
  test::write_hf_dir(dir.path() / "tied", test::tiny_config_json(true), tied_tensors, 2);
  const ImportSummary s = import_hf((dir.path() / "tied").string(), out, world);
  std::vector<std::string> ignored = s.ignored;
  std::sort(ignored.begin(), ignored.end());
  EXPECT_EQ(ignored, (std::vector<std::string>{"lm_head.weight", "model.layers.0.self_attn.rotary_emb.inv_freq",
                                               "model.layers.1.self_attn.rotary_emb.inv_freq",
                                               "model.rotary_emb.inv_freq"}));
  // An inv_freq of a layer the config does not have is a layer too many.
  fs::remove(out);
  auto stray = test::tiny_hf_tensors(config);
  stray.push_back(test::make_hf_tensor("model.layers.2.self_attn.rotary_emb.inv_freq", "F32", {2}));
  EXPECT_NE(import_error("stray", json, stray).find("num_hidden_layers = 2 but "), std::string::npos);
}

// NaN or Inf in the weights: import-hf converts them with a warning naming
// tensor and file; loading the checkpoint to run it refuses it.
TEST(ImportHf, NonFiniteWeightsWarnAtImportAndFailTheLoad) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const auto config = test::tiny_config(false);
  std::vector<test::HfTensor> tensors = test::tiny_hf_tensors(config);
  for (test::HfTensor& t : tensors)
    if (t.name == "model.norm.weight") {
      ASSERT_EQ(t.dtype, "F32");
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(t.bytes.data() + 4 * 5, &nan, 4);
    }
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(false), tensors);
  testing::internal::CaptureStderr();
  const ImportSummary s = import_hf((dir.path() / "hf").string(), dir.file("c.h5"), world);
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.non_finite, std::vector<std::string>{"model.norm.weight"});
  EXPECT_NE(warned.find("import-hf: non-finite values in tensor model.norm.weight of " +
                        (dir.path() / "hf" / "model.safetensors").string() + " (1 NaN or Inf); " + dir.file("c.h5") +
                        " is written, but generate, train and eval refuse to load it"),
            std::string::npos)
      << warned;
  std::vector<float> buf;
  EXPECT_EQ(error_of([&] {
              load_model_checkpoint(dir.file("c.h5"), world, 0, 1, [&](const model::ParamSpec&, const model::SliceSpec& sl) {
                int64_t n = 1;
                for (const int64_t d : sl.local_shape) n *= d;
                buf.resize(size_t(n));
                return buf.data();
              });
            }),
            "non-finite values in tensor /model/model.norm.weight of " + dir.file("c.h5") +
                " (1 NaN or Inf of 16 values read): the model cannot run; use an earlier checkpoint or re-import the "
                "weights");
}

TEST(ExportHf, BadCheckpointsAndOutputs) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  test::write_text(dir.file("x.h5"), "definitely not HDF5 data in this file\n");
  EXPECT_EQ(error_of([&] { export_hf(dir.file("x.h5"), dir.file("out"), ExportDtype::f32, world); }),
            dir.file("x.h5") + ": not an HDF5 file");
  EXPECT_FALSE(fs::exists(dir.file("out")));
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(true), test::tiny_hf_tensors(test::tiny_config(true)));
  import_hf((dir.path() / "hf").string(), dir.file("c.h5"), world);
  test::write_text(dir.file("file"), "a file where the output directory should go");
  EXPECT_NE(error_of([&] { export_hf(dir.file("c.h5"), dir.file("file"), ExportDtype::f32, world); })
                .find(dir.file("file") + ": cannot create the directory"),
            std::string::npos);
}

// A damaged checkpoint fails the export half-way: nothing of it is left,
// neither OUT/config.json without weights nor the temporary folder, and an
// empty OUT folder stays as it was. A good export over an empty folder, and
// into a folder under new parents, then succeeds.
TEST(ExportHf, AFailedExportLeavesNothingBehind) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const auto config = test::tiny_config(false);
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(false), test::tiny_hf_tensors(config));
  import_hf((dir.path() / "hf").string(), dir.file("good.h5"), world);
  // One value changed through HDF5 in the last tensor: config.json and most
  // tensors are written before the export notices.
  fs::copy_file(dir.file("good.h5"), dir.file("edited.h5"));
  {
    H5File f = H5File::open(dir.file("edited.h5"), world, H5Access::read_write);
    const float x = 12345.0f;
    f.write(model_dataset("lm_head.weight"), Hyperslab{{31, 15}, {1, 1}}, &x);
  }
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> before = entries();
  EXPECT_EQ(error_of([&] { export_hf(dir.file("edited.h5"), dir.file("out"), ExportDtype::f32, world); }),
            dir.file("edited.h5") + ": tensor /model/lm_head.weight does not match its stored digest (the file is "
                                    "damaged)");
  EXPECT_EQ(entries(), before);  // no out, no out.partial-PID
  EXPECT_EQ(error_of([&] { export_hf(dir.file("edited.h5"), dir.file("new/parents/out"), ExportDtype::bf16, world); }),
            dir.file("edited.h5") + ": tensor /model/lm_head.weight does not match its stored digest (the file is "
                                    "damaged)");
  EXPECT_EQ(entries(), before);  // the parents made for it are gone too
  fs::create_directory(dir.path() / "empty");
  const std::vector<std::string> with_empty = entries();
  EXPECT_NE(error_of([&] { export_hf(dir.file("edited.h5"), dir.file("empty"), ExportDtype::f32, world); }), "");
  EXPECT_EQ(entries(), with_empty);
  EXPECT_TRUE(fs::is_empty(dir.path() / "empty"));
  // A stale temporary folder of the same name is never written into.
  const std::string stale = dir.file("empty.partial-" + std::to_string(::getpid()));
  fs::create_directory(stale);
  test::write_text(stale + "/keep", "x");
  EXPECT_EQ(error_of([&] { export_hf(dir.file("good.h5"), dir.file("empty"), ExportDtype::f32, world); }),
            stale + ": cannot create the temporary folder of the export: File exists");
  EXPECT_EQ(test::read_text(stale + "/keep"), "x");
  fs::remove_all(stale);
  export_hf(dir.file("good.h5"), dir.file("empty"), ExportDtype::f32, world);
  export_hf(dir.file("good.h5"), dir.file("new/parents/out/"), ExportDtype::f32, world);
  for (const std::string out : {"empty", "new/parents/out"}) {
    EXPECT_TRUE(fs::exists(dir.file(out + "/config.json"))) << out;
    EXPECT_EQ(SafetensorsFile(dir.file(out + "/model.safetensors")).info("lm_head.weight").shape,
              (std::vector<int64_t>{32, 16}));
  }
  std::vector<std::string> after = with_empty;
  after.push_back("new");
  std::sort(after.begin(), after.end());
  EXPECT_EQ(entries(), after);
}

// An existing folder must be empty: an older sharded model there would
// survive beside the new files (its index wins when loaded).
TEST(ExportHf, ANonEmptyFolderIsRefusedAndLeftAlone) {
  TempDir dir;
  const parallel::Comm world = parallel::Comm::world();
  const auto config = test::tiny_config(true);
  test::write_hf_dir(dir.path() / "hf", test::tiny_config_json(true), test::tiny_hf_tensors(config), 2);
  import_hf((dir.path() / "hf").string(), dir.file("c.h5"), world);
  EXPECT_EQ(error_of([&] { export_hf(dir.file("c.h5"), dir.file("hf"), ExportDtype::f32, world); }),
            dir.file("hf") + ": the output folder is not empty (it holds config.json, model-00001-of-00002.safetensors, "
                             "model-00002-of-00002.safetensors, model.safetensors.index.json); export-hf writes into a "
                             "new or empty folder only: name a new folder, or empty this one");
  EXPECT_FALSE(fs::exists(dir.file("hf/model.safetensors")));
  fs::create_directory(dir.path() / "empty");
  export_hf(dir.file("c.h5"), dir.file("empty"), ExportDtype::f32, world);
  EXPECT_TRUE(fs::exists(dir.file("empty/model.safetensors")));
  fs::create_directory(dir.path() / "many");
  for (int i = 0; i < 5; ++i) test::write_text(dir.file("many/f" + std::to_string(i)), "x");
  EXPECT_NE(error_of([&] { export_hf(dir.file("c.h5"), dir.file("many"), ExportDtype::f32, world); })
                .find("(it holds f0, f1, f2, f3 and 1 more)"),
            std::string::npos);
}

}  // namespace
}  // namespace dapo::io
