// The table form of the equivalence tests: (prediction, reference, verdict,
// why), each case checked both ways round (equivalence is symmetric for
// every case of the tables).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "dapo/reward/equivalence.h"

namespace dapo::reward::test {

struct Case {
  const char* pred;
  const char* truth;
  bool equal;
  const char* why;
};

inline void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(answers_equivalent(c.pred, c.truth), c.equal)
        << "pred '" << c.pred << "' vs truth '" << c.truth << "': expected " << (c.equal ? "equal" : "different")
        << " because " << c.why;
    EXPECT_EQ(answers_equivalent(c.truth, c.pred), c.equal) << "swapped: '" << c.truth << "' vs '" << c.pred << "'";
  }
}

}  // namespace dapo::reward::test
