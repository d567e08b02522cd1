#include "core/cluster/detail/http_status.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/cluster/detail/dashboard_page.h"
#include "core/cluster/detail/http_json.h"
#include "core/cluster/detail/resources.h"

namespace troupe::cluster {
namespace {

constexpr size_t kEndedJobsShown = 5;

// Bytes for people: "512 B", "1.5 GiB".
std::string human_bytes(double v) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t i = 0;
  while (v >= 1024 && i + 1 < std::size(kUnits)) {
    v /= 1024;
    ++i;
  }
  return i == 0 ? absl::StrFormat("%.0f B", v) : absl::StrFormat("%.3g %s", v, kUnits[i]);
}

}  // namespace

std::string resource_usage(const std::string& total_text, const std::string& available_text) {
  absl::StatusOr<Resources> total = Resources::parse(total_text);
  absl::StatusOr<Resources> available = Resources::parse(available_text);
  if (!total.ok()) return total_text;
  std::vector<std::string> parts;
  for (const auto& [name, amount] : total->amounts()) {
    double used = amount - (available.ok() ? available->get(name) : amount);
    if (name == "memory") {
      parts.push_back(
          absl::StrCat(name, " ", human_bytes(std::max(0.0, used)), "/", human_bytes(amount)));
      continue;
    }
    Resources u, t;
    u.set(name, used < 0 ? 0 : used);
    t.set(name, amount);
    std::string us = u.to_string(), ts = t.to_string();
    parts.push_back(
        absl::StrCat(name, " ", us.substr(us.find('=') + 1), "/", ts.substr(ts.find('=') + 1)));
  }
  return absl::StrJoin(parts, ", ");
}

namespace {

// `text` as a Prometheus label value: backslash, quote and newline escaped.
std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

// A sample's value as Prometheus' text format writes it: the shortest decimal that reads back as
// the same double, NaN, +Inf or -Inf.
std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return shortest_decimal(v);
}

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         (!first && c >= '0' && c <= '9');
}

// Whether `name` is a metric name and `labels` label pairs (name="value" joined by commas,
// values escaped as label_value escapes them) as the text format takes them: what a job
// reported is shown only if it cannot break the page for a scraper.
bool well_formed(std::string_view name, std::string_view labels) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0)) return false;
  }
  size_t i = 0;
  while (i < labels.size()) {
    const size_t start = i;
    while (i < labels.size() && name_char(labels[i], i == start))
      ++i;
    if (i == start || i + 1 >= labels.size() || labels[i] != '=' || labels[i + 1] != '"') {
      return false;
    }
    i += 2;
    while (i < labels.size() && labels[i] != '"') {
      if (labels[i] == '\\') {
        if (i + 1 >= labels.size() ||
            (labels[i + 1] != '\\' && labels[i + 1] != '"' && labels[i + 1] != 'n')) {
          return false;
        }
        ++i;
      } else if (labels[i] == '\n') {
        return false;
      }
      ++i;
    }
    if (i >= labels.size()) return false;  // no closing quote
    ++i;
    if (i == labels.size()) break;
    if (labels[i] != ',') return false;
    ++i;
  }
  return true;
}

// "1.23k", "45.6M": a rate for people.
std::string human(double v) {
  if (v >= 1e9) return absl::StrFormat("%.3gG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.3gM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.3gk", v / 1e3);
  return absl::StrFormat("%.3g", v);
}

// A job's latest value of unlabelled series `name`, if it reported one.
std::optional<double> job_value(const JobStatus& j, std::string_view name) {
  for (const MetricPoint& p : j.metrics) {
    if (p.name == name && p.labels.empty()) return p.value;
  }
  return std::nullopt;
}

}  // namespace

