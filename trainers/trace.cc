#include "trainers/trace.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "actors/pipeline/schedule.h"
#include "core/cluster/detail/http_json.h"

namespace troupe::trainers {
namespace {

constexpr int kDriverPid = 0;
enum DriverThread { kSteps = 1, kCommits = 2, kCheckpoints = 3, kRecovery = 4, kValidation = 5 };
constexpr int kStageThread = 1;
constexpr int kShardThread = 2;
constexpr double kFlushIntervalUs = 500'000;

// A time in microseconds (to the nanosecond), or an argument's value (9 significant digits).
std::string num(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.3f", v) : "null";
}
std::string value(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.9g", v) : "null";
}

}  // namespace

absl::StatusOr<TraceWindow> parse_trace_window(const std::string& text) {
  const size_t colon = text.find(':');
  TraceWindow w;
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--trace-steps '", text, "': give A:B (steps A to B), A: (from A) or :B (to B)"));
  };
  if (colon == std::string::npos) return bad();
  const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
  if (a.empty() && b.empty()) return bad();
  if (!a.empty() && (!absl::SimpleAtoi(a, &w.first) || w.first < 1)) return bad();
  if (!b.empty() && (!absl::SimpleAtoi(b, &w.last) || w.last < w.first)) return bad();
  return w;
}

absl::StatusOr<TraceWriter> TraceWriter::open(const std::string& path, TraceWindow window) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  FILE* file = ec ? nullptr : std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("trace: cannot create ", path, ": ",
                                            ec ? ec.message() : std::strerror(errno)));
  }
  TraceWriter writer(file, path, window);
  writer.metadata(kDriverPid, 0, "process_name", "driver");
  writer.metadata(kDriverPid, kSteps, "thread_name", "steps");
  writer.metadata(kDriverPid, kCommits, "thread_name", "optimizer commits");
  writer.metadata(kDriverPid, kCheckpoints, "thread_name", "checkpoints");
  writer.metadata(kDriverPid, kRecovery, "thread_name", "recovery and resizes");
  writer.metadata(kDriverPid, kValidation, "thread_name", "validation");
  writer.flush();
  if (!writer.failed_.ok()) return writer.failed_;
  return writer;
}

TraceWriter::TraceWriter(FILE* file, std::string path, TraceWindow window)
    : file_(file), path_(std::move(path)), window_(window), start_(absl::Now()) {
  if (std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", file_) < 0) {
    failed_ =
        absl::InternalError(absl::StrCat("trace: writing ", path_, ": ", std::strerror(errno)));
  }
  tail_ = std::ftell(file_);
}

