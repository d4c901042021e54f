// The table of subcommands with their options. A subcommand whose work lands
// in a later issue still lists its options under --help, and says where its
// work lands instead of producing output it cannot produce yet.
#include "command.h"

namespace dapo::apps {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "run DAPO training (generate, verify, dynamic sampling, update)", true,
       [](po::options_description&, po::positional_options_description&) {}, run_train},
      {"sft", "supervised warm start on prompt/response JSONL", true,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("data", po::value<std::string>(), "prompt/response JSONL (default: data.train_files)");
       },
       run_sft},
      {"generate", "sample responses for prompts from a checkpoint", true,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("checkpoint", po::value<std::string>(), "checkpoint .h5 (default: model.path, .h5 or HF dir)")(
             "input", po::value<std::string>(), "prompts JSONL (prompt_ids, or prompt as text or chat messages)")(
             "output", po::value<std::string>(), "output JSONL (adds response_ids, response, finish_reason; with rollout.n > 1 one line per sample, "
             "with sample_index; '-': stdout)");
       },
       run_generate},
      {"eval", "avg@k and pass@k of a checkpoint on a dataset", true,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("checkpoint", po::value<std::string>(), "checkpoint .h5 or HF directory (default: model.path)")(
             "data", po::value<std::string>(), "evaluation prompts JSONL, comma-separated (default: data.val_files)")(
             "output", po::value<std::string>(), "write the metrics as one JSON object to this file ('-': stdout)");
       },
       run_eval},
      {"verify", "score responses against ground truth with the rule-based verifier (reward.verifier)", true,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("input", po::value<std::string>(), "JSONL with response and ground_truth ('-': stdin)")(
             "output", po::value<std::string>(), "JSONL with score, acc, pred added (default: stdout)")(
             "threads", po::value<int>()->default_value(0), "worker threads (0: all cores)");
       },
       run_verify},
      {"tokenize", "encode {\"text\"} or decode {\"ids\"} JSONL on stdin/stdout", false,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("tokenizer", po::value<std::string>(), "HF tokenizer.json")(
             "decode", po::bool_switch(), "ids -> text instead of text -> ids")(
             "skip-special-tokens", po::bool_switch(), "with --decode: leave special tokens out of the text");
       },
       run_tokenize},
      {"render", "the prompts of a JSONL file as the tokenizer gets them: model.chat_template applied, text and ids",
       true,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("input", po::value<std::string>(), "prompts JSONL (verl chat or text prompts, or problem; '-': stdin)")(
             "output", po::value<std::string>(), "JSONL with data_source, index, prompt_text, prompt_ids (default: stdout)");
       },
       run_render},
      {"import-hf", "convert an HF model directory into a dapo checkpoint", false,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("hf-dir", po::value<std::string>(), "directory with config.json and *.safetensors")(
             "output", po::value<std::string>(), "checkpoint .h5 to write");
       },
       run_import_hf},
      {"export-hf", "write a dapo checkpoint as an HF model directory", false,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("checkpoint", po::value<std::string>(), "checkpoint .h5")(
             "output", po::value<std::string>(),
             "directory for config.json and model.safetensors: a new or empty one (a non-empty one is refused)")(
             "dtype", po::value<std::string>()->default_value("f32"), "dtype of the safetensors: f32 or bf16");
       },
       run_export_hf},
      {"demo-data", "write the demo task's train/val/sft JSONL (seeded arithmetic word problems)", false,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("out", po::value<std::string>(), "directory for train.jsonl, val.jsonl, sft.jsonl")(
             "seed", po::value<std::string>(), "seed (integer); the same seed writes the same bytes")(
             "train", po::value<int64_t>()->default_value(2000), "training prompts")(
             "val", po::value<int64_t>()->default_value(200), "validation prompts")(
             "sft", po::value<int64_t>()->default_value(2000), "prompt/response pairs for the warm start")(
             "difficulty", po::value<int>()->default_value(3),
             "1 (a + b, one digit) .. 5 (3-4 numbers, + - *), 6 (5-7 numbers of 2-3 digits, + - *)")(
             "solution", po::value<std::string>()->default_value("compact"),
             "worked solutions: compact (a op b = c per operation) or columns (digit by digit, as on paper)")(
             "format", po::value<std::string>()->default_value("compact"),
             "compact (the problem alone) or dapo (DAPO-Math-17k's instruction around it)");
       },
       run_demo_data},
      {"inspect", "summarise an HDF5 rollout dump, or show samples of it", false,
       [](po::options_description& d, po::positional_options_description& p) {
         d.add_options()("dump", po::value<std::string>(), "rollout dump .h5 (positional)")(
             "show", po::value<int>()->default_value(0), "after the summary, print K samples in full")(
             "jsonl", po::bool_switch(), "instead, write every response as one JSON object per line");
         p.add("dump", 1);
       },
       run_inspect},
      {"info", "show the build, the rank grid and the resolved configuration (under mpirun)", true,
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("save", po::value<std::string>(), "also write the resolved configuration to this INI file")(
             "memory", po::bool_switch(), "print the per-GPU memory plan of `dapo train` with this configuration")(
             "gpu-gib", po::value<double>(), "with --memory: GiB of one GPU (default: this GPU's, else 80)")(
             "ranks", po::value<int64_t>(), "with --memory: plan for this many GPUs (dp = ranks / parallel.tp) "
             "instead of this launch's");
       },
       run_info},
  };
  return table;
}

}  // namespace dapo::apps