std::string render_status(const ClusterStatus& s) {
  std::string out;
  absl::StrAppendFormat(&out, "Nodes\n");
  absl::StrAppendFormat(&out, "  %-5s %-7s %-6s %-34s %-9s %s\n", "NODE", "KIND", "STATE", "NAME",
                        "ACTORS", "RESOURCES (used/total)");
  for (const NodeStatus& n : s.nodes) {
    std::string res = n.info.kind == NodeKind::kWorker && n.state == NodeState::kAlive
                          ? resource_usage(n.info.resources, n.available)
                          : "";
    if (n.state == NodeState::kDead) res = "dead: " + n.death_reason;
    if (n.draining) res += "; draining: " + n.drain_reason;
    absl::StrAppendFormat(&out, "  %-5u %-7s %-6s %-34s %-9lld %s\n", n.info.index,
                          std::string(to_string(n.info.kind)).c_str(),
                          n.draining ? "DRAIN" : std::string(to_string(n.state)).c_str(),
                          n.info.name.substr(0, 34).c_str(), static_cast<long long>(n.actors),
                          res.c_str());
    if (n.state == NodeState::kAlive && !n.info.gpus.empty()) {
      std::vector<std::string> gpus;
      for (const GpuDevice& g : n.info.gpus)
        gpus.push_back(describe(g));
      absl::StrAppendFormat(&out, "        %s\n", absl::StrJoin(gpus, "; "));
    }
  }
  std::map<ActorState, int> by_state;
  for (const ActorStatus& a : s.actors)
    ++by_state[a.state];
  std::vector<std::string> counts;
  for (const auto& [state, n] : by_state)
    counts.push_back(absl::StrCat(n, " ", std::string(to_string(state))));
  absl::StrAppendFormat(&out, "\nActors: %zu (%s)\n", s.actors.size(),
                        counts.empty() ? "none" : absl::StrJoin(counts, ", ").c_str());
  // The living (and those on their way back) a line each, named in full (a training job's are
  // JOB/kind/d0.p0.t0); the dead counted by why, the commonest first.
  std::map<std::string, int> dead_because;
  bool header = false;
  for (const ActorStatus& a : s.actors) {
    if (a.state == ActorState::kDead) {
      ++dead_because[a.death_reason.empty() ? "no reason given" : a.death_reason];
      continue;
    }
    if (!header) {
      absl::StrAppendFormat(&out, "  %-20s %-5s %-8s %-10s %-8s %-22s %s\n", "ID", "NODE", "JOB",
                            "STATE", "RESTARTS", "TYPE", "NAME");
      header = true;
    }
    const std::string job = a.job == 0 ? "detached" : absl::StrCat(a.job);
    absl::StrAppendFormat(&out, "  %-20s %-5u %-8s %-10s %-8d %-22s %s%s\n",
                          to_string(ActorId{a.id}).c_str(), a.node, job.c_str(),
                          std::string(to_string(a.state)).c_str(), a.restarts,
                          a.type.substr(0, 22).c_str(), a.name.empty() ? "-" : a.name.c_str(),
                          a.state == ActorState::kAlive || a.death_reason.empty()
                              ? ""
                              : ("  (" + a.death_reason + ")").c_str());
  }
  if (!dead_because.empty()) {
    std::vector<std::pair<int, std::string>> reasons;
    int dead = 0;
    for (const auto& [why, n] : dead_because) {
      reasons.emplace_back(n, why);
      dead += n;
    }
    std::sort(reasons.begin(), reasons.end(),
              [](const auto& x, const auto& y) { return x.first > y.first; });
    absl::StrAppendFormat(&out, "  %d dead:\n", dead);
    constexpr size_t kReasonsShown = 5;
    for (size_t i = 0; i < reasons.size() && i < kReasonsShown; ++i) {
      absl::StrAppendFormat(&out, "    %d  %s\n", reasons[i].first, reasons[i].second.c_str());
    }
    if (reasons.size() > kReasonsShown) {
      absl::StrAppendFormat(&out, "    (and %zu other reasons)\n", reasons.size() - kReasonsShown);
    }
  }
  absl::StrAppendFormat(&out, "\nPlacement groups: %zu\n", s.placement_groups.size());
  for (const PlacementGroupStatus& g : s.placement_groups) {
    std::vector<std::string> nodes;
    for (uint32_t n : g.bundle_nodes)
      nodes.push_back(std::to_string(n));
    absl::StrAppendFormat(&out, "  pg-%llu %s %s %s bundles [%s] on nodes [%s], %s\n",
                          static_cast<unsigned long long>(g.id), g.name.c_str(), g.strategy.c_str(),
                          g.placed ? "PLACED" : "PENDING", absl::StrJoin(g.bundles, "; ").c_str(),
                          absl::StrJoin(nodes, ", ").c_str(),
                          g.job == 0 ? "detached" : absl::StrCat("job ", g.job).c_str());
  }
  // Running jobs, then the latest that ended.
  std::vector<const JobStatus*> running, ended;
  for (const JobStatus& j : s.jobs)
    (j.state == JobState::kRunning ? running : ended).push_back(&j);
  if (ended.size() > kEndedJobsShown) ended.erase(ended.begin(), ended.end() - kEndedJobsShown);
  absl::StrAppendFormat(&out, "\nJobs: %zu running\n", running.size());
  running.insert(running.end(), ended.begin(), ended.end());
  for (const JobStatus* j : running) {
    std::vector<std::string> owns;
    owns.push_back(absl::StrCat(j->actors, " actors"));
    if (!j->placement_groups.empty()) {
      std::vector<std::string> groups;
      for (uint64_t g : j->placement_groups)
        groups.push_back(absl::StrCat("pg-", g));
      owns.push_back(absl::StrCat("placement groups ", absl::StrJoin(groups, " ")));
    }
    if (!j->collective_groups.empty()) {
      owns.push_back(absl::StrCat("collective groups ", absl::StrJoin(j->collective_groups, " ")));
    }
    absl::StrAppendFormat(&out, "  job %-4u %-8s %s (pid %lld): %s%s\n", j->id,
                          std::string(to_string(j->state)).c_str(), j->driver.c_str(),
                          static_cast<long long>(j->pid), absl::StrJoin(owns, ", ").c_str(),
                          j->state == JobState::kRunning ? "" : ("; " + j->end_reason).c_str());
    if (!j->training.empty()) absl::StrAppendFormat(&out, "    %s\n", j->training.c_str());
    if (!j->metrics.empty()) {
      std::string line = absl::StrCat("step ", j->step);
      if (std::optional<double> loss = job_value(*j, "loss")) {
        absl::StrAppend(&line, ", loss ", absl::StrFormat("%.4f", *loss));
      }
      if (std::optional<double> rate = job_value(*j, "tokens_per_second")) {
        absl::StrAppend(&line, ", ", human(*rate), " tokens/s");
      }
      absl::StrAppendFormat(&out, "    %s\n", line.c_str());
    }
  }
  absl::StrAppendFormat(&out, "\nRecent events\n");
  size_t from = s.events.size() > 10 ? s.events.size() - 10 : 0;
  for (size_t i = from; i < s.events.size(); ++i)
    absl::StrAppendFormat(&out, "  %s\n", s.events[i].c_str());
  return out;
}

