// Members of a collective group, as a user's actor library (Ray's
// ray.util.collective): each joins the group the driver declared and
// allreduces. When one is lost, the others' operations fail with Aborted as
// soon as the head declares its node dead, and the driver re-forms the group
// - a new generation - with a replacement.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "core/cluster/collective_group.h"

namespace collective_recovery {

class Member {
 public:
  // Joins the latest generation of group `name`: this member's rank.
  absl::StatusOr<int> join(std::string name) {
    group_.reset();  // the previous generation, if any
    auto group = troupe::CollectiveGroup::join(name, absl::Seconds(30));
    if (!group.ok()) return group.status();
    group_ = *std::move(group);
    return group_->rank();
  }
  // Sums rank + 1 over the group, in `count` elements: the sum.
  absl::StatusOr<double> allreduce(int64_t count) {
    if (!group_) return absl::FailedPreconditionError("not in a group");
    std::vector<float> data(static_cast<size_t>(count), static_cast<float>(group_->rank() + 1));
    absl::Status s = group_->allreduce(troupe::DType::kFloat32, troupe::ReduceOp::kSum, data.data(),
                                       data.size());
    if (!s.ok()) return s;
    return data[0];
  }
  void crash() { ::kill(::getpid(), SIGKILL); }  // a machine failure

 private:
  std::unique_ptr<troupe::CollectiveGroup> group_;
};
TROUPE_ACTOR(Member, &Member::join, &Member::allreduce, &Member::crash);

}  // namespace collective_recovery
