// The op harness (backend_ops.h): every case of the table as one test,
//   test_gpu --gtest_filter='BackendOps*'             every case
//   test_gpu --gtest_filter='*/rmsnorm_forward_*'     one op's
//   test_gpu --gtest_list_tests --gtest_filter='BackendOps*'
// and the table's consistency with backend_ops_coverage.h. Skips without a
// GPU, as every test of test_gpu.
#include <algorithm>
#include <map>
#include <set>

#include "gpu/backend_ops.h"
#include "gpu/backend_ops_coverage.h"

namespace dapo::test::backend_ops {
namespace {

const Cases& all_cases() {
  static const Cases cases = [] {
    Cases c;
    add_norm_cases(c);
    add_elementwise_cases(c);
    add_gemm_cases(c);
    add_attention_cases(c);
    add_sampling_cases(c);
    return c;
  }();
  return cases;
}

}  // namespace

// What --gtest_list_tests shows of a case: its ops (or path) and bounds.
void PrintTo(const Case* c, std::ostream* os) {
  for (const std::string& op : c->ops) *os << op << " ";
  if (!c->path.empty()) *os << "[" << c->path << "] ";
  *os << "bounds:";
  for (const Bound& b : c->bounds) *os << " " << b.output;
}

namespace {

std::vector<const Case*> case_pointers() {
  std::vector<const Case*> v;
  for (const Case& c : all_cases()) v.push_back(&c);
  return v;
}

class BackendOps : public ::testing::TestWithParam<const Case*> {
 protected:
  static void SetUpTestSuite() {
    if (ops::cuda_device_count() > 0) env_ = new Env;
  }
  static void TearDownTestSuite() {
    delete env_;
    env_ = nullptr;
  }
  void SetUp() override {
    if (env_ == nullptr) GTEST_SKIP() << "no GPU on this machine";
  }
  static Env* env_;
};
Env* BackendOps::env_ = nullptr;

TEST_P(BackendOps, MatchesCpu) {
  const Case& c = *GetParam();
  Harness h(*env_, c);
  c.run(h);
  if (IsSkipped()) return;
  h.finish();
}

INSTANTIATE_TEST_SUITE_P(, BackendOps, ::testing::ValuesIn(case_pointers()),
                         [](const ::testing::TestParamInfo<const Case*>& info) { return info.param->name; });

// The table against backend_ops_coverage.h: unique names, a reason for every
// bound, and the ops of the cases exactly the list the CPU test checks
// against the ops' headers. Needs no GPU, but skips without one like the
// rest of test_gpu (whose exit code 77 tells CTest "skipped").
TEST(BackendOpsTable, CasesCoverTheList) {
  if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no GPU on this machine";
  std::set<std::string> names, covered;
  for (const Case& c : all_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "two cases named " << c.name;
    EXPECT_FALSE(c.ops.empty() && c.path.empty()) << c.name << " runs neither an op nor a tuning path";
    EXPECT_FALSE(c.bounds.empty()) << c.name << " compares nothing";
    for (const Bound& b : c.bounds) EXPECT_FALSE(b.why.empty()) << c.name << ": the bound of " << b.output;
    for (const std::string& op : c.ops) covered.insert(op);
  }
  std::set<std::string> listed;
  for (std::string_view op : kHarnessOps) listed.insert(std::string(op));
  for (const std::string& op : listed) EXPECT_TRUE(covered.count(op)) << op << " is listed but has no case";
  for (const std::string& op : covered) EXPECT_TRUE(listed.count(op)) << op << " has cases but is not listed";
  std::printf("[backend ops] %zu cases over %zu ops\n", all_cases().size(), covered.size());
}

}  // namespace
}  // namespace dapo::test::backend_ops
