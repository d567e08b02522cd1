#include "trainers/progress.h"

#include "absl/time/clock.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace troupe::trainers {

void RunTotals::add(const StepOutcome& step) {
  ++steps;
  if (!step.applied) ++skipped;
  samples += step.samples;
  tokens += step.tokens;
  seconds += step.step_ms / 1000.0;
  dp_seconds += step.dp * step.step_ms / 1000.0;
  comm_ms += step.comm_ms;
  comm_exposed_ms += step.comm_exposed_ms;
  overhead_ms += step.overhead_ms;
  sent_bytes += step.sent.total();
  if (step.pipelined()) {
    bubble_sum += step.bubble;
    ++pipelined;
  }
  memory = memory.max_with(step.memory);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = std::llround(seconds);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

namespace {

std::string rate(double per_second) {
  if (per_second >= 1e6) return absl::StrFormat("%.2fM", per_second / 1e6);
  if (per_second >= 1e4) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.0f", per_second);
}

}  // namespace

ProgressReporter::ProgressReporter(FILE* out, int64_t total_steps, int log_interval)
    : out_(out),
      tty_(isatty(fileno(out)) != 0),
      total_steps_(total_steps),
      log_interval_(std::max(1, log_interval)) {}

void ProgressReporter::message(const std::string& text) {
  if (open_line_) std::fputc('\n', out_);
  open_line_ = false;
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

void ProgressReporter::on_step(const StepOutcome& step) {
  totals_.add(step);
  bool last = step.step >= total_steps_;
  if (step.step % log_interval_ != 0 && !last && !tty_) return;
  // Throughput over the steps since the last line (all of them at first).
  double seconds = totals_.seconds - at_last_print_.seconds;
  double tokens = static_cast<double>(totals_.tokens - at_last_print_.tokens);
  double samples = static_cast<double>(totals_.samples - at_last_print_.samples);
  if (seconds <= 0) return;
  double remaining = static_cast<double>(total_steps_ - step.step) *
                     (totals_.seconds / static_cast<double>(totals_.steps));
  int width = static_cast<int>(std::to_string(total_steps_).size());
  const std::string per_rank =
      flops_ ? absl::StrCat(" (", rate(tokens / seconds / flops_->ranks(step.dp)), "/rank)") : "";
  std::string line = absl::StrFormat("step %*d/%d  loss %.4f  lr %.2e  %s tok/s%s  %s samples/s",
                                     width, step.step, total_steps_, step.loss, step.lr,
                                     rate(tokens / seconds), per_rank, rate(samples / seconds));
  if (flops_ && flops_->peak_per_rank > 0) {
    absl::StrAppend(&line,
                    absl::StrFormat("  MFU %.1f%%", 100 * flops_->mfu(tokens / seconds, step.dp)));
  }
  if (validation_loss_) absl::StrAppend(&line, absl::StrFormat("  val %.4f", *validation_loss_));
  if (totals_.comm_ms > 0) {
    absl::StrAppend(&line, absl::StrFormat("  comm hidden %.0f%%", 100 * totals_.comm_hidden()));
  }
  if (step.pipelined()) {
    absl::StrAppend(&line, absl::StrFormat("  bubble %.0f%%", 100 * step.bubble));
  }
  if (!step.applied) absl::StrAppend(&line, "  (skipped: overflow)");
  absl::StrAppend(&line, "  ETA ", format_duration(remaining));
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    open_line_ = true;
    if (step.step % log_interval_ == 0 || last) {
      std::fputc('\n', out_);
      open_line_ = false;
      at_last_print_ = totals_;
    }
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
    at_last_print_ = totals_;
  }
  std::fflush(out_);
}

std::string format_flops(double flops_per_s) {
  const char* units[] = {"FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"};
  int u = 0;
  while (flops_per_s >= 1000 && u < 5) {
    flops_per_s /= 1000;
    ++u;
  }
  return absl::StrFormat(flops_per_s >= 100 ? "%.0f %s" : "%.3g %s", flops_per_s, units[u]);
}

absl::StatusOr<MetricsWriter> MetricsWriter::open(const std::string& path, bool append) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  return MetricsWriter(f, path);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsWriter::write_line(const std::string& line) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  errno = 0;
  if (std::fprintf(file_, "%s\n", line.c_str()) < 0 || std::fflush(file_) != 0 ||
      std::ferror(file_)) {
    absl::Status s = absl::InternalError(
        absl::StrCat(path_, ": ", errno != 0 ? std::strerror(errno) : "write failed"));
    std::fclose(file_);
    file_ = nullptr;
    return s;
  }
  return absl::OkStatus();
}

absl::Status MetricsWriter::close() {
  if (file_ == nullptr) return absl::OkStatus();
  FILE* f = std::exchange(file_, nullptr);
  errno = 0;
  if (std::fclose(f) != 0) {
    return absl::InternalError(
        absl::StrCat(path_, ": ", errno != 0 ? std::strerror(errno) : "close failed"));
  }
  return absl::OkStatus();
}

