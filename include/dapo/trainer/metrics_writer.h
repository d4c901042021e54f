// metrics.jsonl (docs/DESIGN.md section 4): one JSON object per training step,
// {"step": S, "<name>": value, ...}, keys in the order the caller gives
// them (verl's names: "train/loss", "actor/grad_norm", "perf/throughput",
// "timing_s/step", ...). Values are integers (written as such) or doubles
// (shortest text that reads back to the same double; NaN and infinities,
// which JSON cannot hold, are written as null). Each line is flushed when
// written, so a killed job keeps every completed step.
//
// Metrics are reduced over ranks by the caller; only the writing rank (world
// rank 0) opens the file: the others construct an inactive writer whose
// write() does nothing, so call sites need no rank test.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dapo::trainer {

using MetricValue = std::variant<int64_t, double>;

// One step's metrics, in output order.
class Metrics {
 public:
  Metrics& add(std::string name, double value);
  Metrics& add(std::string name, int64_t value);
  Metrics& add(std::string name, int value) { return add(std::move(name), int64_t(value)); }

  const std::vector<std::pair<std::string, MetricValue>>& items() const { return items_; }
  // The value of `name` as a double; DAPO_CHECK that it is there.
  double get(const std::string& name) const;

 private:
  std::vector<std::pair<std::string, MetricValue>> items_;
};

// The JSON text of one line (without "\n"). A key given twice, or "step",
// is a bug (DAPO_CHECK).
std::string metrics_json_line(int64_t step, const Metrics& metrics);

// A resumed run continues the file of the run it resumes: the lines of
// steps after `step` (written by the interrupted run after its last
// checkpoint) are dropped, atomically (run_files.h's write_file_atomically).
// A missing file is left missing. UserError naming the file on failure.
void keep_metrics_through(const std::string& path, int64_t step);

class MetricsWriter {
 public:
  enum class Mode { truncate, append };  // a fresh run / a resumed one

  // active: this rank writes (creating the file's directory if needed);
  // inactive: nothing is opened. UserError naming the file if it cannot be
  // opened.
  MetricsWriter(std::string path, bool active, Mode mode = Mode::truncate);

  // Writes and flushes one line; UserError naming the file if the write
  // fails (a full disk).
  void write(int64_t step, const Metrics& metrics);

  bool active() const { return active_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool active_;
  std::ofstream out_;
};

}  // namespace dapo::trainer
