// Bounded line reading: lines as std::getline gives them, and a UserError
// naming the file and line instead of an unbounded string.
#include "dapo/core/text_lines.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dapo/core/error.h"

namespace dapo {
namespace {

std::vector<std::string> lines_of(const std::string& text, size_t max = kMaxLineBytes) {
  std::istringstream in(text);
  std::vector<std::string> out;
  std::string line;
  int64_t number = 0;
  while (read_bounded_line(in, line, "t.jsonl", number, max)) out.push_back(line);
  EXPECT_EQ(number, int64_t(out.size()));
  EXPECT_FALSE(in.bad());
  return out;
}

TEST(TextLines, LinesAsGetlineGivesThem) {
  EXPECT_EQ(lines_of(""), std::vector<std::string>{});
  EXPECT_EQ(lines_of("a\n\nbc\r\n"), (std::vector<std::string>{"a", "", "bc\r"}));
  EXPECT_EQ(lines_of("a\nlast"), (std::vector<std::string>{"a", "last"}));
  EXPECT_EQ(lines_of(std::string("x\0y\n", 4)), (std::vector<std::string>{std::string("x\0y", 3)}));
  // Lines across the reader's 64 KiB chunks, one ending exactly at a chunk.
  for (const size_t n : {size_t(65535), size_t(65536), size_t(200000)}) {
    const std::string big(n, 'q');
    EXPECT_EQ(lines_of(big + "\nz\n" + big), (std::vector<std::string>{big, "z", big})) << n;
  }
}

TEST(TextLines, ALineOverTheCapNamesFileAndLine) {
  try {
    lines_of("ok\n" + std::string(100, 'x') + "\n", 64);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "t.jsonl:2: a line longer than 64 bytes: not a text file of one record per "
                                     "line (a binary file, or a newline missing)");
  }
  EXPECT_EQ(lines_of(std::string(64, 'x'), 64).size(), 1u);
}

TEST(TextLines, WholeFileBoundedPerLine) {
  const auto path = (std::filesystem::temp_directory_path() / "dapo_text_lines.jsonl").string();
  std::ofstream(path) << "a\nb\n" << std::string(300, 'z');
  EXPECT_EQ(read_text_file(path, "prompt file", 1000), "a\nb\n" + std::string(300, 'z'));
  try {
    read_text_file(path, "prompt file", 100);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3: a line longer than 100 bytes"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
  EXPECT_THROW(read_text_file(std::filesystem::temp_directory_path().string(), "prompt file"), UserError);
  // /dev/zero never ends and has no newline: refused at the cap, not read until memory runs out.
  EXPECT_THROW(read_text_file("/dev/zero", "prompt file", 1 << 20), UserError);
}

}  // namespace
}  // namespace dapo
