// The reductions a step issued on a stage's buffers, with their issue times:
// waited for at the step's end, their issue-to-completion times counted, or
// drained after a step that failed, before the buffers are cleared.
#pragma once

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "actors/gradient_sync.h"
#include "actors/step_clock.h"
#include "core/cluster/collective_group.h"
#include "transport/collectives/work.h"

namespace troupe::actors {

class PendingReductions {
 public:
  void add(transport::Work work, double issued_at_ms) {
    pending_.push_back(std::move(work));
    issued_at_.push_back(issued_at_ms);
  }
  // Waits for every one; the first error. Adds each one's time from its
  // issue to its completion (not to this wait: a reduction issued early in
  // backward is seen here only after backward) to times.comm_ms.
  absl::Status wait_all(SyncTimes& times) {
    absl::Status first;
    for (size_t i = 0; i < pending_.size(); ++i) {
      absl::Status s = CollectiveGroup::wait(pending_[i]);
      first.Update(s);
      if (s.ok()) times.comm_ms += ms_since_epoch(pending_[i].finished_at()) - issued_at_[i];
    }
    clear();
    return first;
  }
  // Waits for every one; their statuses were (or will be) reported by the
  // step that issued them.
  void drain() {
    for (const transport::Work& w : pending_)
      CollectiveGroup::wait(w).IgnoreError();
    clear();
  }

 private:
  void clear() {
    pending_.clear();
    issued_at_.clear();
  }

  std::vector<transport::Work> pending_;
  std::vector<double> issued_at_;
};

}  // namespace troupe::actors
