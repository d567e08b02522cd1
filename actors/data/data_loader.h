// DataLoader: one data-parallel replica's stream of micro-batches from a
// token dataset or a synthetic task, ordered by a DistributedSampler
// (sampler.h) and prepared ahead on a background thread. DataLoaderActor
// (data_loader_actor.h) runs one as an actor; a trainer in one process may
// use it directly.
//
//   auto loader = DataLoader::create({.path = "/data/shakespeare", .seq_len = 64,
//                                     .micro_batch = 8, .grad_accum = 2, .dp = 4, .rank = 1});
//   absl::StatusOr<Batch> batch = (*loader)->next();   // B = 8 samples, T = 64
//   int64_t cursor = (*loader)->position();             // save it with the checkpoint
//   ...
//   (*loader)->seek(cursor);                            // after a restart
//
// A batch depends only on the options and its position, never on timing:
// every prefetch depth gives the same batches. The methods are thread-safe
// (a stage may take batches while the actor answers info() or seek()).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/data/addition_task.h"
#include "actors/data/sampler.h"
#include "actors/data/token_dataset.h"
#include "core/codec.h"

namespace troupe::actors {

struct LoaderOptions {
  std::string path;              // a token dataset's PREFIX (PREFIX.bin, PREFIX.json), or
  std::string task;              // "addition": generate the dataset (then path is empty)
  AdditionTaskOptions addition;  // for task "addition"; its seq_len is 0 or equal to seq_len
  int seq_len = 64;              // T
  int micro_batch = 1;           // m: samples of this replica per micro-step
  int grad_accum = 1;            // a: micro-steps per optimizer step
  int dp = 1;                    // data-parallel replicas
  int rank = 0;                  // this replica, in [0, dp)
  uint64_t seed = 1;             // the epochs' shuffles
  bool shuffle = true;           // false: samples in order
  int prefetch = 2;              // micro-batches prepared ahead; 0: none, no thread
  int64_t start_position = 0;    // the global position to start at (sampler.h)
  // The training job (actors/mesh.h): when set, DataLoaderActor hands its
  // loader to the stage of its coordinate (actors/handoff.h).
  std::string job;
  // The pipeline stage and tensor slice it feeds (its coordinate's p and
  // t): every stage and slice of a replica has a loader of the same batches
  // (the first stage reads the inputs, the last the targets).
  int stage = 0;
  int slice = 0;
  TROUPE_FIELDS(path, task, addition, seq_len, micro_batch, grad_accum, dp, rank, seed, shuffle,
                prefetch, start_position, job, stage, slice);
};

// One replica's share of one micro-step. B = sample_ids.size() (= micro_batch),
// T = seq_len; inputs and targets are B x T, row-major.
struct Batch {
  int64_t position = 0;  // the global position of the micro-step
  int64_t epoch = 0;     // the epoch of `position`
  int seq_len = 0;
  std::vector<int64_t> sample_ids;  // B
  std::vector<int32_t> inputs;      // B x T
  std::vector<int32_t> targets;     // B x T: inputs shifted by one token
  TROUPE_FIELDS(position, epoch, seq_len, sample_ids, inputs, targets);
};

struct LoaderInfo {
  std::string source;  // the dataset's name() and, in parentheses, its header's source
  int64_t num_tokens = 0;
  int64_t vocab_size = 0;
  int seq_len = 0;
  int64_t num_samples = 0;               // N = (num_tokens - 1) / seq_len
  int64_t samples_per_micro_step = 0;    // m x dp, over all replicas
  int64_t samples_per_replica_step = 0;  // m x a, one replica's per optimizer step
  int64_t global_batch = 0;              // G = m x a x dp
  int64_t steps_per_epoch = 0;           // N / G
  int64_t samples_per_epoch = 0;         // S = steps_per_epoch x G
  TROUPE_FIELDS(source, num_tokens, vocab_size, seq_len, num_samples, samples_per_micro_step,
                samples_per_replica_step, global_batch, steps_per_epoch, samples_per_epoch);
};

// The dataset `options` names: opens options.path, or generates the task.
// InvalidArgument for neither or both, an unknown task, or bad task options;
// the errors of TokenDataset::open.
[[nodiscard]] absl::StatusOr<TokenDataset> load_dataset(const LoaderOptions& options);

class DataLoader {
 public:
  // Loads the dataset (load_dataset) and starts the prefetch thread.
  // InvalidArgument naming the option for seq_len, micro_batch, grad_accum
  // or dp < 1, a rank outside [0, dp), prefetch outside [0, 1024),
  // start_position < 0, or a dataset with fewer than G samples of seq_len
  // (naming the dataset, its tokens and G); NotFound for a missing dataset.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DataLoader>> create(LoaderOptions options);
  // The same over a dataset already loaded (replicas in one process may
  // share one); options.path, task and addition are then not used.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DataLoader>> create(LoaderOptions options,
                                                                          TokenDataset dataset);
  // Stops and joins the prefetch thread.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The micro-batch at position() for this rank; advances position() by
  // m x dp. On error (DataLoss: a bad token in the file) the position stays
  // and next() returns the same error until seek().
  [[nodiscard]] absl::StatusOr<Batch> next();
  // The global position of the batch next() returns.
  int64_t position() const;
  // Makes next() continue at `position` (a saved position()); drops the
  // batches prepared ahead. InvalidArgument for position < 0.
  [[nodiscard]] absl::Status seek(int64_t position);
  // Resuming a run whose sampler had `from_samples_per_epoch` (its info's
  // samples_per_epoch) and stopped at `position`: seeks to where this
  // loader's sequence continues it (DistributedSampler::rebase_position) and
  // returns that position. InvalidArgument for position < 0 or
  // from_samples_per_epoch < 1.
  [[nodiscard]] absl::StatusOr<int64_t> seek_rebased(int64_t position,
                                                     int64_t from_samples_per_epoch);
  // Elasticity (trainers/elastic_batch.h): this replica's share of the data
  // at a new size - rank `rank` of `dp`, micro-batches of `micro_batch`,
  // `grad_accum` of them a step - continuing at global `position`. The
  // global batch must stay m x a x dp, so that a position means the same data
  // (and an epoch the same samples) before and after. Drops the batches
  // prepared ahead. InvalidArgument, changing nothing, for options create
  // would refuse, another global batch, or position < 0.
  [[nodiscard]] absl::Status reshape(int dp, int rank, int micro_batch, int grad_accum,
                                     int64_t position);
  LoaderInfo info() const;
  const TokenDataset& dataset() const { return dataset_; }

