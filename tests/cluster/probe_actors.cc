#include "tests/cluster/probe_actors.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/cluster/gpus.h"

namespace troupe::testing {

int64_t Probe::pid() const {
  return ::getpid();
}

bool Probe::hold(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 30000)));
  return true;
}

absl::StatusOr<std::string> Relay::tag_of_named(std::string name) const {
  absl::StatusOr<ActorRef<Probe>> probe = get_actor<Probe>(name);
  if (!probe.ok()) return probe.status();
  return probe->call(&Probe::tag).get(absl::Seconds(20));
}

Tripwire::Tripwire(std::string armed_file) {
  if (::unlink(armed_file.c_str()) == 0) ::kill(::getpid(), SIGKILL);  // a machine failure
}

int64_t Tripwire::pid() const {
  return ::getpid();
}

int64_t Relay::pid() const {
  return ::getpid();
}

absl::StatusOr<int> Reducer::join(std::string name) {
  group_.reset();  // the previous generation, if any
  auto group = CollectiveGroup::join(name, absl::Seconds(30));
  if (!group.ok()) return group.status();
  group_ = *std::move(group);
  return group_->rank();
}

absl::StatusOr<double> Reducer::allreduce(int64_t count, int iterations) {
  if (!group_) return absl::FailedPreconditionError("not in a group");
  std::vector<float> data(static_cast<size_t>(count));
  for (int i = 0; i < iterations; ++i) {
    std::fill(data.begin(), data.end(), static_cast<float>(group_->rank() + 1));
    absl::Status s = group_->allreduce(DType::kFloat32, ReduceOp::kSum, data.data(), data.size());
    if (!s.ok()) return s;
  }
  return data.empty() ? 0.0 : static_cast<double>(data[0]);
}

int64_t Reducer::pid() const {
  return ::getpid();
}

GpuUser::GpuUser() : constructed_with_(cluster::gpu_ids()) {}

std::vector<int> GpuUser::gpu_ids() const {
  return cluster::gpu_ids();
}

bool GpuUser::hold(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 30000)));
  return true;
}

}  // namespace troupe::testing