std::string render_metrics(const ClusterStatus& s) {
  std::string out;
  auto gauge = [&](const char* name, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n");
  };
  gauge("troupe_nodes", "Nodes by kind and state.");
  std::map<std::pair<std::string, std::string>, int> nodes;
  for (const NodeStatus& n : s.nodes)
    ++nodes[{std::string(to_string(n.info.kind)), std::string(to_string(n.state))}];
  for (const auto& [key, count] : nodes)
    absl::StrAppend(&out, "troupe_nodes{kind=\"", key.first, "\",state=\"", key.second, "\"} ",
                    count, "\n");
  // Each family's samples together, as the format requires: the totals, then what is free.
  for (const bool totals : {true, false}) {
    const char* family = totals ? "troupe_node_resource_total" : "troupe_node_resource_available";
    gauge(family, totals ? "Resources a live worker offers."
                         : "Resources not held by actors or placement groups.");
    for (const NodeStatus& n : s.nodes) {
      if (n.state != NodeState::kAlive || n.info.kind != NodeKind::kWorker) continue;
      absl::StatusOr<Resources> total = Resources::parse(n.info.resources);
      absl::StatusOr<Resources> available = Resources::parse(n.available);
      if (!total.ok() || !available.ok()) continue;
      for (const auto& [name, amount] : total->amounts()) {
        absl::StrAppend(&out, family, "{node=\"", n.info.index, "\",resource=\"", name, "\"} ",
                        totals ? amount : available->get(name), "\n");
      }
    }
  }
  gauge("troupe_node_gpu_memory_bytes",
        "Each GPU of a live worker: its total memory (0: unknown).");
  for (const NodeStatus& n : s.nodes) {
    if (n.state != NodeState::kAlive) continue;
    for (const GpuDevice& g : n.info.gpus) {
      absl::StrAppend(&out, "troupe_node_gpu_memory_bytes{node=\"", n.info.index, "\",gpu=\"",
                      g.index, "\",name=\"", label_value(g.name), "\"} ", g.memory_bytes, "\n");
    }
  }
  gauge("troupe_actors", "Actors by state.");
  std::map<std::string, int> actors;
  for (const ActorStatus& a : s.actors)
    ++actors[std::string(to_string(a.state))];
  for (const auto& [state, count] : actors)
    absl::StrAppend(&out, "troupe_actors{state=\"", state, "\"} ", count, "\n");
  gauge("troupe_placement_groups", "Placement groups by state.");
  int placed = 0;
  for (const PlacementGroupStatus& g : s.placement_groups)
    placed += g.placed ? 1 : 0;
  absl::StrAppend(&out, "troupe_placement_groups{state=\"placed\"} ", placed, "\n",
                  "troupe_placement_groups{state=\"pending\"} ",
                  s.placement_groups.size() - static_cast<size_t>(placed), "\n");
  render_job_metrics(s, &out);
  return out;
}

