// The parallel layout: a mesh dp x pp x tp (docs/design.md, "Training"), the
// coordinate of one member in it, and the names its actors are spawned under,
// so that any process can find the stage, shard or loader of a coordinate by
// name.
#pragma once

#include <string>

#include "core/codec.h"

namespace troupe::actors {

struct Mesh {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int size() const { return dp * pp * tp; }
  TROUPE_FIELDS(dp, pp, tp);
};

struct Coordinate {
  int d = 0;
  int p = 0;
  int t = 0;
  friend bool operator==(const Coordinate&, const Coordinate&) = default;
  TROUPE_FIELDS(d, p, t);
};

// True if `at` lies inside `mesh`.
bool contains(const Mesh& mesh, const Coordinate& at);
// The position of `at` in the mesh, t fastest, then p, then d (Megatron's
// rank order: a tensor-parallel group is consecutive). REQUIRES: contains.
int index_of(const Mesh& mesh, const Coordinate& at);
// "d1.p0.t0".
std::string to_string(const Coordinate& at);

// "JOB/KIND/dD.pP.tT", e.g. "run-1/stage/d1.p0.t0": the name of the actor of
// kind `kind` ("stage", "shard", "loader") at `at` in job `job`.
std::string actor_name(const std::string& job, const std::string& kind, const Coordinate& at);

}  // namespace troupe::actors
