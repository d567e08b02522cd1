// Failpoints: a worker process that dies, as a machine does, at a chosen
// moment of a chosen step - how the recovery tests reach every phase of a
// step deterministically (tests/trainers/recovery_test.cc). Armed by the
// environment of the worker processes:
//
//   TROUPE_FAILPOINT=PHASE:COORDINATE:STEP:ARMED_FILE
//   e.g. TROUPE_FAILPOINT=allreduce:d1.p0.t0:5:/tmp/run/armed
//
// The process of coordinate COORDINATE SIGKILLs itself when it reaches
// PHASE of step STEP, if ARMED_FILE exists - and it removes the file first,
// so that a failpoint fires once in a cluster (not again in the replacement
// that runs the step again). Phases: forward, backward, allreduce (the
// gradient exchange in flight), commit (after the commit point), replicate
// (sending a buddy its update), checkpoint (a shard's file half written).
//
// With TROUPE_FAILPOINT_ACTION=hang the process does not die: the thread
// that reaches the failpoint stops there (for 10 minutes at most) while the
// rest of the process - its heartbeats among them - goes on, as a compute
// thread stuck in a kernel or a lock would.
// Unset (the default), a failpoint costs a test of a flag.
#pragma once

#include <cstdint>
#include <string_view>

#include "actors/mesh.h"

namespace troupe::actors {

void failpoint(std::string_view phase, const Coordinate& at, int64_t step);

}  // namespace troupe::actors