absl::Status MetricsWriter::write_step(const StepOutcome& s) {
  nlohmann::json j = {{"step", s.step},
                      {"loss", s.loss},
                      {"lr", s.lr},
                      {"grad_norm", std::isfinite(s.grad_norm) ? nlohmann::json(s.grad_norm)
                                                               : nlohmann::json(nullptr)},
                      {"loss_scale", s.loss_scale},
                      {"applied", s.applied},
                      {"samples", s.samples},
                      {"dp", s.dp},
                      {"tokens", s.tokens},
                      {"tokens_per_s", s.step_ms > 0 ? s.tokens / (s.step_ms / 1000.0) : 0.0},
                      {"step_ms", s.step_ms},
                      {"compute_ms", s.compute_ms},
                      {"comm_ms", s.comm_ms},
                      {"comm_exposed_ms", s.comm_exposed_ms},
                      {"overhead_ms", s.overhead_ms},
                      {"epoch", s.epoch},
                      {"data_position", s.data_position},
                      {"time", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())}};
  if (s.pipelined()) j["bubble"] = s.bubble;
  if (flops_ && s.step_ms > 0) {
    const double tokens_per_s = s.tokens / (s.step_ms / 1000.0);
    j["tokens_per_s_per_rank"] = tokens_per_s / flops_->ranks(s.dp);
    j["model_flops_per_s"] = flops_->flops_per_s(tokens_per_s);
    if (flops_->peak_per_rank > 0) j["mfu"] = flops_->mfu(tokens_per_s, s.dp);
  }
  // Per rank (the largest over the ranks).
  const actors::MemoryReport& m = s.memory;
  j["memory"] = {{"model_state", m.model_state()}, {"parameters", m.parameters},
                 {"gradients", m.gradients},       {"optimizer_state", m.optimizer_state},
                 {"buffers", m.buffers},           {"activations", m.activations},
                 {"peak_rss", m.peak_rss}};
  j["sent_bytes"] = {{"allreduce", s.sent.allreduce},
                     {"reduce_scatter", s.sent.reduce_scatter},
                     {"allgather", s.sent.allgather},
                     {"pipeline", s.sent.pipeline},
                     {"tensor_parallel", s.sent.tensor_parallel},
                     {"total", s.sent.total()}};
  if (s.sent.pipeline > 0) j["pipeline_received_in_place"] = s.sent.pipeline_received_in_place;
  return write_line(j.dump());
}

absl::Status MetricsWriter::write_eval(int64_t step, const actors::EvalReport& report) {
  nlohmann::json j = {
      {"step", step},
      {"eval",
       {{"task", "addition"},
        {"correct", report.correct},
        {"total", report.total},
        {"accuracy",
         report.total > 0 ? static_cast<double>(report.correct) / report.total : 0.0}}}};
  return write_line(j.dump());
}

absl::Status MetricsWriter::write_validation(int64_t step, const actors::ValidationResult& result,
                                             bool best) {
  nlohmann::json v = {{"loss", result.loss()},
                      {"tokens", result.tokens},
                      {"windows", result.windows},
                      {"best", best}};
  if (result.tokens_per_byte > 0) v["bits_per_byte"] = result.bits_per_byte();
  return write_line(nlohmann::json{{"step", step}, {"val", v}}.dump());
}

absl::Status MetricsWriter::write_checkpoint(const CheckpointEvent& event) {
  nlohmann::json c = {{"dir", event.step_dir}, {"ok", event.status.ok()}};
  if (event.status.ok()) {
    c["bytes"] = event.bytes;
    c["staging_ms"] = event.staging_ms;
    c["write_ms"] = event.write_ms;
    c["total_ms"] = event.total_ms;
    c["waited_ms"] = event.waited_ms;
  } else {
    c["error"] = std::string(event.status.message());
  }
  return write_line(nlohmann::json{{"step", event.step}, {"checkpoint", c}}.dump());
}

absl::Status MetricsWriter::write_resume(const LoadedCheckpoint& loaded) {
  nlohmann::json r = {{"dir", loaded.step_dir},
                      {"bytes", loaded.bytes},
                      {"load_ms", loaded.load_ms},
                      {"data_position", loaded.data_position},
                      {"skipped", loaded.skipped}};
  return write_line(nlohmann::json{{"step", loaded.step}, {"resumed", r}}.dump());
}

absl::Status MetricsWriter::write_recovery(const RecoveryReport& report) {
  nlohmann::json lost = nlohmann::json::array();
  for (const LostMember& m : report.lost)
    lost.push_back({{"at", actors::to_string(m.at)}, {"reason", m.reason}});
  nlohmann::json r = {{"failure", report.failure},       {"lost", lost},
                      {"restored", report.restored},     {"steps_lost", report.steps_lost},
                      {"detect_ms", report.detect_ms},   {"replace_ms", report.replace_ms},
                      {"restore_ms", report.restore_ms}, {"total_ms", report.total_ms}};
  if (report.checkpoint_step) r["checkpoint_step"] = *report.checkpoint_step;
  return write_line(nlohmann::json{{"step", report.step}, {"recovery", r}}.dump());
}

absl::Status MetricsWriter::write_resize(const ResizeReport& report) {
  nlohmann::json r = {{"from_dp", report.from_dp},
                      {"to_dp", report.to_dp},
                      {"cause", report.cause},
                      {"micro_batch", report.split.micro_batch},
                      {"grad_accum", report.split.grad_accum},
                      {"global_batch", report.global_batch},
                      {"ms", report.ms}};
  return write_line(nlohmann::json{{"step", report.step}, {"resize", r}}.dump());
}

}  // namespace troupe::trainers
