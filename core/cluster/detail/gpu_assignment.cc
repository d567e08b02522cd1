#include "core/cluster/detail/gpu_assignment.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cluster/detail/resources.h"

namespace troupe::cluster {
namespace {

constexpr double kEpsilon = Resources::kEpsilon;

bool is_whole(double amount) {
  return std::fabs(amount - std::round(amount)) <= kEpsilon;
}

}  // namespace

absl::Status check_gpu_request(double amount) {
  if (amount < 1.0 - kEpsilon || is_whole(amount)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("GPU=", amount,
                   ": an actor asks for a whole number of GPUs or a fraction of one, as in Ray "
                   "(GPU=",
                   std::ceil(amount), ", or GPU=0.5)"));
}

GpuAssignment::GpuAssignment(int devices) : used_(static_cast<size_t>(devices > 0 ? devices : 0)) {}

absl::StatusOr<std::vector<int>> GpuAssignment::assign(uint64_t actor, double amount) {
  if (auto it = held_.find(actor); it != held_.end()) return it->second.devices;
  if (absl::Status s = check_gpu_request(amount); !s.ok()) return s;
  if (amount <= kEpsilon) return std::vector<int>{};
  std::vector<int> chosen;
  double share = 1.0;
  if (amount < 1.0 - kEpsilon) {
    share = amount;
    int best = -1;
    for (size_t d = 0; d < used_.size(); ++d) {
      if (1.0 - used_[d] + kEpsilon < amount) continue;
      if (best < 0 || used_[d] > used_[static_cast<size_t>(best)] + kEpsilon) {
        best = static_cast<int>(d);
      }
    }
    if (best >= 0) chosen.push_back(best);
  } else {
    const size_t want = static_cast<size_t>(std::llround(amount));
    for (size_t d = 0; d < used_.size() && chosen.size() < want; ++d) {
      if (used_[d] <= kEpsilon) chosen.push_back(static_cast<int>(d));
    }
    if (chosen.size() < want) chosen.clear();
  }
  if (chosen.empty()) {
    std::vector<std::string> free;
    for (size_t d = 0; d < used_.size(); ++d)
      free.push_back(absl::StrCat(d, ": ", std::max(0.0, 1.0 - used_[d])));
    return absl::ResourceExhaustedError(
        absl::StrCat("GPU=", amount, " does not fit the node's ", used_.size(),
                     " GPUs (free of each: ", free.empty() ? "none" : absl::StrJoin(free, ", "),
                     ")", amount < 1.0 ? ": a fraction must fit within one device" : ""));
  }
  for (int d : chosen)
    used_[static_cast<size_t>(d)] += share;
  held_[actor] = Holding{.devices = chosen, .share = share};
  return chosen;
}

void GpuAssignment::release(uint64_t actor) {
  auto it = held_.find(actor);
  if (it == held_.end()) return;
  for (int d : it->second.devices) {
    double& used = used_[static_cast<size_t>(d)];
    used -= it->second.share;
    if (used < kEpsilon) used = 0;
  }
  held_.erase(it);
}

std::vector<int> GpuAssignment::of(uint64_t actor) const {
  auto it = held_.find(actor);
  return it == held_.end() ? std::vector<int>{} : it->second.devices;
}

}  // namespace troupe::cluster