void render_job_metrics(const ClusterStatus& s, std::string* out) {
  // A family's samples together, whatever job reported them: by name, then job.
  struct Sample {
    uint32_t job;
    const MetricPoint* point;
  };
  std::map<std::string, std::vector<Sample>> families;
  std::map<std::string, std::string> help;
  for (const JobStatus& j : s.jobs) {
    for (const MetricPoint& p : j.metrics) {
      if (well_formed(p.name, p.labels)) families[p.name].push_back({j.id, &p});
    }
    for (const MetricHelp& h : j.metrics_help)
      help.try_emplace(h.name, h.text);
  }
  for (const auto& [name, samples] : families) {
    const std::string family = absl::StrCat("troupe_train_", name);
    auto h = help.find(name);
    std::string text = h == help.end() ? "Reported by a training job." : h->second;
    for (char& c : text)
      if (c == '\n') c = ' ';
    absl::StrAppend(out, "# HELP ", family, " ", text, "\n# TYPE ", family,
                    name.ends_with("_total") ? " counter\n" : " gauge\n");
    for (const Sample& x : samples) {
      absl::StrAppend(out, family, "{job=\"", x.job, "\"", x.point->labels.empty() ? "" : ",",
                      x.point->labels, "} ", sample_value(x.point->value), "\n");
    }
  }
}

HttpRoute route_of(const HttpRequest& request) {
  const std::string& path = request.path;
  if (path == "/status" || path == "/metrics" || path == "/api/status") {
    return {.needs = HttpRoute::kStatus};
  }
  constexpr std::string_view kJobs = "/api/jobs/";
  uint32_t job = 0;
  if (path.starts_with(kJobs) && absl::SimpleAtoi(path.substr(kJobs.size()), &job) &&
      path.size() > kJobs.size() && std::isdigit(static_cast<unsigned char>(path.back()))) {
    return {.needs = HttpRoute::kJob, .job = job};
  }
  return {};
}

HttpResponse answer(const HttpRequest& request, const HttpSources& sources) {
  const HttpRoute route = route_of(request);
  HttpFetched fetched;
  if (route.needs == HttpRoute::kStatus) fetched.status = sources.status();
  if (route.needs == HttpRoute::kJob) {
    fetched.job = sources.job_metrics ? sources.job_metrics(route.job)
                                      : absl::NotFoundError("no job metrics here");
  }
  return answer(request, fetched);
}

HttpResponse answer(const HttpRequest& request, const HttpFetched& fetched) {
  HttpResponse response;
  const std::string& path = request.path;
  const HttpRoute route = route_of(request);
  if (path == "/") {
    response.content_type = "text/html; charset=utf-8";
    response.body = std::string(dashboard_page());
    return response;
  }
  if (route.needs == HttpRoute::kNothing) {
    response.status = 404;
    response.body = "not found: try /, /status, /metrics, /api/status or /api/jobs/ID\n";
    return response;
  }
  if (route.needs == HttpRoute::kJob) {
    if (!fetched.job.ok()) {
      response.status = fetched.job.status().code() == absl::StatusCode::kNotFound ? 404 : 503;
      response.body = absl::StrCat(fetched.job.status().message(), "\n");
      return response;
    }
    response.content_type = "application/json";
    response.body = render_job_json(*fetched.job);
    return response;
  }
  const absl::StatusOr<ClusterStatus>& s = fetched.status;
  if (!s.ok()) {
    response.status = 503;
    response.body = absl::StrCat(s.status().message(), "\n");
  } else if (path == "/metrics") {
    response.content_type = "text/plain; version=0.0.4";
    response.body = render_metrics(*s);
  } else if (path == "/api/status") {
    response.content_type = "application/json";
    response.body = render_status_json(*s);
  } else {
    response.body = render_status(*s);
  }
  return response;
}

}  // namespace troupe::cluster