 private:
  DataLoader(LoaderOptions options, TokenDataset dataset, DistributedSampler sampler);
  absl::StatusOr<Batch> make_batch(const DistributedSampler& sampler, int64_t position) const;
  void produce();
  // Drops the batches prepared ahead and continues at `position`, with
  // `sampler` from now on unless it is null.
  void move_to(int64_t position, std::shared_ptr<const DistributedSampler> sampler);
  // info_'s fields that follow the sampler. REQUIRES: mu_ held, or no other thread yet.
  void describe_sampler();

  const LoaderOptions options_;
  const TokenDataset dataset_;
  // Replaced by reshape (under mu_); a batch is made from the sampler of its
  // generation, which its maker holds.
  std::shared_ptr<const DistributedSampler> sampler_;
  LoaderInfo info_;  // guarded by mu_

  mutable std::mutex mu_;
  std::condition_variable ready_;  // a batch or an error was queued
  std::condition_variable room_;   // the queue has room, or seek, or stop
  // Invariant: queue_ holds the batches at consumer_position_,
  // consumer_position_ + m dp, ..., and produce_position_ follows the last.
  std::deque<Batch> queue_;
  std::optional<absl::Status> error_;  // the producer failed at produce_position_
  int64_t consumer_position_ = 0;
  int64_t produce_position_ = 0;
  uint64_t generation_ = 0;  // bumped by seek: a batch built before it is dropped
  bool stop_ = false;
  std::thread producer_;
};

}  // namespace troupe::actors
