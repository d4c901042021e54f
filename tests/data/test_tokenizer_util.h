// Shared by the tokenizer tests: the tiny hand-made tokenizer.json, variants
// of it written to temporary files, and the error message of a failed load.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "dapo/core/error.h"
#include "dapo/data/tokenizer.h"

namespace dapo::data::testing {

inline std::string tiny_path() { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json"; }

inline nlohmann::json tiny_json() {
  std::ifstream in(tiny_path());
  EXPECT_TRUE(in.good()) << tiny_path();
  return nlohmann::json::parse(in);
}

// A private temporary file, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& name, const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() /
             ("dapo_tok_" + std::to_string(::getpid()) + "_" + name))
                .string();
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The UserError message of loading `doc` from a file named `name`, or "".
inline std::string load_error(const nlohmann::json& doc, const std::string& name = "bad_tokenizer.json") {
  TempFile file(name, doc.dump());
  try {
    Tokenizer::load(file.path());
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

inline Tokenizer load_json(const nlohmann::json& doc) { return Tokenizer::from_json(doc.dump(), "variant.json"); }

}  // namespace dapo::data::testing
