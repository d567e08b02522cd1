// Which pipeline schedule a job runs: a name in the config, an enum everywhere after
// (actors/pipeline/schedule.h makes the schedule of each).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe::actors::pipeline {

// The pipeline schedules (the config's parallel.schedule, parsed once where the config is read).
enum class ScheduleKind : uint8_t {
  kGPipe,
  kOneFOneB,
  kInterleaved,
};
// "gpipe", "1f1b", "interleaved": the config's names.
const char* schedule_name(ScheduleKind kind);
// The kind the config names; nullopt for another name.
std::optional<ScheduleKind> parse_schedule(const std::string& name);

}  // namespace troupe::actors::pipeline
