// metrics.jsonl lines, written by one rank and flushed per step.
#include "dapo/trainer/metrics_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <unordered_set>

#include "dapo/core/error.h"
#include "dapo/trainer/run_files.h"

namespace dapo::trainer {
namespace {

void append_escaped(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

void append_value(std::string& out, const MetricValue& v) {
  char buf[64];
  if (const int64_t* i = std::get_if<int64_t>(&v)) {
    const auto r = std::to_chars(buf, buf + sizeof buf, *i);
    out.append(buf, r.ptr);
    return;
  }
  const double d = std::get<double>(v);
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
  std::string_view text(buf, size_t(r.ptr - buf));
  out += text;
  // "3" would read back as an integer: keep doubles recognisable as such.
  if (text.find_first_of(".eEn") == std::string_view::npos) out += ".0";
}

}  // namespace

Metrics& Metrics::add(std::string name, double value) {
  items_.emplace_back(std::move(name), value);
  return *this;
}

Metrics& Metrics::add(std::string name, int64_t value) {
  items_.emplace_back(std::move(name), value);
  return *this;
}

double Metrics::get(const std::string& name) const {
  for (const auto& [key, value] : items_)
    if (key == name) return std::holds_alternative<int64_t>(value) ? double(std::get<int64_t>(value)) : std::get<double>(value);
  DAPO_FAIL("no metric '", name, "'");
}

std::string metrics_json_line(int64_t step, const Metrics& metrics) {
  std::string out = "{\"step\": ";
  append_value(out, step);
  std::unordered_set<std::string> seen{"step"};
  for (const auto& [key, value] : metrics.items()) {
    DAPO_CHECK(seen.insert(key).second, "metric '", key, "' given twice");
    out += ", ";
    append_escaped(out, key);
    out += ": ";
    append_value(out, value);
  }
  out += '}';
  return out;
}

MetricsWriter::MetricsWriter(std::string path, bool active, Mode mode) : path_(std::move(path)), active_(active) {
  if (!active_) return;
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path_, std::ios::binary | (mode == Mode::append ? std::ios::app : std::ios::trunc));
  if (!out_) throw UserError(cat(path_, ": cannot open the metrics file for writing"));
}

void MetricsWriter::write(int64_t step, const Metrics& metrics) {
  if (!active_) return;
  out_ << metrics_json_line(step, metrics) << '\n';
  out_.flush();
  if (!out_) throw UserError(cat(path_, ": cannot write the metrics of step ", step));
}

void keep_metrics_through(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    // Every line starts with {"step":N (metrics_json_line); a torn last line
    // of a killed run has no step and is dropped.
    constexpr std::string_view prefix = "{\"step\": ";
    if (line.rfind(prefix, 0) != 0) continue;
    int64_t s = -1;
    const char* b = line.data() + prefix.size();
    const auto r = std::from_chars(b, line.data() + line.size(), s);
    if (r.ec != std::errc() || s > step || line.back() != '}') continue;
    kept += line;
    kept += '\n';
  }
  in.close();
  write_file_atomically(path, kept, "metrics");
}

}  // namespace dapo::trainer
