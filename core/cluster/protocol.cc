#include "core/cluster/protocol.h"

namespace troupe::cluster {

std::string_view to_string(NodeKind kind) {
  return kind == NodeKind::kWorker ? "worker" : "driver";
}

std::string_view to_string(NodeState state) {
  return state == NodeState::kAlive ? "ALIVE" : "DEAD";
}

std::string_view to_string(ActorState state) {
  switch (state) {
    case ActorState::kPending:
      return "PENDING";
    case ActorState::kAlive:
      return "ALIVE";
    case ActorState::kRestarting:
      return "RESTARTING";
    case ActorState::kDead:
      return "DEAD";
  }
  return "UNKNOWN";
}

std::string_view to_string(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kFinished:
      return "FINISHED";
    case JobState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

}  // namespace troupe::cluster
