// The GPU op harness's coverage, checked where there is no GPU (CI): every
// public ops:: function (include/dapo/ops/*.h) that has a CUDA backend (a
// declaration of the same name directly in namespace dapo::ops::cuda:
// cuda/cuda_ops.h, with the src/ops/backend_ops.inc it includes) is listed
// in tests/gpu/backend_ops_coverage.h, either
// as compared with the CPU by the harness (kHarnessOps, whose names the
// harness's case files must name) or as tested elsewhere (a test that
// exists in the file it names). So an op added with a CUDA backend but no
// harness case fails here; test_gpu's BackendOpsTable.CasesCoverTheList
// checks, on a GPU machine, that the table's cases run exactly kHarnessOps.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/backend_ops_coverage.h"

namespace dapo::test::backend_ops {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The source without comments, string and character literals (their
// contents blanked) and preprocessor lines.
std::string strip(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  bool line_start = true;
  for (size_t i = 0; i < src.size();) {
    const char c = src[i];
    if (line_start && c == '#') {  // a directive, continued lines included
      while (i < src.size() && !(src[i] == '\n' && src[i - 1] != '\\')) ++i;
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
      while (i < src.size() && src[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
      const size_t end = src.find("*/", i + 2);
      i = end == std::string::npos ? src.size() : end + 2;
      out += ' ';
      continue;
    }
    if (c == '"' || c == '\'') {
      out += c;
      for (++i; i < src.size() && src[i] != c; ++i)
        if (src[i] == '\\') ++i;
      out += c;
      ++i;
      continue;
    }
    if (c == '\n') line_start = true;
    else if (!std::isspace(static_cast<unsigned char>(c))) line_start = false;
    out += c;
    ++i;
  }
  return out;
}

// The names of the functions declared (or defined) directly in namespace
// `ns` (e.g. "dapo::ops"): not in a nested namespace, class or function.
std::set<std::string> functions_in(const std::string& source, const std::string& ns) {
  const std::string s = strip(source);
  std::set<std::string> names;
  std::vector<std::string> scopes;  // namespace paths, or "" for any other block
  std::string statement;            // text since the last ; { or } at depth 0
  int paren = 0;
  bool named = false;  // the statement's first '(' was seen
  auto current = [&]() -> std::string { return scopes.empty() ? "" : scopes.back(); };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '{') {
      std::string path;
      // "namespace a::b {" (an anonymous namespace counts as a block).
      std::istringstream words(statement);
      std::string w0, w1, extra;
      words >> w0 >> w1 >> extra;
      if (paren == 0 && w0 == "namespace" && !w1.empty() && extra.empty()) {
        const std::string outer = scopes.empty() ? "" : scopes.back();
        path = outer.empty() ? w1 : outer + "::" + w1;
        if (outer.empty() && !scopes.empty()) path = "";  // inside a block: not a namespace of ours
      }
      scopes.push_back(path);
      if (paren == 0) statement.clear(), named = false;
      continue;
    }
    if (c == '}') {
      if (!scopes.empty()) scopes.pop_back();
      if (paren == 0) statement.clear(), named = false;
      continue;
    }
    if (c == ';' && paren == 0) {
      statement.clear();
      named = false;
      continue;
    }
    if (c == '(') {
      if (paren == 0 && !named && current() == ns) {
        named = true;
        // The identifier just before the '(' is the name, if the statement
        // has a type before it (a declaration, not a macro call).
        size_t end = statement.find_last_not_of(" \t\n");
        if (end != std::string::npos) {
          size_t begin = end + 1;
          while (begin > 0 && (std::isalnum(static_cast<unsigned char>(statement[begin - 1])) || statement[begin - 1] == '_'))
            --begin;
          const std::string name = statement.substr(begin, end + 1 - begin);
          const std::string before = statement.substr(0, begin);
          const bool has_type = before.find_first_not_of(" \t\n") != std::string::npos;
          if (!name.empty() && has_type && before.find("operator") == std::string::npos) names.insert(name);
        }
      }
      ++paren;
    }
    if (c == ')') --paren;
    statement += c;
  }
  return names;
}

fs::path source_dir() { return fs::path(DAPO_SOURCE_DIR); }

// Public ops:: functions with a CUDA backend.
std::set<std::string> ops_with_cuda_backend() {
  std::set<std::string> pub;
  for (const auto& entry : fs::directory_iterator(source_dir() / "include/dapo/ops"))
    if (entry.path().extension() == ".h") {
      const auto found = functions_in(read_file(entry.path()), "dapo::ops");
      pub.insert(found.begin(), found.end());
    }
  const fs::path cuda_ops = source_dir() / "cuda/cuda_ops.h";
  EXPECT_TRUE(fs::exists(cuda_ops)) << cuda_ops << ": the CUDA backend's declarations moved? Update this test.";
  std::set<std::string> cuda = functions_in(read_file(cuda_ops), "dapo::ops::cuda");
  // The ops every backend implements are listed once and included inside
  // the backend's namespace.
  const fs::path shared = source_dir() / "src/ops/backend_ops.inc";
  EXPECT_TRUE(fs::exists(shared)) << shared << ": the backends' shared op list moved? Update this test.";
  const auto listed = functions_in("namespace dapo::ops::cuda {\n" + read_file(shared) + "\n}", "dapo::ops::cuda");
  cuda.insert(listed.begin(), listed.end());
  std::set<std::string> both;
  for (const std::string& name : cuda)
    if (pub.count(name)) both.insert(name);
  return both;
}

TEST(BackendOpsTable, TheParserFindsDeclarations) {
  const std::string src = R"(
    #include "x.h"
    namespace dapo::ops {
    // void commented_out(int);
    struct RowNorm;
    void plain(const Ctx& ctx, Tensor t);
    inline int64_t defined(int64_t c) { return (c + 1) / 2; }
    class Klass {
     public:
      explicit Klass(const Ctx& ctx);
      void method(int x);
    };
    void with_default(const Ctx& ctx, const RowNorm& rn = {});
    namespace detail {
    void hidden(int);
    }  // namespace detail
    size_t after_detail(int64_t B, const char* s = "a(b{");
    }  // namespace dapo::ops
  )";
  EXPECT_EQ(functions_in(src, "dapo::ops"),
            (std::set<std::string>{"plain", "defined", "with_default", "after_detail"}));
  EXPECT_EQ(functions_in(src, "dapo::ops::detail"), (std::set<std::string>{"hidden"}));
}

TEST(BackendOpsTable, EveryOpWithACudaBackendIsCovered) {
  const std::set<std::string> ops = ops_with_cuda_backend();
  // A parse that finds nothing must not pass: these ops have had a CUDA
  // backend from the start.
  for (const char* known : {"rmsnorm_forward", "matmul", "attention_forward", "sample_tokens", "adamw_step"})
    ASSERT_TRUE(ops.count(known)) << known << " not found: the header parser is broken";
  std::set<std::string> covered;
  for (std::string_view op : kHarnessOps) covered.insert(std::string(op));
  for (const TestedElsewhere& t : kTestedElsewhere) covered.insert(std::string(t.op));
  for (const std::string& op : ops)
    EXPECT_TRUE(covered.count(op)) << "ops::" << op << " has a CUDA backend but no case in the GPU op harness: add "
                                   << "one (tests/gpu/test_backend_ops_*.cpp) and list it in "
                                   << "tests/gpu/backend_ops_coverage.h";
  for (const std::string& op : covered)
    EXPECT_TRUE(ops.count(op)) << op << " is listed in backend_ops_coverage.h but is no public op with a CUDA backend";
}

// Each listed op is named by a case of the harness (the cases name their
// ops as string literals; test_gpu checks that they really run them).
TEST(BackendOpsTable, TheHarnessFilesNameEveryListedOp) {
  std::string cases;
  for (const auto& entry : fs::directory_iterator(source_dir() / "tests/gpu")) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("test_backend_ops", 0) == 0 && entry.path().extension() == ".cpp") cases += read_file(entry.path());
  }
  ASSERT_FALSE(cases.empty()) << "no tests/gpu/test_backend_ops*.cpp";
  for (std::string_view op : kHarnessOps)
    EXPECT_NE(cases.find("\"" + std::string(op) + "\""), std::string::npos)
        << op << " is listed but no harness case names it";
}

TEST(BackendOpsTable, OpsTestedElsewhereAreTestedThere) {
  for (const TestedElsewhere& t : kTestedElsewhere) {
    const fs::path file = source_dir() / std::string(t.file);
    ASSERT_TRUE(fs::exists(file)) << t.op << ": " << file << " does not exist";
    EXPECT_NE(read_file(file).find(", " + std::string(t.test) + ")"), std::string::npos)
        << t.op << ": no test " << t.test << " in " << t.file;
    EXPECT_FALSE(t.why.empty()) << t.op;
  }
}

}  // namespace
}  // namespace dapo::test::backend_ops
