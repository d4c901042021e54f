// The fatal-error line: file:line, rank, host and the message, then exit.
#include "dapo/core/error.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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

// Several threads failing at once (OpenMP threads that all find non-finite
// logits in their rows): one fatal line, one abort, exit 1. The hook stands
// in for MPI_Abort, which crashed (exit 139) when two threads called it.
TEST(ErrorDeathTest, ConcurrentFailuresPrintOneLineAndAbortOnce) {
  EXPECT_EXIT(
      {
        set_abort_hook([](int code) {
          static std::atomic<int> calls{0};
          if (calls.fetch_add(1) > 0) std::_Exit(139);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          std::_Exit(code);
        });
        constexpr int kThreads = 8;
        std::atomic<int> ready{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
          threads.emplace_back([&ready, t] {
            ready.fetch_add(1);
            while (ready.load() < kThreads) {
            }
            DAPO_FAIL("thread ", t, " failed");
          });
        for (std::thread& th : threads) th.join();
      },
      ::testing::ExitedWithCode(1), "^dapo: fatal: [^\n]*: thread [0-7] failed\n$");
}

TEST(Error, CatConcatenates) { EXPECT_EQ(cat("a", 1, ' ', 2.5, "b"), "a1 2.5b"); }

}  // namespace
}  // namespace dapo
