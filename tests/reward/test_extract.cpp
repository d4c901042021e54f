// Answer extraction: the last "Answer:" line, else the last box, else nothing.
#include "dapo/reward/extract.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dapo::reward {
namespace {

struct Case {
  const char* response;
  AnswerSource source;
  const char* text;
  const char* why;
};

TEST(Extract, AnswerLines) {
  const std::vector<Case> cases = {
      {"So we get 5.\nAnswer: 5", AnswerSource::answer_line, "5", "the DAPO format"},
      {"answer: 7", AnswerSource::answer_line, "7", "case-insensitive"},
      {"ANSWER: 7", AnswerSource::answer_line, "7", "case-insensitive"},
      {"**Answer:** 12", AnswerSource::answer_line, "12", "markdown bold around the marker"},
      {"**Answer: 12**", AnswerSource::answer_line, "12", "markdown bold around the line"},
      {"**Answer**: 12", AnswerSource::answer_line, "12", "bold word, plain colon"},
      {"Answer : 3", AnswerSource::answer_line, "3", "a space before the colon"},
      {"Final Answer: $\\frac{1}{2}$", AnswerSource::answer_line, "$\\frac{1}{2}$", "Final Answer"},
      {"Thus the final answer: 4", AnswerSource::answer_line, "4", "no box: the mid-line marker counts"},
      {"Answer：42", AnswerSource::answer_line, "42", "full-width colon"},
      {"Answer: 1\nwait, no.\nAnswer: 2\n", AnswerSource::answer_line, "2", "the last answer line counts"},
      {"Answer: 9\nThen some text \\boxed{4}", AnswerSource::answer_line, "9", "an answer line beats a box"},
      {"Final Answer: The final answer is $5$. I hope it is correct.", AnswerSource::answer_line, "$5$",
       "Minerva's phrasing is trimmed"},
      {"the answer is...\nAnswer:\n\\boxed{8}", AnswerSource::boxed, "8", "an empty answer line defers to the box"},
      {"Reanswer: 3", AnswerSource::none, "", "'answer' must be a word of its own"},
      {"Answers: 3", AnswerSource::none, "", "'Answers' is not the marker"},
      {"answer: 5 \nmore", AnswerSource::answer_line, "5", "the line ends at the newline"},
      {"Time: 3pm. Note: none", AnswerSource::none, "", "colons without the marker"},
      {"The question asks for the answer: how many ways.\nSo \\boxed{5}", AnswerSource::boxed, "5",
       "a marker inside a sentence is no answer line"},
      {"So the answer: 5", AnswerSource::answer_line, "5", "mid-line marker when there is no box at all"},
      {"### Answer: 5", AnswerSource::answer_line, "5", "markdown heading"},
      {"> **Final Answer:** 5", AnswerSource::answer_line, "5", "quote and bold"},
      {"x\n  The final answer: 6\n\\boxed{5}", AnswerSource::answer_line, "6", "'The final answer:' opens a line"},
  };
  for (const Case& c : cases) {
    const ExtractedAnswer a = extract_answer(c.response);
    EXPECT_EQ(a.source, c.source) << c.why << ": " << c.response;
    EXPECT_EQ(a.text, c.text) << c.why << ": " << c.response;
  }
}

TEST(Extract, Boxes) {
  const std::vector<Case> cases = {
      {"so $\\boxed{42}$.", AnswerSource::boxed, "42", "a box"},
      {"\\boxed{1} then \\boxed{2} and finally we conclude \\boxed{3}", AnswerSource::boxed, "3",
       "the last box, when text separates them"},
      {"\\boxed{\\frac{1}{2}}", AnswerSource::boxed, "\\frac{1}{2}", "nested braces"},
      {"\\boxed{\\{1,2\\}}", AnswerSource::boxed, "\\{1,2\\}", "escaped braces do not count"},
      {"\\fbox{7}", AnswerSource::boxed, "7", "\\fbox"},
      {"$\\boxed 5$", AnswerSource::boxed, "5", "\\boxed with a space-separated token"},
      {"\\boxed{\\boxed{5}}", AnswerSource::boxed, "5", "a box in a box"},
      {"\\boxed{3} ... \\boxed{\\frac{1}{2", AnswerSource::none, "", "a last box cut off gives nothing"},
      {"\\boxedx{3}", AnswerSource::none, "", "another command, not a box"},
      {"\\boxed{3} and \\boxedx", AnswerSource::boxed, "3", "\\boxedx is skipped"},
      {"no answer here", AnswerSource::none, "", "nothing"},
      {"", AnswerSource::none, "", "empty response"},
      {"\\boxed{2} or \\boxed{3}", AnswerSource::boxed, "2, 3", "two candidates together"},
      {"$\\boxed{2}$, $\\boxed{3}$", AnswerSource::boxed, "2, 3", "two boxes in two math spans"},
      {"\\[\\boxed{2}\\]\n\\[\\boxed{3}\\]", AnswerSource::boxed, "2, 3", "display boxes on adjacent lines"},
      {"\\boxed{2} \\text{ or } \\boxed{3}", AnswerSource::boxed, "2, 3", "or in text"},
      {"\\boxed{5} \\boxed{5}", AnswerSource::boxed, "5", "the same answer twice is one answer"},
      {"\\boxed{2} because \\boxed{3}", AnswerSource::boxed, "3", "words separate boxes"},
  };
  for (const Case& c : cases) {
    const ExtractedAnswer a = extract_answer(c.response);
    EXPECT_EQ(a.source, c.source) << c.why << ": " << c.response;
    EXPECT_EQ(a.text, c.text) << c.why << ": " << c.response;
  }
  EXPECT_EQ(extract_answer("\\boxed{2} or \\boxed{3}").candidates, 2);
  EXPECT_EQ(extract_answer("\\boxed{5} \\boxed{5}").candidates, 1);
  EXPECT_EQ(extract_answer("Answer: 5").candidates, 1);
}

TEST(Extract, ManyBoxesAreCapped) {
  std::string r;
  for (int i = 0; i < 100; ++i) r += "\\boxed{" + std::to_string(i) + "} ";
  const ExtractedAnswer a = extract_answer(r);
  EXPECT_EQ(a.source, AnswerSource::boxed);
  EXPECT_EQ(a.candidates, 16);  // a spray of boxes is many candidates, never one
}

TEST(Extract, BuildingBlocks) {
  EXPECT_EQ(last_boxed("a \\boxed{1} b \\boxed{2}"), std::optional<std::string_view>("2"));
  EXPECT_FALSE(last_boxed("\\boxed{1"));
  EXPECT_FALSE(last_boxed("nothing"));
  EXPECT_EQ(last_answer_line("x\nAnswer: **4**\n"), std::optional<std::string_view>("4"));
  EXPECT_FALSE(last_answer_line("Answer:"));
  EXPECT_FALSE(last_answer_line(""));
}

TEST(Extract, ScansFromTheEndOfLongResponses) {
  // A long reasoning text with many colons and backslashes in front of the answer.
  std::string r;
  for (int i = 0; i < 20000; ++i) r += "Step: we use \\frac{a}{b} and \\sqrt{c}. ";
  r += "\\boxed{17}";
  EXPECT_EQ(extract_answer(r).text, "17");
}

}  // namespace
}  // namespace dapo::reward
