// How every trainer lays out its mesh dp x pp x tp (the data-parallel
// trainer's is dp x 1 x 1): the names of its collective groups, what each
// shard owns, and which shard keeps a replica of which. Pure functions of
// the job's name, its config and the mesh.
//
// The groups of job JOB:
//   JOB/dp/pPtT  (p, t)'s data-parallel group: the stages (d, p, t), every d;
//                JOB/dp where the mesh is data-parallel only (pp = tp = 1)
//   JOB/pipe/dDtT  replica d's stages of slice t, in pipeline order
//   JOB/tp/dDpP    the tp slices of replica d's stage p
#pragma once

#include <string>

#include "actors/mesh.h"
#include "nn/optim/param_range.h"
#include "trainers/config.h"

namespace troupe::trainers {

std::string dp_group(const std::string& job, const actors::Mesh& mesh, int p, int t);
std::string pipe_group(const std::string& job, int d, int t);
std::string tp_group(const std::string& job, int d, int p);

// What the shard at data-parallel rank d of dp owns of its stage's
// parameters `stage`: all of them (DDP, zero_stage 0), or ZeRO's partition d.
nn::ParamRange shard_range(const nn::ParamRange& stage, int zero_stage, int dp, int d);

// Whether the shards of a job at dp `dp` keep buddy replicas: a ZeRO
// partition exists once, so with fault tolerance or elasticity (and dp > 1)
// the shard of the next data-parallel rank, on another node, keeps a replica
// of it, so that a rank lost is replaced, or left behind, without losing its
// partition (docs/fault_tolerance.md). DDP's replicas are each other's.
bool keeps_replicas(const TrainConfig& config, int dp);

// The member (its index in mesh order) whose shard keeps the replica of the
// shard at `at`: (d + 1 mod dp, p, t)'s; -1 where the job keeps none
// (keeps_replicas). REQUIRES: actors::contains(mesh, at).
int buddy_of(const TrainConfig& config, const actors::Mesh& mesh, const actors::Coordinate& at);

}  // namespace troupe::trainers