TraceWriter::TraceWriter(TraceWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      window_(other.window_),
      start_(other.start_),
      pending_(std::move(other.pending_)),
      tail_(other.tail_),
      first_event_(other.first_event_),
      flushed_us_(other.flushed_us_),
      committed_step_(other.committed_step_),
      commit_began_us_(other.commit_began_us_),
      pids_(std::move(other.pids_)),
      failed_(std::move(other.failed_)) {}

TraceWriter::~TraceWriter() {
  if (file_ == nullptr) return;
  flush();
  std::fclose(file_);
}

double TraceWriter::now_us() const {
  return absl::ToDoubleMicroseconds(absl::Now() - start_);
}

void TraceWriter::metadata(int pid, int tid, const char* what, const std::string& name) {
  absl::StrAppend(&pending_, first_event_ ? "" : ",\n", "{\"ph\": \"M\", \"pid\": ", pid,
                  ", \"tid\": ", tid, ", \"name\": \"", what,
                  "\", \"args\": {\"name\": ", cluster::json_string(name), "}}");
  first_event_ = false;
}

void TraceWriter::span(int pid, int tid, const std::string& name, const std::string& cat,
                       double ts_us, double dur_us, const std::string& args_json) {
  absl::StrAppend(&pending_, first_event_ ? "" : ",\n", "{\"ph\": \"X\", \"pid\": ", pid,
                  ", \"tid\": ", tid, ", \"name\": ", cluster::json_string(name),
                  ", \"cat\": ", cluster::json_string(cat), ", \"ts\": ", num(ts_us),
                  ", \"dur\": ", num(std::max(0.0, dur_us)),
                  args_json.empty() ? "" : ", \"args\": ", args_json, "}");
  first_event_ = false;
}

void TraceWriter::counter(int pid, const std::string& name, double ts_us,
                          const std::string& args_json) {
  absl::StrAppend(&pending_, first_event_ ? "" : ",\n", "{\"ph\": \"C\", \"pid\": ", pid,
                  ", \"name\": ", cluster::json_string(name), ", \"ts\": ", num(ts_us),
                  ", \"args\": ", args_json, "}");
  first_event_ = false;
}

int TraceWriter::rank_pid(const std::string& rank) {
  auto [it, added] = pids_.emplace(rank, static_cast<int>(pids_.size()) + 1);
  if (added) {
    metadata(it->second, 0, "process_name", "rank " + rank);
    metadata(it->second, kStageThread, "thread_name", "stage");
    metadata(it->second, kShardThread, "thread_name", "shard");
  }
  return it->second;
}

void TraceWriter::flush() {
  if (!failed_.ok() || file_ == nullptr) return;
  // Over the last closing "]}": the new events, then the closing again.
  const bool ok = std::fseek(file_, tail_, SEEK_SET) == 0 &&
                  std::fwrite(pending_.data(), 1, pending_.size(), file_) == pending_.size();
  const long tail = ok ? std::ftell(file_) : -1;
  if (!ok || tail < 0 || std::fputs("\n]}\n", file_) < 0 || std::fflush(file_) != 0) {
    failed_ =
        absl::InternalError(absl::StrCat("trace: writing ", path_, ": ", std::strerror(errno)));
    return;
  }
  tail_ = tail;
  pending_.clear();
}

void TraceWriter::step(const StepOutcome& s, double begin_us, double end_us) {
  if (!window_.contains(s.step)) return;
  span(kDriverPid, kSteps, absl::StrCat("step ", s.step), "step", begin_us, end_us - begin_us,
       absl::StrCat("{\"loss\": ", value(s.loss), ", \"lr\": ", value(s.lr),
                    ", \"grad_norm\": ", value(s.grad_norm), ", \"tokens\": ", s.tokens,
                    ", \"dp\": ", s.dp, ", \"applied\": ", s.applied ? "true" : "false", "}"));
  // The two-phase commit of the shards' update ends the step.
  if (s.applied) {
    span(kDriverPid, kCommits, absl::StrCat("commit step ", s.step), "commit",
         end_us - 1000 * s.commit_ms, 1000 * s.commit_ms,
         absl::StrCat("{\"lr\": ", value(s.lr), "}"));
  }
  std::map<std::string, const StageTimeline*> timelines;
  for (const StageTimeline& t : s.timelines)
    timelines[actors::to_string(t.at)] = &t;
  for (const RankUsage& r : s.ranks) {
    const std::string rank = actors::to_string(r.at);
    const int pid = rank_pid(rank);
    const std::string sent = absl::StrCat(
        "{\"allreduce_bytes\": ", r.sent.allreduce,
        ", \"reduce_scatter_bytes\": ", r.sent.reduce_scatter,
        ", \"allgather_bytes\": ", r.sent.allgather, ", \"pipeline_bytes\": ", r.sent.pipeline,
        ", \"tensor_parallel_bytes\": ", r.sent.tensor_parallel, "}");
    double at = begin_us;
    if (auto t = timelines.find(rank); t != timelines.end()) {
      for (const actors::TimelineEvent& e : t->second->events) {
        const auto op = static_cast<actors::pipeline::OpKind>(e.kind);
        const std::string kind(actors::pipeline::op_kind_name(op));
        if (e.wait_ms >= 0.001) {
          span(pid, kStageThread,
               absl::StrCat(kind == "forward" ? "wait for batch " : "wait before backward ",
                            e.micro),
               "wait", begin_us + 1000 * (e.begin_ms - e.wait_ms), 1000 * e.wait_ms);
        }
        span(pid, kStageThread, absl::StrCat(kind, " ", e.micro),
             std::string(actors::pipeline::op_kind_group(op)), begin_us + 1000 * e.begin_ms,
             1000 * (e.end_ms - e.begin_ms));
      }
      at = begin_us + 1000 * t->second->schedule_ms;
    } else {
      span(pid, kStageThread, "forward", "forward", at, 1000 * r.forward_ms);
      at += 1000 * r.forward_ms;
      span(pid, kStageThread, "backward", "backward", at, 1000 * r.backward_ms);
      at += 1000 * r.backward_ms;
    }
    span(pid, kStageThread, "gradient reductions (exposed)", "collective", at,
         1000 * r.comm_exposed_ms, sent);
    if (r.updated_step > 0 && r.updated_step == committed_step_) {
      span(pid, kShardThread, absl::StrCat("update step ", r.updated_step), "optimizer",
           commit_began_us_, 1000 * r.update_ms);
    }
    counter(pid, "memory", begin_us,
            absl::StrCat("{\"parameters\": ", r.memory.parameters, ", \"gradients\": ",
                         r.memory.gradients, ", \"optimizer_state\": ", r.memory.optimizer_state,
                         ", \"buffers\": ", r.memory.buffers,
                         ", \"activations\": ", r.memory.activations, "}"));
  }
  if (s.applied) {
    committed_step_ = s.step;
    commit_began_us_ = end_us - 1000 * s.commit_ms;
  }
  // Steps are flushed at most every kFlushInterval (the trace is then valid up to them), the rare
  // events at once.
  if (end_us - flushed_us_ >= kFlushIntervalUs) {
    flush();
    flushed_us_ = end_us;
  }
}

void TraceWriter::checkpoint(const CheckpointEvent& e, double end_us) {
  if (!window_.contains(e.step)) return;
  const double dur = 1000 * e.total_ms;
  span(kDriverPid, kCheckpoints, absl::StrCat("checkpoint of step ", e.step), "checkpoint",
       end_us - dur, dur,
       absl::StrCat("{\"ok\": ", e.status.ok() ? "true" : "false", ", \"bytes\": ", e.bytes,
                    ", \"staging_ms\": ", num(e.staging_ms), ", \"write_ms\": ", num(e.write_ms),
                    ", \"dir\": ", cluster::json_string(e.step_dir), "}"));
  flush();
}

void TraceWriter::recovery(const RecoveryReport& r, double end_us) {
  if (!window_.contains(r.step)) return;
  double at = end_us - 1000 * r.total_ms;
  span(kDriverPid, kRecovery, absl::StrCat("recovery at step ", r.step), "recovery", at,
       1000 * r.total_ms,
       absl::StrCat("{\"failure\": ", cluster::json_string(r.failure),
                    ", \"steps_lost\": ", r.steps_lost, "}"));
  for (const auto& [part, ms] : {std::pair<const char*, double>{"detect", r.detect_ms},
                                 {"replace", r.replace_ms},
                                 {"restore", r.restore_ms}}) {
    span(kDriverPid, kRecovery, part, "recovery", at, 1000 * ms);
    at += 1000 * ms;
  }
  flush();
}

void TraceWriter::resize(const ResizeReport& r, double end_us) {
  if (!window_.contains(r.step)) return;
  span(kDriverPid, kRecovery, absl::StrCat("resize dp ", r.from_dp, " to ", r.to_dp), "resize",
       end_us - 1000 * r.ms, 1000 * r.ms,
       absl::StrCat("{\"cause\": ", cluster::json_string(r.cause), "}"));
  flush();
}

void TraceWriter::validation(int64_t step, double loss, double begin_us, double end_us) {
  if (!window_.contains(step)) return;
  span(kDriverPid, kValidation, absl::StrCat("validation at step ", step), "validation", begin_us,
       end_us - begin_us, absl::StrCat("{\"loss\": ", value(loss), "}"));
  flush();
}

}  // namespace troupe::trainers
