#include "trainers/mesh_layout.h"

#include "absl/strings/str_cat.h"
#include "actors/zero_partition.h"

namespace troupe::trainers {

std::string dp_group(const std::string& job, const actors::Mesh& mesh, int p, int t) {
  if (mesh.pp == 1 && mesh.tp == 1) return absl::StrCat(job, "/dp");
  return absl::StrCat(job, "/dp/p", p, "t", t);
}

std::string pipe_group(const std::string& job, int d, int t) {
  return absl::StrCat(job, "/pipe/d", d, "t", t);
}

std::string tp_group(const std::string& job, int d, int p) {
  return absl::StrCat(job, "/tp/d", d, "p", p);
}

nn::ParamRange shard_range(const nn::ParamRange& stage, int zero_stage, int dp, int d) {
  if (zero_stage == 0) return stage;
  return actors::ZeroPartition(stage, dp, d).own();
}

bool keeps_replicas(const TrainConfig& config, int dp) {
  return config.zero.stage > 0 && (config.fault_tolerance.enabled || config.elasticity.enabled) &&
         dp > 1;
}

int buddy_of(const TrainConfig& config, const actors::Mesh& mesh, const actors::Coordinate& at) {
  if (!keeps_replicas(config, mesh.dp)) return -1;
  return actors::index_of(mesh, {.d = (at.d + 1) % mesh.dp, .p = at.p, .t = at.t});
}

}  // namespace troupe::trainers
