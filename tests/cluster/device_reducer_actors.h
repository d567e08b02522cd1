// An actor for the GPU cluster tests: a member of a collective group whose
// buffers are in CUDA device memory. Built as a user actor library that the
// workers load (--actor-lib) and the test driver links; it links the CUDA
// runtime, so it is built only where the NCCL backend is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/actor.h"
#include "core/cluster/collective_group.h"

namespace troupe::testing {

class DeviceReducer {
 public:
  // Joins the latest generation of group `name` with its buffers on CUDA
  // device `device`; -2: the first GPU this actor holds (gpu_ids()).
  // Returns the path its device buffers take: "device" or "staged".
  absl::StatusOr<std::string> join(std::string name, int device);
  // Allreduces (sum) `count` floats of rank + 1 in device memory; returns
  // the result's first and last elements, read back.
  absl::StatusOr<std::vector<float>> allreduce(int64_t count);
  // Issues an allreduce of `count` floats in device memory that no other
  // member issues, aborts the group after `ms`, and says how it went:
  // "<pending|done> after <ms> ms|<the allreduce's status>|<failed()>".
  absl::StatusOr<std::string> abort_alone(int64_t count, int ms);
  // The group's failed(), as text.
  std::string failed() const;

 private:
  std::unique_ptr<CollectiveGroup> group_;
  int device_ = -1;
};
TROUPE_ACTOR(DeviceReducer, &DeviceReducer::join, &DeviceReducer::allreduce,
             &DeviceReducer::abort_alone, &DeviceReducer::failed);

}  // namespace troupe::testing
