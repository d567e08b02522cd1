// StageTurns: the model chunks of one pipeline stage taking turns, as one
// device would run them (interleaved 1F1B, docs/parallelism.md).
//
// Under interleaved 1F1B a stage holds v chunks of the model; each chunk is a
// stage actor of its own (a virtual stage, with its own contiguous range,
// shard, groups and loader), and the chunks of a stage are spawned into one
// process. There they run their ops in the order of their stage's program,
// one op at a time: before a chunk runs the op at position i of the program,
// every other chunk present that began the step has run its ops before i.
//
//   auto turns = StageTurns::of("job/turns/d0.p1.t0", program);   // per chunk actor
//   turns->join(chunk);
//   turns->begin(chunk, step);
//   for each op of the chunk, at position i of the program:
//     turns->await(chunk, step, i, go_on, deadline);  run it;  turns->ran(chunk, i);
//   turns->end(chunk);   // also when the step failed: the others stop waiting for it
//
// The turns only order what would run anyway: a chunk's ops are the stage's
// program restricted to that chunk, whose receives wait for their sends, so
// the chunks get through a step whether or not their turns are taken (a
// chunk absent from the process - placed elsewhere - orders nothing here).
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "actors/pipeline/schedule.h"
#include "actors/stage_plan.h"

namespace troupe::actors {

class StageTurns {
 public:
  // The turns of the stage `key` in this process (the same object for every
  // chunk actor that asks while one holds it), for `program`, the stage's
  // program. REQUIRES: every caller with `key` passes the same program.
  static std::shared_ptr<StageTurns> of(const std::string& key,
                                        const std::vector<pipeline::PipelineOp>& program);

  explicit StageTurns(const std::vector<pipeline::PipelineOp>& program);

  // Chunk `chunk` takes part (until leave): the others wait for its ops.
  void join(int chunk);
  void leave(int chunk);
  // The chunk starts step `step`: none of its ops has run.
  void begin(int chunk, int64_t step);
  // Waits until the op at `turn` of the program, one of `chunk`'s, is next:
  // every other chunk present has run its ops before it in `step`, or is done
  // with the step. Checks `go_on` (if given) every few milliseconds, failing
  // with its error; DeadlineExceeded at `deadline`.
  absl::Status await(int chunk, int64_t step, size_t turn, const GoOn& go_on, absl::Time deadline);
  // The chunk ran the op at `turn` (its ops run in order).
  void ran(int chunk, size_t turn);
  // The chunk is done with its step, finished or failed: no one waits for it.
  void end(int chunk);

 private:
  struct Chunk {
    bool present = false;
    int64_t step = 0;  // the step it began last
    bool ended = true;
    size_t next = 0;  // its next op to run: its position in the program
  };
  // The position of chunk c's first op after position `after` (the
  // program's size when none).
  size_t next_of(int chunk, size_t after) const;
  // REQUIRES: mu_ held.
  bool is_next(int chunk, int64_t step, size_t turn) const;

  std::vector<int> chunk_at_;  // the chunk of each op of the program
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Chunk> chunks_;  // guarded by mu_
};

}  // namespace troupe::actors
