// safetensors: the writer's layout (what HF's loader demands), exact dtype
// conversions, row/column slices, sharded sets, and every error message for
// bad files.
#include "dapo/io/safetensors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "io_test_util.h"

namespace dapo::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// A file from a header text and data bytes (header length = header size
// unless given).
void raw_file(const std::string& path, const std::string& header, size_t data_bytes, int64_t header_len = -1) {
  std::string bytes(8, '\0');
  const uint64_t n = header_len < 0 ? header.size() : uint64_t(header_len);
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(data_bytes, '\x01');
  test::write_text(path, bytes);
}

TEST(Safetensors, WriterLayoutIsWhatHfLoads) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  const std::vector<bf16> h = {to_bf16(1.5f), to_bf16(-2.0f), to_bf16(3.25f)};
  const std::vector<float> f = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  const std::vector<int64_t> l = {-7, int64_t(1) << 40};
  const float scalar = 42.0f;
  write_safetensors(path,
                    {{"half", "BF16", {3}, h.data()},
                     {"weight", "F32", {2, 3}, f.data()},
                     {"ids", "I64", {2}, l.data()},
                     {"empty", "F32", {0, 4}, nullptr},
                     {"scalar", "F32", {}, &scalar}},
                    {{"note", "tiny"}});
  EXPECT_FALSE(fs::exists(path + ".partial"));
  const std::string bytes = test::read_text(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["__metadata__"]["note"], "tiny");
  EXPECT_EQ(header["weight"]["dtype"], "F32");
  EXPECT_EQ(header["weight"]["shape"], nlohmann::json({2, 3}));
  // Largest elements first: I64, then the F32s in the given order, then BF16;
  // back to back, each aligned to its element size.
  EXPECT_EQ(header["ids"]["data_offsets"], nlohmann::json({0, 16}));
  EXPECT_EQ(header["weight"]["data_offsets"], nlohmann::json({16, 40}));
  EXPECT_EQ(header["empty"]["data_offsets"], nlohmann::json({40, 40}));
  EXPECT_EQ(header["scalar"]["data_offsets"], nlohmann::json({40, 44}));
  EXPECT_EQ(header["half"]["data_offsets"], nlohmann::json({44, 50}));
  EXPECT_EQ(bytes.size(), 8 + n + 50);

  const SafetensorsFile file(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"ids", "weight", "empty", "scalar", "half"}));
  EXPECT_EQ(file.metadata().at("note"), "tiny");
  EXPECT_TRUE(file.contains("half"));
  EXPECT_FALSE(file.contains("nope"));
  EXPECT_EQ(file.info("weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.info("scalar").numel(), 1);
  EXPECT_EQ(file.info("empty").numel(), 0);
  std::vector<float> got(6);
  file.read_f32("weight", got.data());
  EXPECT_EQ(got, f);
  file.read_f32("half", got.data());
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 3), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  float s = 0;
  file.read_f32("scalar", &s);
  EXPECT_EQ(s, 42.0f);
  std::vector<int64_t> ids(2);
  file.read_i64("ids", ids.data());
  EXPECT_EQ(ids, l);
}

TEST(Safetensors, ConvertsF16AndBf16Exactly) {
  TempDir dir;
  // Half bit patterns: +-0, 1, -2.5, max normal, min normal, min and max
  // subnormal, +-Inf, NaN.
  const std::vector<uint16_t> half = {0x0000, 0x8000, 0x3c00, 0xc100, 0x7bff, 0x0400, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x7e00};
  const std::vector<float> want = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24),
                                   std::ldexp(1023.0f, -24), INFINITY, -INFINITY, NAN};
  std::vector<bf16> b;
  for (const float v : {0.0f, -1.0f, 3.0e38f, 1.0e-40f, -INFINITY}) b.push_back(to_bf16(v));
  write_safetensors(dir.file("h.safetensors"),
                    {{"h", "F16", {int64_t(half.size())}, half.data()}, {"b", "BF16", {int64_t(b.size())}, b.data()}});
  const SafetensorsFile f(dir.file("h.safetensors"));
  std::vector<float> got(half.size());
  f.read_f32("h", got.data());
  for (size_t i = 0; i < half.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(got[i], want[i]) << "half 0x" << std::hex << half[i];
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
    }
  }
  f.read_f32("b", got.data());
  for (size_t i = 0; i < b.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &got[i], 4);
    EXPECT_EQ(bits, uint32_t(b[i].bits) << 16) << i;
  }
}

