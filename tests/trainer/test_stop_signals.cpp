// StopSignals: the first SIGUSR1/SIGTERM/SIGINT/SIGHUP is recorded for the
// step boundary (a SIGINT or SIGHUP ignored from the start stays ignored),
// also when whoever started the process left those signals blocked (a
// blocked signal never reaches a handler, and the mask survives exec), and
// after a library replaced the handler (reclaim, at every step boundary).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>

#include "dapo/trainer/stop_signals.h"

namespace dapo::trainer {
namespace {

// Restores the calling thread's signal mask when it goes out of scope.
class MaskGuard {
 public:
  MaskGuard() { pthread_sigmask(SIG_SETMASK, nullptr, &saved_); }
  ~MaskGuard() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

TEST(StopSignals, RecordsTheFirstSignal) {
  const StopSignals signals;
  EXPECT_EQ(signals.pending(), 0);
  testing::internal::CaptureStderr();
  ASSERT_EQ(raise(SIGUSR1), 0);  // the handler runs before raise returns
  ASSERT_EQ(raise(SIGTERM), 0);
  // Acknowledged at once, once: the step boundary may be minutes away.
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "dapo: received SIGUSR1: stopping after the current step, with a checkpoint (exit 4)\n");
  EXPECT_EQ(signals.pending(), SIGUSR1);
  EXPECT_STREQ(stop_signal_name(signals.pending()), "SIGUSR1");
}

// Ctrl-C and a closed terminal stop the run as SIGTERM does: recorded, the
// process goes on to the step boundary. In a fresh process each (the
// "threadsafe" death test re-runs the binary): the dispositions at the
// first StopSignals of a process are what counts, and a test binary run in
// the background of a script starts with SIGINT ignored.
TEST(StopSignals, RecordsSigintAndSighup) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const int sig : {SIGINT, SIGHUP})
    EXPECT_EXIT(
        {
          signal(SIGINT, SIG_DFL);
          signal(SIGHUP, SIG_DFL);
          const StopSignals signals;
          raise(sig);
          raise(SIGTERM);
          std::exit(signals.pending() == sig ? 0 : 1);
        },
        // The first signal acknowledged, alone.
        testing::ExitedWithCode(0),
        std::string("^dapo: received ") + stop_signal_name(sig) +
            ": stopping after the current step, with a checkpoint \\(exit 4\\)\n$")
        << stop_signal_name(sig);
  EXPECT_STREQ(stop_signal_name(SIGINT), "SIGINT");
  EXPECT_STREQ(stop_signal_name(SIGHUP), "SIGHUP");
}

// `nohup dapo train` (SIGHUP ignored from the start) keeps surviving a
// closed terminal, and reclaim does not call that a library's doing.
TEST(StopSignals, LeavesAnIgnoredSighupIgnored) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGHUP, SIG_IGN);
        const StopSignals signals;
        signals.reclaim();  // silent: would warn "SIGHUP went to ignored" (the regex below)
        raise(SIGHUP);
        if (signals.pending() != 0) std::exit(1);
        raise(SIGTERM);
        std::exit(signals.pending() == SIGTERM ? 0 : 2);
      },
      testing::ExitedWithCode(0),
      "^dapo: received SIGTERM: stopping after the current step, with a checkpoint \\(exit 4\\)\n$");
}

TEST(StopSignals, SeesSignalsThatTheLauncherLeftBlocked) {
  const MaskGuard guard;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGUSR1);
  sigaddset(&stop, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &stop, nullptr), 0);
  const StopSignals signals;
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(signals.pending(), SIGTERM);
}

TEST(StopSignals, ReclaimTakesBackAHandlerThatALibraryReplaced) {
  const StopSignals signals;
  // As a library started after dapo's handlers may do (NCCL once caught
  // SIGUSR1 for its own debug dump).
  ASSERT_NE(signal(SIGUSR1, SIG_IGN), SIG_ERR);
  testing::internal::CaptureStderr();
  signals.reclaim();
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("stop signals: SIGUSR1 went to ignored"), std::string::npos) << warned;
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_EQ(signals.pending(), SIGUSR1);

  testing::internal::CaptureStderr();
  signals.reclaim();  // nothing to take back: silent
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace dapo::trainer
