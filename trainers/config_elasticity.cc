// The `elasticity` section: troupe's keys, DeepSpeed's where they mean the
// same (min_gpus, max_gpus, micro_batch_sizes), and a warning naming each
// DeepSpeed key that has no meaning here.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainers/config_sections.h"

namespace troupe::trainers::config_detail {
namespace {

// DeepSpeed's elasticity keys (deepspeed/elasticity/constants.py) that troupe
// reads as nothing: it keeps train_batch_size as the global batch instead of
// choosing one, and resizes a running job instead of restarting it.
struct DeepSpeedOnlyKey {
  const char* name;
  const char* why;
};
constexpr std::array<DeepSpeedOnlyKey, 7> kDeepSpeedOnlyKeys = {{
    {"max_train_batch_size", "troupe keeps train_batch_size as the global batch"},
    {"min_time", "troupe resizes a running job instead of restarting it"},
    {"prefer_larger_batch", "troupe keeps train_batch_size as the global batch"},
    {"ignore_non_elastic_batch_info", "troupe keeps train_batch_size as the global batch"},
    {"version", ""},
    {"num_gpus_per_node", "a node's ranks are its CPU resources"},
    {"model_parallel_size", "parallel.pp and parallel.tp are troupe's"},
}};

// Reads one of two names for the same key (troupe's, DeepSpeed's).
absl::Status read_either(JsonObject& s, const char* ours, const char* theirs, int* out) {
  if (s.has(ours) && s.has(theirs)) {
    return config_error(absl::StrCat(s.key_path(ours), ": given together with ", s.key_path(theirs),
                                     ", which means the same; give one"));
  }
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read(ours, out, 1, kMaxParallel));
  return s.read(theirs, out, 1, kMaxParallel);
}

absl::Status read_micro_batch_sizes(JsonObject& s, std::vector<int64_t>* out) {
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("micro_batch_sizes", out));
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return absl::OkStatus();
}

}  // namespace

absl::Status parse_elasticity(JsonObject& top, TrainConfig* config) {
  ElasticityConfig& e = config->elasticity;
  absl::StatusOr<std::optional<JsonObject>> section = top.section("elasticity");
  if (!section.ok()) return section.status();
  if (!section->has_value()) return absl::OkStatus();
  JsonObject& s = **section;
  TROUPE_CONFIG_RETURN_IF_ERROR(s.read("enabled", &e.enabled));
  TROUPE_CONFIG_RETURN_IF_ERROR(read_either(s, "min_dp", "min_gpus", &e.min_dp));
  TROUPE_CONFIG_RETURN_IF_ERROR(read_either(s, "max_dp", "max_gpus", &e.max_dp));
  TROUPE_CONFIG_RETURN_IF_ERROR(read_micro_batch_sizes(s, &e.micro_batch_sizes));
  for (const DeepSpeedOnlyKey& k : kDeepSpeedOnlyKeys) {
    if (!s.has(k.name)) continue;
    std::string warning =
        absl::StrCat(s.key_path(k.name), " is DeepSpeed's and means nothing to troupe; ignored");
    if (*k.why != '\0') absl::StrAppend(&warning, " (", k.why, ")");
    config->warnings.push_back(std::move(warning));
  }
  TROUPE_CONFIG_RETURN_IF_ERROR(s.check_unknown());

  if (e.min_dp > e.max_dp) {
    return config_error(absl::StrCat(s.key_path("min_dp"), " ", e.min_dp, " is above ",
                                     s.key_path("max_dp"), " ", e.max_dp));
  }
  const int dp = config->parallel.dp;
  if (e.enabled && (dp < e.min_dp || dp > e.max_dp)) {
    return config_error(absl::StrCat("parallel.dp ", dp, " is outside ", s.path(), "'s [min_dp ",
                                     e.min_dp, ", max_dp ", e.max_dp, "]"));
  }
  const std::vector<int64_t>& sizes = e.micro_batch_sizes;
  if (e.enabled && !sizes.empty() &&
      !std::binary_search(sizes.begin(), sizes.end(), config->micro_batch_size)) {
    return config_error(absl::StrCat("train_micro_batch_size_per_gpu ", config->micro_batch_size,
                                     " is not one of ", s.key_path("micro_batch_sizes"), " [",
                                     absl::StrJoin(sizes, ", "), "]"));
  }
  return absl::OkStatus();
}

}  // namespace troupe::trainers::config_detail
