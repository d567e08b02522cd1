#include "core/cluster/detail/http_json.h"

#include "core/cluster/detail/http_status.h"

#include <charconv>
#include <cmath>
#include <map>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace troupe::cluster {
namespace {

std::string number(double v) {
  return std::isfinite(v) ? shortest_decimal(v) : "null";
}

std::string strings(const std::vector<std::string>& list) {
  std::vector<std::string> out;
  out.reserve(list.size());
  for (const std::string& s : list)
    out.push_back(json_string(s));
  return absl::StrCat("[", absl::StrJoin(out, ","), "]");
}

}  // namespace

std::string shortest_decimal(double v) {
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return error == std::errc() ? std::string(buffer, end) : absl::StrFormat("%.17g", v);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        // Control bytes, and '<' so that no text can close the page's script.
        if (c < 0x20 || c == '<' || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

std::string render_status_json(const ClusterStatus& s) {
  std::vector<std::string> nodes;
  for (const NodeStatus& n : s.nodes) {
    std::vector<std::string> gpus;
    for (const GpuDevice& g : n.info.gpus) {
      gpus.push_back(absl::StrCat("{\"index\":", g.index, ",\"name\":", json_string(g.name),
                                  ",\"memory_bytes\":", g.memory_bytes, "}"));
    }
    nodes.push_back(absl::StrCat(
        "{\"index\":", n.info.index, ",\"kind\":", json_string(to_string(n.info.kind)),
        ",\"state\":", json_string(to_string(n.state)), ",\"name\":", json_string(n.info.name),
        ",\"host\":", json_string(n.info.host), ",\"pid\":", n.info.pid, ",\"resources\":",
        json_string(n.info.resources), ",\"available\":", json_string(n.available), ",\"usage\":",
        json_string(n.info.kind == NodeKind::kWorker && n.state == NodeState::kAlive
                        ? resource_usage(n.info.resources, n.available)
                        : ""),
        ",\"actors\":", n.actors, ",\"ready\":", n.ready ? "true" : "false", ",\"draining\":",
        n.draining ? "true" : "false", ",\"death_reason\":", json_string(n.death_reason),
        ",\"gpus\":[", absl::StrJoin(gpus, ","), "]}"));
  }
  std::map<std::string, int> by_state;
  std::vector<std::string> actors;
  for (const ActorStatus& a : s.actors) {
    ++by_state[std::string(to_string(a.state))];
    if (actors.size() >= kJsonActors) continue;
    actors.push_back(absl::StrCat(
        "{\"id\":", json_string(to_string(ActorId{a.id})), ",\"type\":", json_string(a.type),
        ",\"name\":", json_string(a.name), ",\"node\":", a.node, ",\"job\":", a.job,
        ",\"state\":", json_string(to_string(a.state)), ",\"restarts\":", a.restarts,
        ",\"death_reason\":", json_string(a.death_reason), "}"));
  }
  std::vector<std::string> states;
  for (const auto& [state, count] : by_state)
    states.push_back(absl::StrCat(json_string(state), ":", count));
  std::vector<std::string> groups;
  for (const PlacementGroupStatus& g : s.placement_groups) {
    std::vector<std::string> on;
    for (uint32_t n : g.bundle_nodes)
      on.push_back(absl::StrCat(n));
    groups.push_back(absl::StrCat("{\"id\":", g.id, ",\"name\":", json_string(g.name),
                                  ",\"strategy\":", json_string(g.strategy),
                                  ",\"bundles\":", strings(g.bundles),
                                  ",\"placed\":", g.placed ? "true" : "false", ",\"nodes\":[",
                                  absl::StrJoin(on, ","), "],\"job\":", g.job, "}"));
  }
  std::vector<std::string> jobs;
  for (const JobStatus& j : s.jobs) {
    std::vector<std::string> latest;
    for (const MetricPoint& p : j.metrics) {
      if (p.labels.empty())
        latest.push_back(absl::StrCat(json_string(p.name), ":", number(p.value)));
    }
    jobs.push_back(absl::StrCat("{\"id\":", j.id, ",\"driver\":", json_string(j.driver),
                                ",\"pid\":", j.pid, ",\"state\":", json_string(to_string(j.state)),
                                ",\"end_reason\":", json_string(j.end_reason),
                                ",\"actors\":", j.actors, ",\"training\":", json_string(j.training),
                                ",\"step\":", j.step, ",\"latest\":{", absl::StrJoin(latest, ","),
                                "}}"));
  }
  return absl::StrCat("{\"nodes\":[", absl::StrJoin(nodes, ","), "],\"actors\":{\"by_state\":{",
                      absl::StrJoin(states, ","), "},\"total\":", s.actors.size(), ",\"list\":[",
                      absl::StrJoin(actors, ","), "]},\"placement_groups\":[",
                      absl::StrJoin(groups, ","), "],\"jobs\":[", absl::StrJoin(jobs, ","),
                      "],\"events\":", strings(s.events),
                      ",\"rejoining\":", s.rejoining ? "true" : "false", "}");
}

std::string render_job_json(const JobMetrics& m) {
  std::vector<std::string> latest;
  for (const MetricPoint& p : m.latest) {
    latest.push_back(absl::StrCat("{\"name\":", json_string(p.name), ",\"labels\":",
                                  json_string(p.labels), ",\"value\":", number(p.value), "}"));
  }
  std::vector<std::string> history;
  for (const MetricsReport& r : m.history) {
    std::vector<std::string> values;
    for (const MetricPoint& p : r.points) {
      const std::string key = p.labels.empty() ? p.name : absl::StrCat(p.name, "{", p.labels, "}");
      values.push_back(absl::StrCat(json_string(key), ":", number(p.value)));
    }
    history.push_back(absl::StrCat("{\"step\":", r.step, ",\"time\":", number(r.unix_seconds),
                                   ",\"values\":{", absl::StrJoin(values, ","), "}}"));
  }
  std::vector<std::string> timelines;
  for (const JobTimeline& timeline : m.timelines) {
    std::vector<std::string> spans;
    for (const TimelineSpan& t : timeline.spans) {
      spans.push_back(
          absl::StrCat("{\"track\":", json_string(t.track), ",\"kind\":", json_string(t.kind),
                       ",\"name\":", json_string(t.name), ",\"begin_ms\":", number(t.begin_ms),
                       ",\"end_ms\":", number(t.end_ms), "}"));
    }
    timelines.push_back(
        absl::StrCat("{\"step\":", timeline.step, ",\"spans\":[", absl::StrJoin(spans, ","), "]}"));
  }
  std::vector<std::string> help;
  for (const MetricHelp& h : m.help)
    help.push_back(absl::StrCat(json_string(h.name), ":", json_string(h.text)));
  return absl::StrCat("{\"job\":", m.job, ",\"step\":", m.step, ",\"latest\":[",
                      absl::StrJoin(latest, ","), "],\"history\":[", absl::StrJoin(history, ","),
                      "],\"events\":", strings(m.events), ",\"help\":{", absl::StrJoin(help, ","),
                      "},\"timelines\":[", absl::StrJoin(timelines, ","), "]}");
}

}  // namespace troupe::cluster
