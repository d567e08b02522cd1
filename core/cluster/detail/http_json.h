// What the head's dashboard reads (http_status.h's /api/ paths): the cluster's status and a
// job's reported metrics as JSON. Numbers that JSON cannot carry (NaN, infinities) are null;
// strings are escaped so that any bytes a node or a job reported stay inside their string.
#pragma once

#include <string>
#include <string_view>

#include "core/cluster/protocol.h"

namespace troupe::cluster {

// {"nodes": [...], "actors": {"by_state": {...}, "list": [...]}, "placement_groups": [...],
//  "jobs": [...], "events": [...], "rejoining": false}. Actors are listed up to kJsonActors
// (the rest counted by state only).
inline constexpr size_t kJsonActors = 2000;
std::string render_status_json(const ClusterStatus& s);
// {"job": id, "step": N, "latest": [{"name", "labels", "value"}...],
//  "history": [{"step", "time", "values": {"name" or "name{labels}": value...}}...],
//  "events": [...],
//  "help": {"name": "text"...},
//  "timelines": [{"step", "spans": [{"track", "kind", "name", "begin_ms", "end_ms"}...]}...]}.
std::string render_job_json(const JobMetrics& m);
// The shortest decimal that reads back as `v` (finite), for the JSON and the Prometheus page.
std::string shortest_decimal(double v);
// `text` as a JSON string, quotes included.
std::string json_string(std::string_view text);

}  // namespace troupe::cluster
