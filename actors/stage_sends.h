// StageSends: what a pipeline stage has sent and the transport may still be
// reading. A stage sends its activations and their gradients without copying
// them (CollectiveGroup::send_borrowed_async): the transport reads them where
// the stage computed them, so the memory must stay unchanged until each send
// is done. The stage waits for a send before it writes that memory again, and
// for all of them before its step ends.
//
//   StageSends sends;
//   sends.add(out, pipe.send_borrowed_async(next, tag, out, bytes));
//   ...
//   sends.await(out, go_on, deadline);   // before writing `out` again
//   sends.await_all(go_on, deadline);    // the step is done with them
//
// Not thread-safe: one stage's step uses it.
#pragma once

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "actors/stage_plan.h"
#include "core/cluster/collective_group.h"

namespace troupe::actors {

class StageSends {
 public:
  // A send in flight from `memory` (the start of what it reads).
  void add(const void* memory, Work work) { in_flight_.emplace_back(memory, std::move(work)); }
  // Waits for every send from `memory`; fails with the first send's error,
  // with go_on's once that fails, or DeadlineExceeded after `deadline`.
  absl::Status await(const void* memory, const GoOn& go_on, absl::Time deadline);
  absl::Status await_all(const GoOn& go_on, absl::Time deadline);
  size_t in_flight() const { return in_flight_.size(); }

 private:
  absl::Status await_if(const void* memory, bool all, const GoOn& go_on, absl::Time deadline);

  std::vector<std::pair<const void*, Work>> in_flight_;
};

}  // namespace troupe::actors
