// main() of test executables whose tests skip themselves on machines that
// lack the hardware (test_gpu without a GPU): exit code 77 when no test
// passed, none failed and some were skipped, so that CTest (SKIP_RETURN_CODE
// 77) reports the entry as skipped instead of passed. Any failure still
// fails, any passing test still passes.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (rc == 0 && u.successful_test_count() == 0 && u.failed_test_count() == 0 && u.skipped_test_count() > 0)
    return 77;
  return rc;
}
