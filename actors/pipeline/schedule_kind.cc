#include "actors/pipeline/schedule_kind.h"

namespace troupe::actors::pipeline {

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "unknown";
}

std::optional<ScheduleKind> parse_schedule(const std::string& name) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    if (name == schedule_name(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace troupe::actors::pipeline