TEST(Safetensors, SlicesRowsColumnsAndRanges) {
  TempDir dir;
  const auto w = test::make_hf_tensor("w", "BF16", {5, 7});
  const auto v = test::make_hf_tensor("v", "F32", {9});
  test::write_tensors(dir.file("s.safetensors"), {w, v});
  const SafetensorsFile f(dir.file("s.safetensors"));
  std::vector<float> full(35);
  f.read_f32("w", full.data());
  for (int64_t i = 0; i < 35; ++i) ASSERT_EQ(full[size_t(i)], test::value_of("w", i));
  std::vector<float> rows(2 * 7);
  f.read_f32_slice("w", 0, 3, 2, rows.data());
  EXPECT_EQ(rows, std::vector<float>(full.begin() + 21, full.begin() + 35));
  std::vector<float> cols(5 * 3);
  f.read_f32_slice("w", 1, 2, 3, cols.data());
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(cols[size_t(r * 3 + c)], full[size_t(r * 7 + 2 + c)]) << r << "," << c;
  std::vector<float> range(4);
  f.read_f32_slice("v", 0, 5, 4, range.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(range[size_t(i)], test::value_of("v", 5 + i));
  f.read_f32_slice("v", 0, 9, 0, range.data());  // an empty range is fine
}

TEST(Safetensors, IntegersWidenAndTypesAreChecked) {
  TempDir dir;
  const std::vector<int32_t> i32 = {-3, 0, 2147483647};
  const std::vector<float> f = {1.0f};
  write_safetensors(dir.file("i.safetensors"), {{"i", "I32", {3}, i32.data()}, {"f", "F32", {1}, f.data()}});
  const SafetensorsFile file(dir.file("i.safetensors"));
  std::vector<int64_t> got(3);
  file.read_i64("i", got.data());
  EXPECT_EQ(got, (std::vector<int64_t>{-3, 0, 2147483647}));
  const std::string p = dir.file("i.safetensors");
  EXPECT_EQ(error_of([&] { file.read_i64("f", got.data()); }),
            p + ": tensor 'f': dtype F32 cannot be read as int64 (I64 or I32 expected)");
  float x;
  EXPECT_EQ(error_of([&] { file.read_f32("i", &x); }),
            p + ": tensor 'i': dtype I32 cannot be read as fp32 (F32, BF16 or F16 expected)");
  EXPECT_EQ(error_of([&] { file.read_f32_slice("i", 0, 0, 1, &x); }),
            p + ": tensor 'i': dtype I32 cannot be read as fp32 (F32, BF16 or F16 expected)");
  EXPECT_EQ(error_of([&] { file.info("missing"); }), p + ": no tensor 'missing'");
  EXPECT_EQ(error_of([&] { file.read_f32("missing", &x); }), p + ": no tensor 'missing'");
}

TEST(Safetensors, BadFilesSayWhatIsWrong) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  auto open_error = [&] { return error_of([&] { SafetensorsFile f(p); }); };
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

  EXPECT_EQ(error_of([&] { SafetensorsFile f(dir.file("none.safetensors")); }),
            dir.file("none.safetensors") + ": cannot open: No such file or directory");
  test::write_text(p, "abc");
  EXPECT_EQ(open_error(), p + ": not a safetensors file: 3 bytes, too short for the 8-byte header length");
  test::write_text(p, "this is a text file, not tensors");
  EXPECT_NE(open_error().find(p + ": not a safetensors file: header length "), std::string::npos) << open_error();
  raw_file(p, ok, 8, 1000);
  EXPECT_EQ(open_error(), p + ": truncated: the header needs 1008 bytes but the file has " +
                              std::to_string(8 + ok.size() + 8));
  raw_file(p, "{not json", 0);
  EXPECT_NE(open_error().find(p + ": the header is not valid JSON: "), std::string::npos) << open_error();
  raw_file(p, "[1, 2]", 0);
  EXPECT_EQ(open_error(), p + ": the header is not a JSON object");
  raw_file(p, R"({"a":{"dtype":"F32","shape":[2]}})", 8);
  EXPECT_EQ(open_error(), p + ": tensor 'a': needs dtype, shape and data_offsets");
  raw_file(p, R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_EQ(open_error(), p + ": tensor 'a': unknown dtype 'Q4'");
  raw_file(p, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
  EXPECT_EQ(open_error(), p + ": tensor 'a': shape [-2] has a negative, non-integer or huge entry");
  raw_file(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
  EXPECT_EQ(open_error(), p + ": tensor 'a': data_offsets [8,0] is not [begin, end] with begin <= end");
  raw_file(p, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  EXPECT_EQ(open_error(), p + ": tensor 'a': data_offsets [0,8] hold 8 bytes but F32 (3,) needs 12");
  raw_file(p, ok, 5);  // the data was cut short
  EXPECT_EQ(open_error(), p + ": truncated: tensor 'a' ends at data byte 8 but the file has 5 bytes of data (" +
                              std::to_string(8 + ok.size() + 5) + " in all)");
  raw_file(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12);
  EXPECT_EQ(open_error(), p + ": tensor 'b' starts at data byte 8 but the previous one ends at 4 (a gap)");
  raw_file(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  EXPECT_EQ(open_error(), p + ": tensor 'b' starts at data byte 4 but the previous one ends at 8 (overlapping data)");
  raw_file(p, ok, 12);
  EXPECT_EQ(open_error(), p + ": 4 bytes after the last tensor (damaged, or not a safetensors file)");
  raw_file(p, R"({"__metadata__":[1]})", 0);
  EXPECT_EQ(open_error(), p + ": __metadata__ is not an object");
  raw_file(p, R"({"__metadata__":{"format":1}})", 0);
  EXPECT_EQ(open_error(), p + ": __metadata__ value of 'format' is not a string");
  raw_file(p, ok, 8);
  EXPECT_EQ(open_error(), "");
  EXPECT_EQ(error_of([&] { SafetensorsFile f(dir.path().string()); }), dir.path().string() + ": not a regular file");
}

TEST(Safetensors, WriterWithoutFinishLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::vector<float> a = {1, 2};
  {
    SafetensorsWriter w(path, {{"a", "F32", {2}}, {"b", "F32", {2}}});
    w.write("a", a.data());
    EXPECT_TRUE(fs::exists(path + ".partial"));
  }
  EXPECT_FALSE(fs::exists(path + ".partial"));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(error_of([&] { write_safetensors(dir.file("no/such/dir.safetensors"), {{"a", "F32", {2}, a.data()}}); }),
            dir.file("no/such/dir.safetensors") + ".partial: cannot create the safetensors file: No such file or directory");
}

TEST(SafetensorsSet, ShardedIndexFindsEveryTensorOnce) {
  TempDir dir;
  const auto config = test::tiny_config(false);
  const auto tensors = test::tiny_hf_tensors(config);
  test::write_hf_dir(dir.path() / "sharded", "{}", tensors, 3);
  test::write_hf_dir(dir.path() / "single", "{}", tensors, 1);
  const SafetensorsSet sharded = SafetensorsSet::open_dir((dir.path() / "sharded").string());
  const SafetensorsSet single = SafetensorsSet::open_dir((dir.path() / "single").string());
  EXPECT_EQ(sharded.file_count(), 3u);
  EXPECT_EQ(single.file_count(), 1u);
  EXPECT_EQ(sharded.origin(), (dir.path() / "sharded" / "model.safetensors.index.json").string());
  EXPECT_EQ(sharded.names(), single.names());
  EXPECT_EQ(sharded.names().size(), tensors.size());
  for (const auto& t : tensors) {
    ASSERT_TRUE(sharded.contains(t.name)) << t.name;
    EXPECT_EQ(sharded.info(t.name).dtype, t.dtype);
    std::vector<float> a(size_t(sharded.info(t.name).numel())), b(a.size());
    sharded.read_f32(t.name, a.data());
    single.read_f32(t.name, b.data());
    EXPECT_EQ(a, b) << t.name;
  }
  EXPECT_EQ(error_of([&] { sharded.file_of("nope"); }), sharded.origin() + ": no tensor 'nope'");
}

TEST(SafetensorsSet, BadIndexesAndDirectories) {
  TempDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  auto err = [&] { return error_of([&] { SafetensorsSet::open_dir(dir.path().string()); }); };
  EXPECT_EQ(err(), dir.path().string() + ": has neither model.safetensors nor model.safetensors.index.json");
  EXPECT_EQ(error_of([&] { SafetensorsSet::open_dir(dir.file("nothing")); }), dir.file("nothing") + ": not a directory");
  test::write_text(index, "{");
  EXPECT_NE(err().find(index + ": not valid JSON: "), std::string::npos) << err();
  test::write_text(index, R"({"metadata": {}})");
  EXPECT_EQ(err(), index + ": no \"weight_map\" object (tensor name -> shard file)");
  test::write_text(index, R"({"weight_map": {"a": 3}})");
  EXPECT_EQ(err(), index + ": weight_map entry of 'a' is not a file name");
  test::write_text(index, R"({"weight_map": {"a": "s1.safetensors"}})");
  EXPECT_EQ(err(), index + ": shard 's1.safetensors' (of tensor 'a') does not exist");
  test::write_tensors(dir.file("s1.safetensors"), {test::make_hf_tensor("b", "F32", {2})});
  EXPECT_EQ(err(), index + ": weight_map puts tensor 'a' in shard 's1.safetensors', which has no such tensor");
  test::write_text(dir.file("s1.safetensors"), "garbage!garbage!");
  EXPECT_NE(err().find(dir.file("s1.safetensors") + ": not a safetensors file"), std::string::npos) << err();
  // Shard paths stay inside the model's folder: nothing outside is opened
  // (nor its bytes shown), however the path gets out.
  fs::create_directories(dir.path() / "sub");
  test::write_tensors(dir.file("sub/s2.safetensors"), {test::make_hf_tensor("a", "F32", {2})});
  test::write_text(index, R"({"weight_map": {"a": "sub/s2.safetensors"}})");
  EXPECT_EQ(err(), "");  // a subfolder is inside
  for (const std::string shard : {"../../../../etc/passwd", "sub/../../x.safetensors", "/etc/passwd", ""}) {
    test::write_text(index, R"({"weight_map": {"a": ")" + shard + R"("}})");
    EXPECT_EQ(err(), index + ": shard '" + shard + "' (of tensor 'a') is not a file name inside " + dir.path().string());
  }
}

}  // namespace
}  // namespace dapo::io
