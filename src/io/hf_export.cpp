// `dapo export-hf`: a checkpoint's /model tensors -> config.json +
// model.safetensors that HF transformers loads; rank 0 streams tensor by
// tensor.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dapo/core/bf16.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/io/tensor_digest.h"

namespace dapo::io {

namespace fs = std::filesystem;

ExportDtype parse_export_dtype(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "fp32") return ExportDtype::f32;
  if (name == "bf16" || name == "bfloat16") return ExportDtype::bf16;
  throw UserError(cat("command line: --dtype '", name, "' (expected f32 or bf16)"));
}

namespace {

// A folder that already holds files (an older export, a sharded HF model
// with its index) would mix with the new files into a model that loads
// wrongly or not at all: only a new or empty folder is written.
void refuse_used_folder(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st)) return;  // new: created below (or the create says why not)
  if (!fs::is_directory(st)) return;  // create_directories below names it
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) throw UserError(cat(dir.string(), ": cannot list the output folder: ", ec.message()));
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  std::string held;
  for (size_t i = 0; i < names.size() && i < 4; ++i) held += (i ? ", " : "") + names[i];
  if (names.size() > 4) held += cat(" and ", names.size() - 4, " more");
  throw UserError(cat(dir.string(), ": the output folder is not empty (it holds ", held,
                      "); export-hf writes into a new or empty folder only: name a new folder, or empty this one"));
}

// config.json and model.safetensors into the new folder `dir`. Each tensor
// read is checked against the digest the checkpoint stores, so a damaged
// checkpoint fails here rather than exporting wrong weights.
void write_model_files(const CheckpointReader& reader, const fs::path& dir, ExportDtype dtype) {
  model::Qwen2Config config = reader.info().model;
  config.torch_dtype = dtype == ExportDtype::bf16 ? "bfloat16" : "float32";
  write_output_file((dir / "config.json").string(), model::qwen2_config_to_json(config), "model configuration");

  const char* st_dtype = dtype == ExportDtype::bf16 ? "BF16" : "F32";
  std::vector<SafetensorsWriter::Header> headers;
  for (const auto& spec : reader.specs()) headers.push_back({spec.name, st_dtype, spec.shape});
  SafetensorsWriter writer((dir / "model.safetensors").string(), headers, {{"format", "pt"}});
  std::vector<float> f32;
  std::vector<bf16> half;
  for (const auto& spec : reader.specs()) {  // one dtype: the file's order is the specs' order
    int64_t n = 1;
    for (const int64_t d : spec.shape) n *= d;
    f32.resize(size_t(n));
    const Hyperslab whole = Hyperslab::whole(spec.shape);
    reader.read_model(spec.name, whole, f32.data());
    uint64_t stored = 0;
    if (reader.stored_digest(model_dataset(spec.name), &stored) && stored != slab_digest(spec.shape, whole, f32.data()))
      throw UserError(cat(reader.path(), ": tensor ", model_dataset(spec.name),
                          " does not match its stored digest (the file is damaged)"));
    if (dtype == ExportDtype::bf16) {
      half.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) half[size_t(i)] = to_bf16(f32[size_t(i)]);
      writer.write(spec.name, half.data());
    } else {
      writer.write(spec.name, f32.data());
    }
  }
  writer.finish();
}

// The export is written into a fresh sibling folder OUT.partial-<pid>
// (created exclusively) and renamed over `out` (new, or an empty folder)
// only when every file is written and synced: a failure half-way (a damaged
// checkpoint, a full disk) removes the temporary folder and leaves `out` as
// it was, never a config.json without its weights.
void write_model_dir(const CheckpointReader& reader, const fs::path& out, ExportDtype dtype) {
  refuse_used_folder(out);
  fs::path target = output_target(out.string());  // a symlink to an empty folder: that folder
  if (!target.has_filename()) target = target.parent_path();  // "out/"
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target, ec)) && !fs::is_directory(fs::symlink_status(target, ec)))
    throw UserError(cat(out.string(), ": cannot create the directory: it exists and is not a folder"));
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::vector<fs::path> created;  // missing ancestors, deepest first: removed again on failure
  for (fs::path p = parent; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    created.push_back(p);
    if (p == p.parent_path()) break;
  }
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    throw UserError(cat(out.string(), ": cannot create the directory: ", ec ? ec.message() : "not a folder"));
  const fs::path temp = parent / cat(target.filename().string(), ".partial-", long(::getpid()));
  if (::mkdir(temp.c_str(), 0777) != 0) {
    const int err = errno;
    for (const fs::path& p : created) fs::remove(p, ec);
    throw UserError(cat(temp.string(), ": cannot create the temporary folder of the export: ", std::strerror(err)));
  }
  try {
    write_model_files(reader, temp, dtype);
    sync_path(temp.string(), true);
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      throw UserError(cat(out.string(), ": cannot move the export into place from ", temp.string(), ": ",
                          std::strerror(err),
                          err == ENOTEMPTY || err == EEXIST ? " (the folder was written to meanwhile)" : ""));
    }
    sync_path(parent.string(), true);
  } catch (...) {
    fs::remove_all(temp, ec);
    for (const fs::path& p : created) fs::remove(p, ec);  // only if still empty
    throw;
  }
}

}  // namespace

ExportSummary export_hf(const std::string& checkpoint, const std::string& out_dir, ExportDtype dtype,
                        const parallel::Comm& comm) {
  CheckpointReader reader(checkpoint, comm);
  ExportSummary summary;
  summary.config = reader.info().model;
  for (const auto& spec : reader.specs()) {
    int64_t n = 1;
    for (const int64_t d : spec.shape) n *= d;
    summary.parameters += n;
  }
  summary.tensors = int64_t(reader.specs().size());
  std::string error;
  if (comm.rank() == 0) {
    try {
      write_model_dir(reader, out_dir, dtype);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  agree_on_error(comm, error);
  reader.close();
  DAPO_INFO("export-hf: ", summary.tensors, " tensors, ", summary.parameters, " parameters from ", checkpoint, " -> ",
            out_dir, " (", dtype == ExportDtype::bf16 ? "bf16" : "f32", ")");
  return summary;
}

}  // namespace dapo::io
