// Checkpointer: a training job's checkpoints, driven from the driver between
// steps (docs/checkpoint.md). It asks the shards to save (each writes its own
// file on its own node; no weights pass through the driver), writes the
// manifest once every file is durable, and loads a checkpoint - of any
// layout - back into the job.
//
//   Checkpointer checkpoints(controller, job_record(config, data_info), config.checkpoint);
//   for (k = ...) {
//     auto outcome = controller.step(k);
//     for (const CheckpointEvent& e : checkpoints.after_step(k)) report(e);
//   }
//   for (const CheckpointEvent& e : checkpoints.finish()) report(e);
//
// Saving is asynchronous (checkpoint.async): at the step boundary each shard
// copies its state into a staging buffer and returns; the files are written
// while training goes on, and the manifest and `latest` follow at the first
// step boundary after the last file is durable. At most one checkpoint is in
// flight: one that comes due while the previous is still being written waits
// for it. A failed save is an event with its error; training goes on, the
// previous checkpoint stays latest, and the failed save's directory is
// removed. A save of the step `latest` names is refused (AlreadyExists)
// unless that checkpoint fails verification (the one a resume fell back
// past): then the new one replaces it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"
#include "core/future.h"
#include "trainers/config.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

// What the manifest records of the job besides the controller's state.
struct JobRecord {
  nn::ModelConfig model;
  checkpoint::MeshLayout layout;
  std::string optimizer;  // "adamw" or "sgd"
  checkpoint::RngState rng;
  int64_t samples_per_epoch = 0;    // the data loaders'
  std::string config_json;          // to_json of the config
  std::string tokenizer = "bytes";  // the data's tokenizer id (trainers/run_tokenizer.h)
};
JobRecord job_record(const TrainConfig& config, int64_t samples_per_epoch);

// One checkpoint saved, or one that failed.
struct CheckpointEvent {
  int64_t step = 0;
  absl::Status status;  // OK: saved and latest
  std::string step_dir;
  int64_t bytes = 0;      // of the shards' files
  double staging_ms = 0;  // the step boundary's pause: the slowest shard's copy
  double write_ms = 0;    // the slowest shard's write, fsync and rename
  double total_ms = 0;    // from the save's start to the manifest's commit
  double waited_ms = 0;   // how long training waited for its files and its commit
};

// What loading found and did.
struct LoadedCheckpoint {
  int64_t step = 0;
  std::string step_dir;
  checkpoint::MeshLayout saved_layout;
  bool config_changed = false;  // its config hash differs from this run's
  // The newer checkpoints passed over, one line each, why.
  std::vector<std::string> skipped;
  int64_t bytes = 0;  // read by the shards, all together
  double load_ms = 0;
  int64_t data_position = 0;  // where the loaders continue
};

class Checkpointer {
 public:
  Checkpointer(TrainerController& controller, JobRecord job, CheckpointConfig config);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // After step `step` finished (applied or skipped): completes a checkpoint
  // whose files are all written, and starts one if `step` is due
  // (interval_steps). Returns the checkpoints that completed or failed.
  std::vector<CheckpointEvent> after_step(int64_t step);
  // Saves the job as it stands after the controller's last step, now (as
  // after_step does when due), and waits for it: the checkpoint in flight
  // before it, if any, then this one (the last event).
  //
  // `lost`: members whose shards are gone and were not replaced (a job that
  // ends for want of a node). The survivors save in their place: a range
  // the lost member shared with a survivor (a DDP replica) from that
  // survivor, a range only it held from the replica its buddy keeps; the
  // event's status says which when none survives.
  std::vector<CheckpointEvent> save_now(const std::vector<actors::Coordinate>& lost = {});
  // Waits for the checkpoint in flight, if any, and for the removal of the
  // checkpoints beyond the newest `keep` (done in the background).
  std::vector<CheckpointEvent> finish();
  bool in_flight() const { return pending_.has_value(); }
  // Points DIR/best at step `step`'s checkpoint (checkpoint.keep_best): no prune removes it after.
  // REQUIRES: a save of `step` started (after_step or save_now). Errors of the write.
  absl::Status mark_best(int64_t step);

  // Loads the newest loadable checkpoint in config.dir (or exactly `step`),
  // into every shard, moves every loader to its data cursor (rebased when dp
  // changed) and restores the controller, so that the job continues at the
  // checkpoint's step + 1. A checkpoint whose files fail their checksums as
  // the shards read them is passed over for the one before it, with a line
  // in `skipped`. NotFound when no checkpoint loads (naming each reason);
  // DataLoss when `step` is given and its files are corrupt; InvalidArgument
  // for one of another model or optimizer; other I/O errors as they are.
  absl::StatusOr<LoadedCheckpoint> load(std::optional<int64_t> step = std::nullopt);

 private:
  struct Pending {
    int64_t step = 0;
    std::string step_dir;
    ControllerState state;
    actors::Mesh mesh;                   // the job's when the save began (an elastic job resizes)
    std::vector<nn::ParamRange> stages;  // the pipeline stages' ranges (pp > 1)
    std::vector<int> writers;            // member indices
    std::vector<nn::ParamRange> parts;   // what each writer saves
    std::vector<bool> replicas;          // the writer saves the replica it keeps
    std::vector<actors::Coordinate> owners;  // the coordinate each part is saved as
    std::vector<Future<actors::ShardSaveReport>> reports;
    double start_ms = 0;
  };
  absl::Status start(int64_t step, const std::vector<actors::Coordinate>& lost = {});
  // Waits for the pending save's files and commits its manifest; the
  // event's waited_ms is the time this took.
  CheckpointEvent complete();
  // start(step), or an event of its failure appended to `events`.
  bool start_or_report(int64_t step, std::vector<CheckpointEvent>& events,
                       const std::vector<actors::Coordinate>& lost = {});
  void join_pruner();
  absl::StatusOr<LoadedCheckpoint> load_from(const std::string& step_dir,
                                             const checkpoint::Manifest& manifest);

  TrainerController& controller_;
  JobRecord job_;
  CheckpointConfig config_;
  std::optional<Pending> pending_;
  std::thread pruner_;  // removing the checkpoints beyond the newest `keep`
};

}  // namespace troupe::trainers
