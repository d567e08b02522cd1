// What the controller, the stages and the shards of a training job say to each
// other: the optimizer they build, a step's request and report, a commit. All
// codable (core/codec.h), so the controller may run in another process than
// the actors. The model itself is nn::ModelConfig (one config type; its Codec is
// in actors/nn_codecs.h).
//
// Step ids. Step k is the k-th iteration of training (the k-th global batch),
// from 1, whether its update is applied or skipped (an fp16 overflow). Every
// call that changes a step's state names it and is refused, with
// FailedPrecondition naming both steps, for any step other than the one the
// actor expects (pipeline_stage_actor.h and param_shard_actor.h give each
// actor's rule). So after any failure the controller knows where every actor
// stands: a step is applied by every shard or by none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/mesh.h"
#include "actors/nn_codecs.h"
#include "core/codec.h"
#include "nn/optim/adamw.h"
#include "nn/optim/param_range.h"
#include "nn/optim/sgd.h"

namespace troupe::actors {

struct OptimizerSpec {
  enum Kind : int32_t { kAdamW = 0, kSgd = 1 };
  int32_t kind = kAdamW;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  nn::AdamWConfig adamw(float lr) const;
  nn::SgdConfig sgd(float lr) const;
  TROUPE_FIELDS(kind, beta1, beta2, eps, weight_decay, momentum, dampening, nesterov);
};

// Asks every stage for step `step`: run its micro-batches forward and
// backward, with the loss multiplied by `loss_scale`, and synchronise the
// gradients across data-parallel ranks. Nothing is applied until commit.
struct StepRequest {
  int64_t step = 0;
  float loss_scale = 1.0f;
  TROUPE_FIELDS(step, loss_scale);
};

// What one rank of a stage holds, in bytes (docs/zero.md): its model state
// (parameters, gradients, optimizer state and fp32 masters), the most its
// gather buffers and gradient buckets held at once in the step, its
// activations, and the peak resident set of its process.
struct MemoryReport {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t buffers = 0;
  int64_t activations = 0;
  int64_t peak_rss = 0;
  int64_t model_state() const { return parameters + gradients + optimizer_state; }
  // Each field the larger of the two (the largest rank's, the run's peak).
  MemoryReport max_with(const MemoryReport& o) const;
  // Both together, in one process (the chunks of an interleaved stage): the
  // sum of each, the larger peak RSS (the process's).
  MemoryReport plus(const MemoryReport& o) const;
  TROUPE_FIELDS(parameters, gradients, optimizer_state, buffers, activations, peak_rss);
};

// The bytes one rank sent to its data-parallel group in a step, by
// collective.
struct TrafficReport {
  // Over the data-parallel group, by collective.
  int64_t allreduce = 0;
  int64_t reduce_scatter = 0;
  int64_t allgather = 0;
  // pp > 1: over the pipe group (activations, their gradients, the tied
  // embedding and its gradient); tp > 1: over the tp group (its all-reduces).
  int64_t pipeline = 0;
  int64_t tensor_parallel = 0;
  // pp > 1: of what the rank received over the pipe group, the bytes that
  // landed where it computes without a copy (a receive posted before its
  // message, on a transport that places payloads: UCX). Not in total().
  int64_t pipeline_received_in_place = 0;
  int64_t total() const {
    return allreduce + reduce_scatter + allgather + pipeline + tensor_parallel;
  }
  TrafficReport max_with(const TrafficReport& o) const;
  TrafficReport plus(const TrafficReport& o) const;  // both together
  TROUPE_FIELDS(allreduce, reduce_scatter, allgather, pipeline, tensor_parallel,
                pipeline_received_in_place);
};

// One op of a stage's schedule as it ran (a pipeline's or not): its kind
// (pipeline::OpKind), micro-batch, and when it began and ended, in
// milliseconds since the stage began its schedule. A receive's time is the
// wait for its sender.
struct TimelineEvent {
  int32_t kind = 0;
  int32_t micro = 0;
  double begin_ms = 0;
  double end_ms = 0;
  // Just before begin_ms: how long the op waited for what it works on (a forward for its batch
  // from the loader, the first stage's last backward for the tied embedding's gradient).
  double wait_ms = 0;
  TROUPE_FIELDS(kind, micro, begin_ms, end_ms, wait_ms);
};

// What a stage did in a step. Timings in milliseconds.
//
// Ownership: after the gradient exchange a stage holds final, reduced
// gradients for `owned`, a range of the flat parameter buffer of tensor
// slice `at.t` (for tp = 1, the model's buffer, nn/gpt_param_layout.h), whose
// whole size is `slice_params`. `grad_norm_sq` covers exactly that range.
// Stages of different pipeline ranks own disjoint ranges; data-parallel
// replicas own the same range (DDP: the stage's whole range, so their norms
// must agree bit for bit) or disjoint shares of it (ZeRO). The controller
// sums the norms of the distinct ranges, which must tile [0, slice_params).
struct StepReport {
  int64_t step = 0;
  Coordinate at;
  nn::ParamRange owned;
  int64_t slice_params = 0;
  bool holds_loss = false;  // the last pipeline stage: `loss` and `samples` are this rank's
  double loss = 0;          // mean over this rank's micro-batches (unscaled)
  double grad_norm_sq = 0;  // of the owned reduced gradients, still multiplied by loss_scale
  bool found_inf = false;   // an owned reduced gradient is inf or NaN
  int64_t samples = 0;
  int64_t tokens = 0;
  std::vector<int64_t> sample_ids;  // of this rank's micro-batches, in order
  int64_t data_position = 0;        // the loader's global position after the step
  int64_t epoch = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double comm_ms = 0;          // issue to completion of every gradient reduction, summed
  double comm_exposed_ms = 0;  // in reduction calls during backward, and waiting after it
  double step_ms = 0;
  MemoryReport memory;
  TrafficReport sent;
  // The schedule's ops as they ran, and how long the schedule took
  // (from its first op to the end of its last); `chunks`: the model chunks
  // its stage holds (interleaved 1F1B: this rank is one of them).
  // `began_ms`: when the schedule began, on the steady clock (the timeline's
  // times are from then), so that the chunks of an interleaved stage, in one
  // process, can be put in one order.
  std::vector<TimelineEvent> timeline;
  double schedule_ms = 0;
  double began_ms = 0;
  int32_t chunks = 1;
  // The shard's update of the step before (`updated_step`, 0: none): how long its optimizer kernel
  // took, which the shard only learns after this stage reported that step.
  int64_t updated_step = 0;
  double update_ms = 0;
  TROUPE_FIELDS(step, at, owned, slice_params, holds_loss, loss, grad_norm_sq, found_inf, samples,
                tokens, sample_ids, data_position, epoch, forward_ms, backward_ms, comm_ms,
                comm_exposed_ms, step_ms, memory, sent, timeline, schedule_ms, began_ms, chunks,
                updated_step, update_ms);
};

// Applies step `step`: params -= update(lr, grads * grad_scale). grad_scale
// folds in 1 / loss_scale and the clipping coefficient.
struct CommitRequest {
  int64_t step = 0;
  float lr = 0;
  float grad_scale = 1.0f;
  TROUPE_FIELDS(step, lr, grad_scale);
};

// Checkpoints (checkpoint/, docs/checkpoint.md). Asks a shard to save its
// state as it stands after step `step` into `step_dir`, a directory of the
// checkpoint that every node reaches (a shared file system), as a file of
// its own: checkpoint::shard_file_name of `owner`. `range`: the part of
// its range to save (replicas of a range each save a part of it); empty
// (0, 0): all of it.
struct SaveRequest {
  std::string step_dir;
  int64_t step = 0;
  nn::ParamRange range;
  // The coordinate the range's owner has in the mesh now, which names its
  // file and the manifest's owner: after a resize not the coordinate its
  // shard was spawned at.
  Coordinate owner;
  TROUPE_FIELDS(step_dir, step, range, owner);
};

// One entry of a shard's file (checkpoint::ShardEntry).
struct SavedEntry {
  std::string state;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t xxh64 = 0;
  TROUPE_FIELDS(state, offset, length, xxh64);
};

// What a shard saved: its file, the range it holds and the file's entries,
// with the time the step boundary paid (copying the state into the staging
// buffer) and the time the background write took (write, fsync, rename).
struct ShardSaveReport {
  std::string file;
  // The coordinate whose state the file holds: the writer's own, or the one
  // whose replica it keeps (ParamShardActor::save_replica).
  Coordinate owner;
  nn::ParamRange range;
  std::vector<SavedEntry> entries;
  int64_t bytes = 0;
  double staging_ms = 0;
  double write_ms = 0;
  TROUPE_FIELDS(file, owner, range, entries, bytes, staging_ms, write_ms);
};

// Asks a shard to load its range of the checkpoint in `step_dir` (any
// layout: it reads what it needs from whichever files hold it).
struct LoadRequest {
  std::string step_dir;
  // The range the shard owns in the mesh now: a shard that holds no weights
  // yet (a replacement) takes it, as its stage's partition may have moved
  // since it was spawned (elasticity); another must own it already.
  nn::ParamRange range;
  TROUPE_FIELDS(step_dir, range);
};

struct ShardLoadReport {
  int64_t step = 0;  // the checkpoint's: the shard is now at it
  int64_t bytes = 0;
  double load_ms = 0;
  TROUPE_FIELDS(step, bytes, load_ms);
};

// Recovery (docs/fault_tolerance.md). A shard's whole state as it stands
// after step `step`: for each kind of state in `states` (checkpoint/
// manifest.h's names: the masters, then the optimizer's moments), range.size()
// fp32 values, one kind after the other in `data` (out of band). What a
// replacement of a lost shard is restored from, peer to peer, when another
// shard holds the same range (a DDP replica).
struct ShardState {
  Coordinate from;
  int64_t step = 0;     // the last step applied
  int64_t updates = 0;  // optimizer updates applied
  nn::ParamRange range;
  std::vector<std::string> states;
  transport::Buffer data;
  TROUPE_FIELDS(from, step, updates, range, states, data);
};

// Buddy replication (ZeRO): what a shard sends the shard that keeps its
// replica when step `commit.step` is prepared - the step's reduced gradients
// of its range (range.size() fp32 values, out of band) and the update to
// apply with them - so that the replica can follow the step once it is
// committed.
struct ReplicaUpdate {
  Coordinate from;
  CommitRequest commit;
  transport::Buffer grads;
  TROUPE_FIELDS(from, commit, grads);
};

// Elasticity (trainers/elastic_batch.h): a stage's place in a job of
// another size, and where the data continues.
struct StageShape {
  int dp = 1;
  int rank = 0;  // the stage's data-parallel rank in [0, dp)
  int micro_batch = 1;
  int grad_accum = 1;
  int64_t position = 0;  // the global data position the next step starts at
  TROUPE_FIELDS(dp, rank, micro_batch, grad_accum, position);
};

// Where a coordinate's step stands, answered by its shard while the stage is
// busy running the step (ParamShardActor::progress). Every rank issues the
// same collectives in the same order, so a rank that issued fewer than
// another in the same generation has not reached the one the other waits
// in: how a hung rank is told from those waiting for it.
struct StepProgress {
  int64_t running_step = 0;         // the step the stage is running; 0: none
  bool grouped = false;             // it has a data-parallel group
  uint64_t generation = 0;          // of that group
  uint64_t collectives_issued = 0;  // in that generation
  TROUPE_FIELDS(running_step, grouped, generation, collectives_issued);
};

// Elasticity under ZeRO: a part of a shard's new partition, and whose
// state it is taken from - the source shard's own, or the replica it keeps
// of its buddy (a lost owner's), caught up to committed step replica_step.
struct PartitionPart {
  nn::ParamRange range;
  bool from_replica = false;
  int64_t replica_step = 0;
  TROUPE_FIELDS(range, from_replica, replica_step);
};

struct ShardRestoreReport {
  Coordinate from;   // the shard whose state it took
  int64_t step = 0;  // the shard is now at it
  int64_t bytes = 0;
  double restore_ms = 0;  // asking for the state, its transfer and taking it
  TROUPE_FIELDS(from, step, bytes, restore_ms);
};

}  // namespace troupe::actors
