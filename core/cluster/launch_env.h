// Where a process started by a cluster manager finds its troupe cluster: the
// launch environment of Slurm, torchrun (and Kubeflow's PyTorchJob, which
// sets torchrun's variables, some as PET_*) or a Kubernetes JobSet. Rank 0
// runs the head; every rank joins it as a worker; a driver started inside the
// allocation finds the same head.
//
//   Slurm     SLURM_JOB_ID, SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST),
//             SLURM_PROCID, SLURM_NTASKS. The head is the first host of the
//             node list, on port 15000 + the job id's last four digits (as
//             PyTorch Lightning picks MASTER_PORT), so that two jobs sharing a
//             node do not collide.
//   torchrun  MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (Kubeflow:
//             PET_MASTER_ADDR, PET_MASTER_PORT, PET_NODE_RANK, PET_NNODES).
//             The head listens at MASTER_ADDR:MASTER_PORT.
//   JobSet    JOBSET_NAME, REPLICATED_JOB_NAME, JOB_INDEX (set from the
//             JobSet's labels by the downward API: examples/kubernetes/
//             jobset.yaml) and the indexed Job's JOB_COMPLETION_INDEX. The
//             head is pod 0 of job 0, by its stable
//             host name "<jobset>-<replicated job>-0-0.<subdomain>" (the
//             subdomain is the JobSet's name unless TROUPE_JOBSET_SUBDOMAIN
//             says otherwise), on port 6380.
//
// TROUPE_HEAD_PORT overrides the head's port under any of them. --head and
// TROUPE_HEAD still win over all of this (find_head_address).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe::cluster {

struct LaunchEnv {
  std::string manager;  // "slurm", "torchrun", "kubeflow" or "jobset"
  std::string head_host;
  uint16_t head_port = 0;
  int rank = 0;        // this process's place among those launched
  int world_size = 0;  // how many were launched; 0 if the manager does not say
  bool runs_head() const { return rank == 0; }
  // "HOST:PORT" of the head.
  std::string head_address() const;
  // "slurm job 42, rank 3 of 8" - for logs.
  std::string describe() const;
};

// Reads a variable of the environment (getenv, or a test's map); null if unset.
using EnvLookup = std::function<const char*(const char* name)>;
EnvLookup process_env();

// The launch environment this process runs in; nullopt when it is none of
// the above. Errors: InvalidArgument naming the variable that is malformed
// (a rank that is not a number, a node list that does not parse, a port out
// of range).
absl::StatusOr<std::optional<LaunchEnv>> detect_launch_env(const EnvLookup& env = process_env());

// The hosts of a Slurm node list ("gpu[01-03,7],login1" -> gpu01, gpu02,
// gpu03, gpu7, login1), in order, zero-padding kept. InvalidArgument if it
// does not parse.
absl::StatusOr<std::vector<std::string>> expand_slurm_hostlist(const std::string& list);

}  // namespace troupe::cluster
