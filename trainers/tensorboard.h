// TensorBoard event files, written by troupe (no Python, no TensorFlow at training time): what
// `training.tensorboard_dir` asks for, read by TensorBoard's and tensorboardX's readers.
//
//   auto tb = TensorBoardWriter::open("runs/tb");            // events.out.tfevents.<t>.<host>...
//   tb->scalar("loss", /*step=*/12, 1.234, wall_seconds);    // one Event, flushed
//
// The format: a TFRecord stream (each record its length, the length's masked CRC-32C, the data
// and the data's masked CRC-32C) of tensorflow.Event protocol buffers, the first carrying
// file_version "brain.Event:2", each scalar an Event {wall_time, step, summary {value {tag,
// simple_value}}}. The reports' scalars are flushed at most every second and when the writer
// closes (a run's end, Ctrl-C, a failure), so that TensorBoard shows a run live at little cost.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/protocol.h"

namespace troupe::trainers {

class TensorBoardWriter {
 public:
  // A new events file in `dir` (created if missing). Internal naming the file and the reason when
  // it cannot be written.
  static absl::StatusOr<TensorBoardWriter> open(const std::string& dir);
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&&) = delete;
  ~TensorBoardWriter();

  const std::string& path() const { return path_; }

  // One scalar at `step`, flushed unless `flush` is false. Errors: Internal naming the file (a
  // full disk); later writes fail too.
  absl::Status scalar(std::string_view tag, int64_t step, double value, double wall_seconds,
                      bool flush = true);
  // A job's report (trainers/job_metrics.h) as scalars: each job-wide value under its name, a
  // value with one label other than a rank's under "name/label" (step_seconds/compute); per-rank
  // values are left to /metrics. Flushed at most every second (and at close).
  absl::Status report(const cluster::MetricsReport& report);

 private:
  TensorBoardWriter(FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  absl::Status record(const std::string& data, bool flush = true);

  FILE* file_;
  std::string path_;
  absl::Status failed_;
  absl::Time flushed_ = absl::InfinitePast();  // a report's scalars last flushed
};

// CRC-32C (Castagnoli) of `data`, and the masking TFRecord applies to it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

}  // namespace troupe::trainers
