// The fatal-error line: file:line, rank, host and the message, then exit.
#include "dapo/core/error.h"

#include <gtest/gtest.h>

namespace dapo {
namespace {

TEST(ErrorDeathTest, FatalLineNamesLocationRankAndHost) {
  const std::string host = host_name();
  EXPECT_EXIT(DAPO_CHECK(1 + 1 == 3, "arithmetic is broken: ", 42), ::testing::ExitedWithCode(1),
              "dapo: fatal: .*test_error.cpp:[0-9]+: rank -1 on " + host +
                  ": check failed: 1 \\+ 1 == 3 arithmetic is broken: 42");
  EXPECT_EXIT(
      {
        set_process_identity(3);
        DAPO_FAIL("plain failure");
      },
      ::testing::ExitedWithCode(1), "rank 3 on .*: plain failure");
}

TEST(Error, CatConcatenates) { EXPECT_EQ(cat("a", 1, ' ', 2.5, "b"), "a1 2.5b"); }

}  // namespace
}  // namespace dapo
