// A run as a Chrome / Perfetto trace (`troupe train --trace FILE`): trace-event JSON that
// ui.perfetto.dev and chrome://tracing open, one process per rank and one for the driver.
//
//   driver   steps        a span per step (its loss, rate, norm, tokens and dp as args)
//            optimizer commits  the shards' update closing each applied step
//            checkpoints  each save, from its start to its commit (bytes, staging, writing)
//            recovery     each recovery and its detect / replace / restore parts; resizes
//            validation   each evaluation of the validation split
//   rank d0.p1.t0
//            stage        its ops as the stage ran them (forward and backward per
//                         micro-batch, a pipeline's sends and receives, a forward's wait for its
//                         batch from the loader), then the wait for its gradient reductions,
//                         with the bytes each collective sent
//            shard        its parameter shard's update of each step (the optimizer kernel),
//                         from the start of that step's commit
//            memory       a counter track of what the rank holds, by category
//
// Times are the driver's: each step's span is when the driver ran it, and a rank's spans start
// at the step's start (a stage's own clock is not the driver's; its ops keep their order and
// durations). Every event is a complete ("X") span or a counter, so begins and ends always
// match. The file is valid JSON whenever it is written: the closing "]}" is written each time and
// overwritten by the next events, so an interrupted or failed run leaves a file that opens. Steps
// are written at most every half second (and when the writer closes: a run's end, Ctrl-C, a
// failure), checkpoints, recoveries, resizes and validations at once.
// `window` bounds the steps recorded (--trace-steps A:B), and so its size.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "trainers/checkpointer.h"
#include "trainers/elastic_scaler.h"
#include "trainers/recovery.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

struct TraceWindow {
  int64_t first = 1;
  int64_t last = std::numeric_limits<int64_t>::max();
  bool contains(int64_t step) const { return step >= first && step <= last; }
};
// "A:B" (steps A to B), "A:" (from A), ":B" (to B); InvalidArgument naming the text otherwise.
absl::StatusOr<TraceWindow> parse_trace_window(const std::string& text);

class TraceWriter {
 public:
  // Creates `path` (its directory too). Internal naming it when it cannot.
  static absl::StatusOr<TraceWriter> open(const std::string& path, TraceWindow window);
  TraceWriter(TraceWriter&& other) noexcept;
  TraceWriter& operator=(TraceWriter&&) = delete;
  ~TraceWriter();

  const std::string& path() const { return path_; }
  // Microseconds since the trace began, on the steady clock: what each call below takes.
  double now_us() const;

  // Step `s`, which the driver ran from begin_us to end_us.
  void step(const StepOutcome& s, double begin_us, double end_us);
  // Each ends at end_us (when the driver learned of it).
  void checkpoint(const CheckpointEvent& e, double end_us);
  void recovery(const RecoveryReport& r, double end_us);
  void resize(const ResizeReport& r, double end_us);
  void validation(int64_t step, double loss, double begin_us, double end_us);

  // OK, or the first write's error (a full disk): later events are dropped.
  const absl::Status& status() const { return failed_; }

 private:
  TraceWriter(FILE* file, std::string path, TraceWindow window);
  // A rank's process id, its name written on first use.
  int rank_pid(const std::string& rank);
  void span(int pid, int tid, const std::string& name, const std::string& cat, double ts_us,
            double dur_us, const std::string& args_json = "");
  void counter(int pid, const std::string& name, double ts_us, const std::string& args_json);
  void metadata(int pid, int tid, const char* what, const std::string& name);
  // Writes what was added since the last flush, then the closing "]}", and flushes.
  void flush();

  FILE* file_;
  std::string path_;
  TraceWindow window_;
  absl::Time start_;
  std::string pending_;  // events not written yet, each "{...}" after a ",\n"
  long tail_ = 0;        // where the closing "]}" starts in the file
  bool first_event_ = true;
  double flushed_us_ = 0;  // when step events were last written
  // The last step's commit, on the driver's clock: its ranks' shard updates, reported with the
  // next step, are drawn from its start.
  int64_t committed_step_ = 0;
  double commit_began_us_ = 0;
  std::map<std::string, int> pids_;
  absl::Status failed_;
};

}  // namespace troupe::trainers
