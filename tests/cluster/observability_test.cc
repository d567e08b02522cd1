// A running job seen from outside (docs/observability.md): `troupe train --local 2` on the
// README's DDP job, its head's /metrics scraped while it trains and read by a strict parser of
// Prometheus' text format (and by prometheus_client's, where the reference environment has it),
// the troupe_train_ families present with values a run can have, and the status page showing
// the job's step, loss and throughput.
#include <gtest/gtest.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/reference/reference_python.h"

namespace troupe {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int connect_tcp(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints,
                    &found) != 0) {
    return -1;
  }
  int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  return fd;
}

// The body of one HTTP GET of `path` from `address` ("" on any failure or a status other
// than 200).
std::string http_get(const std::string& address, const std::string& path) {
  int fd = connect_tcp(address);
  if (fd < 0) return "";
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: troupe\r\nConnection: close\r\n\r\n";
  static_cast<void>(::send(fd, request.data(), request.size(), MSG_NOSIGNAL));
  std::string response;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  char buffer[4096];
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!response.starts_with("HTTP/1.1 200")) return "";
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// --- A strict reader of the Prometheus text format (0.0.4). ---

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};
struct Family {
  std::string type, help;
  std::vector<Sample> samples;
};

bool metric_name(const std::string& s) {
  return std::regex_match(s, std::regex("[a-zA-Z_:][a-zA-Z0-9_:]*"));
}

// The families of `text`, or an error naming the first line that breaks the format: a sample
// before its family's TYPE, a family's samples not together, a TYPE twice, a malformed label
// or value.
std::map<std::string, Family> parse_prometheus(const std::string& text, std::string* error) {
  std::map<std::string, Family> families;
  std::set<std::string> closed;  // families whose samples ended
  std::string current;
  auto fail = [&](int line, const std::string& why, const std::string& content) {
    *error = absl::StrCat("line ", line, ": ", why, ": ", content);
    return std::map<std::string, Family>{};
  };
  if (!text.empty() && text.back() != '\n') return fail(0, "no final newline", "");
  int number = 0;
  for (const absl::string_view view : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::string line(view);
    ++number;
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      const std::vector<std::string> parts =
          absl::StrSplit(line.substr(7), absl::MaxSplits(' ', 1));
      if (parts.size() != 2 || !metric_name(parts[0])) return fail(number, "bad comment", line);
      if (parts[0] != current) {
        if (!current.empty()) closed.insert(current);
        if (closed.contains(parts[0])) return fail(number, "family resumed", line);
        current = parts[0];
      }
      Family& f = families[parts[0]];
      if (line[2] == 'H') {
        f.help = parts[1];
        continue;
      }
      if (!f.type.empty()) return fail(number, "second TYPE", line);
      if (!f.samples.empty()) return fail(number, "TYPE after samples", line);
      if (parts[1] != "gauge" && parts[1] != "counter") return fail(number, "type", line);
      f.type = parts[1];
      continue;
    }
    if (line.starts_with("#")) continue;
    static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+))");
    std::smatch m;
    if (!std::regex_match(line, m, sample)) return fail(number, "not a sample", line);
    const std::string name = m[1];
    if (name != current) return fail(number, "sample outside its family", line);
    Family& f = families[name];
    if (f.type.empty()) return fail(number, "sample before TYPE", line);
    Sample s;
    const std::string labels = m[3];
    static const std::regex pair(R"rx(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$))rx");
    size_t at = 0;
    while (at < labels.size()) {
      std::smatch p;
      const std::string rest = labels.substr(at);
      if (!std::regex_search(rest, p, pair, std::regex_constants::match_continuous)) {
        return fail(number, "bad labels", line);
      }
      if (!s.labels.emplace(p[1], p[2]).second) return fail(number, "label twice", line);
      at += static_cast<size_t>(p.length(0));
    }
    const std::string value = m[4];
    if (value == "NaN") {
      s.value = NAN;
    } else if (value == "+Inf" || value == "-Inf") {
      s.value = value[0] == '+' ? INFINITY : -INFINITY;
    } else if (!absl::SimpleAtod(value, &s.value) || value.find_first_of("iInN") != value.npos) {
      return fail(number, "bad value", line);
    }
    f.samples.push_back(std::move(s));
  }
  return families;
}

// The value of family `name`'s sample whose labels include `want`, if any.
std::optional<double> value_of(const std::map<std::string, Family>& families,
                               const std::string& name,
                               const std::map<std::string, std::string>& want = {}) {
  auto f = families.find(name);
  if (f == families.end()) return std::nullopt;
  for (const Sample& s : f->second.samples) {
    bool all = true;
    for (const auto& [k, v] : want) {
      auto l = s.labels.find(k);
      all = all && l != s.labels.end() && l->second == v;
    }
    if (all) return s.value;
  }
  return std::nullopt;
}

TEST(ParsePrometheusTest, RefusesWhatAScraperWould) {
  std::string error;
  EXPECT_FALSE(parse_prometheus("# TYPE a gauge\na 1\n", &error).empty()) << error;
  parse_prometheus("# HELP a x\na 1\n", &error);
  EXPECT_NE(error.find("before TYPE"), std::string::npos) << error;
  parse_prometheus("# TYPE a gauge\n# TYPE b gauge\na 1\n", &error);
  EXPECT_NE(error.find("outside its family"), std::string::npos) << error;
  parse_prometheus("# TYPE a gauge\na{x=\"1} 1\n", &error);
  EXPECT_NE(error.find("bad labels"), std::string::npos) << error;
  parse_prometheus("# TYPE a gauge\na 1\n# TYPE b gauge\nb 2\n# HELP a again\n", &error);
  EXPECT_NE(error.find("resumed"), std::string::npos) << error;
  parse_prometheus("# TYPE a gauge\na nan\n", &error);
  EXPECT_NE(error.find("bad value"), std::string::npos) << error;
}

// `troupe train` on example CONFIG (--local 2, `steps` steps) in a directory of its own, its
// output in DIR/train.log; wait() joins it and gives its exit code; address() waits (up to
// 120 s) for the head's HTTP address the run prints ("watch it: http://HOST:PORT/").
class TrainingRun {
 public:
  TrainingRun(const std::string& config, int steps) {
    char path[] = "/tmp/troupe-observability-XXXXXX";
    EXPECT_NE(mkdtemp(path), nullptr);
    dir_ = path;
    log_ = dir_ + "/train.log";
    thread_ = std::thread([this, config, steps] {
      const std::string command =
          absl::StrCat("cd '", dir_, "' && timeout -s KILL 240 '", TROUPE_BINARY,
                       "' train --config '", EXAMPLE_CONFIGS, "/", config,
                       ".json' --local 2 --steps ", steps, " --output out >'", log_, "' 2>&1");
      code_ = std::system(command.c_str());
    });
  }
  ~TrainingRun() {
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }
  std::string address() const {
    const std::regex watch(R"(watch it: http://([^/ ]+)/)");
    std::smatch m;
    for (absl::Time deadline = absl::Now() + absl::Seconds(120); absl::Now() < deadline;) {
      if (const std::string text = read_file(log_); std::regex_search(text, m, watch)) return m[1];
      absl::SleepFor(absl::Milliseconds(50));
    }
    return "";
  }
  int wait() {
    if (thread_.joinable()) thread_.join();
    return code_;
  }
  std::string output() const { return read_file(log_); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, log_;
  std::thread thread_;
  int code_ = -1;
};

TEST(ObservabilityTest, ATrainingRunsMetricsAreOnTheHeadsPage) {
  TrainingRun run("addition_ddp", 300);
  // The run says where to watch it.
  const std::string address = run.address();
  ASSERT_FALSE(address.empty()) << run.output();
  // Scraped while it trains, a few steps in (the learning rate warms up from 0 at step 1).
  std::string metrics;
  const std::regex step(R"(troupe_train_step\{job="[0-9]+"\} ([0-9]+))");
  for (absl::Time deadline = absl::Now() + absl::Seconds(120); absl::Now() < deadline;) {
    metrics = http_get(address, "/metrics");
    std::smatch m;
    if (std::regex_search(metrics, m, step) && std::stoi(m[1]) >= 5) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::string status = http_get(address, "/status");
  const std::string status_json = http_get(address, "/api/status");
  const std::string page = http_get(address, "/");
  EXPECT_EQ(run.wait(), 0) << run.output();

  std::string error;
  const std::map<std::string, Family> families = parse_prometheus(metrics, &error);
  ASSERT_TRUE(error.empty()) << error << "\n" << metrics;
  const std::optional<double> loss = value_of(families, "troupe_train_loss");
  ASSERT_TRUE(loss.has_value()) << metrics;
  EXPECT_TRUE(std::isfinite(*loss) && *loss > 0 && *loss < 20) << *loss;
  EXPECT_EQ(families.at("troupe_train_loss").type, "gauge");
  EXPECT_FALSE(families.at("troupe_train_loss").help.empty());
  EXPECT_GE(value_of(families, "troupe_train_step").value_or(0), 1);
  EXPECT_GT(value_of(families, "troupe_train_tokens_per_second").value_or(0), 0);
  EXPECT_GT(value_of(families, "troupe_train_learning_rate").value_or(0), 0);
  EXPECT_EQ(value_of(families, "troupe_train_data_parallel_size").value_or(0), 2);
  EXPECT_GT(value_of(families, "troupe_train_step_seconds", {{"part", "total"}}).value_or(0), 0);
  EXPECT_GT(value_of(families, "troupe_train_step_seconds", {{"part", "compute"}}).value_or(0), 0);
  for (const char* rank : {"d0.p0.t0", "d1.p0.t0"}) {
    EXPECT_GT(value_of(families, "troupe_train_memory_bytes",
                       {{"rank", rank}, {"category", "parameters"}})
                  .value_or(0),
              0)
        << rank;
    EXPECT_GT(
        value_of(families, "troupe_train_sent_bytes", {{"rank", rank}, {"collective", "allreduce"}})
            .value_or(0),
        0)
        << rank;
  }
  ASSERT_TRUE(families.contains("troupe_train_recoveries_total"));
  EXPECT_EQ(families.at("troupe_train_recoveries_total").type, "counter");
  EXPECT_EQ(value_of(families, "troupe_train_recoveries_total"), 0.0);
  // Every sample of the family names its job.
  for (const Sample& s : families.at("troupe_train_loss").samples)
    EXPECT_TRUE(s.labels.contains("job"));
  // The cluster's own families are still there.
  EXPECT_TRUE(families.contains("troupe_nodes"));
  // The status page shows the job's progress.
  EXPECT_TRUE(std::regex_search(status, std::regex(R"(step [0-9]+, loss [0-9.]+, )"))) << status;
  // The dashboard's page, and the status it reads.
  EXPECT_NE(page.find("<title>troupe</title>"), std::string::npos);
  EXPECT_NE(status_json.find("\"jobs\":[{\"id\":"), std::string::npos) << status_json;

  // prometheus_client's parser, where the reference environment has it.
  std::optional<std::string> python;
  for (const std::string candidate : {"/tmp/torchenv/bin/python", "python3"}) {
    if (testing::shell("timeout 60 '" + candidate + "' -c 'import prometheus_client'").code == 0) {
      python = candidate;
      break;
    }
  }
  if (!python) {
    std::printf("[ skipped ] prometheus_client is not installed: the strict parser above only\n");
    return;
  }
  const std::string file = "/tmp/troupe-observability-metrics.txt";
  std::ofstream(file) << metrics;
  const testing::Shell parsed = testing::shell(
      "'" + *python +
      "' -c 'import sys; from prometheus_client.parser import text_string_to_metric_families as "
      "p; f = {x.name: x for x in p(open(sys.argv[1]).read())}; "
      "assert f[\"troupe_train_loss\"].samples[0].value > 0; "
      "assert f[\"troupe_train_recoveries\"].type == \"counter\"; print(len(f))' " +
      file);
  std::filesystem::remove(file);
  EXPECT_EQ(parsed.code, 0) << parsed.output;
}

// A run with DeepSpeed's tensorboard section writes TensorBoard event files in its
// output_path/job_name, which the tensorboard package's own reader reads back: the loss at every
// step, the step time's parts.
TEST(ObservabilityTest, TensorBoardReadsTheRunsScalars) {
  char path[] = "/tmp/troupe-tensorboard-XXXXXX";
  ASSERT_NE(mkdtemp(path), nullptr);
  const std::string dir = path;
  std::string config = read_file(EXAMPLE_CONFIGS "/addition_ddp.json");
  ASSERT_EQ(config.front(), '{');
  config.insert(1, R"("tensorboard": {"enabled": true, "output_path": "tb", "job_name": "run"}, )");
  std::ofstream(dir + "/config.json") << config;
  const testing::Shell run = testing::shell("cd '" + dir +
                                            "' && timeout -s KILL 240 '" TROUPE_BINARY
                                            "' train --config config.json --local 2 --steps 30 "
                                            "--output out");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("TensorBoard: tb/run/events.out.tfevents."), std::string::npos)
      << run.output;
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/tb/run"))
    files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_GT(std::filesystem::file_size(files[0]), 30u * 10);

  std::optional<std::string> python;
  for (const std::string candidate : {"/tmp/torchenv/bin/python", "python3"}) {
    if (testing::shell("timeout 60 '" + candidate + "' -c 'import tensorboard'").code == 0) {
      python = candidate;
      break;
    }
  }
  if (!python) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "the tensorboard package is not installed "
                    "(tests/reference/setup_reference_env.sh installs it)";
  }
  const testing::Shell read = testing::shell(
      "timeout 120 '" + *python +
      "' -c 'import sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "a = EventAccumulator(sys.argv[1]); a.Reload()\n"
      "loss = a.Scalars(\"loss\")\n"
      "print(len(loss), [e.step for e in loss][:3], loss[-1].value,\n"
      "      len(a.Scalars(\"step_seconds/compute\")))' '" +
      dir + "/tb/run'");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(read.code, 0) << read.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(read.output, m, std::regex(R"rx(30 \[1, 2, 3\] ([0-9.]+) 30)rx")))
      << read.output;
  EXPECT_GT(std::stod(m[1]), 0);
}

// What a trace file holds, as Python's json module reads it: the step spans' numbers, the ranks'
// process names and the forward spans of rank d0.p0.t0, or the error. Every span's duration is
// checked to be >= 0 and every event to be a complete span, a counter or metadata.
struct TraceSummary {
  bool valid = false;
  std::string error;
  std::vector<int> steps;
  int ranks = 0;
  int forwards = 0;  // spans named "forward ..." on the first rank
  int checkpoints = 0;
  int updates = 0;  // the first rank's shard updates
};
TraceSummary read_trace(const std::string& path) {
  const testing::Shell out = testing::shell(
      "python3 -c 'import json, sys\n"
      "t = json.load(open(sys.argv[1]))\n"
      "ev = t[\"traceEvents\"]\n"
      "assert all(e[\"ph\"] in (\"X\", \"C\", \"M\") for e in ev)\n"
      "assert all(e[\"dur\"] >= 0 for e in ev if e[\"ph\"] == \"X\")\n"
      "names = {e[\"pid\"]: e[\"args\"][\"name\"] for e in ev if e[\"name\"] == \"process_name\"}\n"
      "first = [p for p, n in names.items() if n == \"rank d0.p0.t0\"]\n"
      "steps = [int(e[\"name\"].split()[1]) for e in ev if e[\"ph\"] == \"X\" and e[\"cat\"] == "
      "\"step\"]\n"
      "fw = [e for e in ev if e[\"ph\"] == \"X\" and first and e[\"pid\"] == first[0] and "
      "e[\"name\"].startswith(\"forward\")]\n"
      "ck = [e for e in ev if e[\"ph\"] == \"X\" and e[\"cat\"] == \"checkpoint\"]\n"
      "up = [e for e in ev if e[\"ph\"] == \"X\" and first and e[\"pid\"] == first[0] and "
      "e[\"cat\"] == \"optimizer\"]\n"
      "print(\"steps\", \" \".join(map(str, steps)) or \"-\", \"ranks\", len(names) - 1, "
      "\"forwards\", len(fw), \"checkpoints\", len(ck), \"updates\", len(up))' '" +
      path + "'");
  TraceSummary t;
  std::smatch m;
  if (out.code != 0 ||
      !std::regex_search(out.output, m,
                         std::regex(R"(steps ([0-9 -]+) ranks ([0-9]+) forwards ([0-9]+) )"
                                    R"(checkpoints ([0-9]+) updates ([0-9]+))"))) {
    t.error = out.output;
    return t;
  }
  t.valid = true;
  for (const absl::string_view n : absl::StrSplit(std::string(m[1]), ' ', absl::SkipEmpty())) {
    int step = 0;
    if (absl::SimpleAtoi(n, &step)) t.steps.push_back(step);
  }
  t.ranks = std::stoi(m[2]);
  t.forwards = std::stoi(m[3]);
  t.checkpoints = std::stoi(m[4]);
  t.updates = std::stoi(m[5]);
  return t;
}

// `troupe train --trace`: a Perfetto trace of the pipeline example, a span per step, each rank's
// forwards per micro-batch; --trace-steps bounds it; and a run interrupted with Ctrl-C mid-way
// leaves a trace that is valid JSON up to its last step, with the checkpoint Ctrl-C saved.
TEST(ObservabilityTest, TheTraceHasEveryStepAndStaysValidWhenInterrupted) {
  if (testing::shell("command -v python3 >/dev/null").code != 0) {
    GTEST_SKIP() << "no python3 to read the trace's JSON with";
  }
  char path[] = "/tmp/troupe-trace-XXXXXX";
  ASSERT_NE(mkdtemp(path), nullptr);
  const std::string dir = path;
  auto train = [&](const std::string& flags, const std::string& config = "addition_pipeline") {
    return testing::shell("cd '" + dir +
                          "' && timeout -s KILL 240 '" TROUPE_BINARY
                          "' train --config '" EXAMPLE_CONFIGS "/" +
                          config + ".json' --local 2 --output out " + flags);
  };
  const testing::Shell whole = train("--steps 12 --trace whole.json");
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(whole.output.find("trace: whole.json"), std::string::npos) << whole.output;
  const TraceSummary t = read_trace(dir + "/whole.json");
  ASSERT_TRUE(t.valid) << t.error;
  EXPECT_EQ(t.steps, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(t.ranks, 4) << "dp 2 x pp 2";
  EXPECT_EQ(t.forwards, 12 * 4) << "4 micro-batches a step";
  EXPECT_EQ(t.updates, 11) << "each step's update, reported with the next step";

  const testing::Shell window = train("--steps 12 --trace window.json --trace-steps 5:8");
  ASSERT_EQ(window.code, 0) << window.output;
  EXPECT_EQ(read_trace(dir + "/window.json").steps, (std::vector<int>{5, 6, 7, 8}));
  const testing::Shell bad = train("--steps 12 --trace bad.json --trace-steps 8:5");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--trace-steps '8:5'"), std::string::npos) << bad.output;

  // Interrupted: Ctrl-C once it has traced a few steps (the DDP example, whose checkpoint.dir
  // makes Ctrl-C save a checkpoint).
  std::thread run(
      [&] { static_cast<void>(train("--steps 100000 --trace cut.json", "addition_ddp")); });
  for (absl::Time deadline = absl::Now() + absl::Seconds(120); absl::Now() < deadline;) {
    if (read_file(dir + "/cut.json").find("\"step 20\"") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  static_cast<void>(testing::shell("pkill -INT -f -- '^" TROUPE_BINARY
                                   " train .*--steps 100000 --trace cut.json'"));
  run.join();
  const TraceSummary cut = read_trace(dir + "/cut.json");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(cut.valid) << cut.error;
  ASSERT_GE(cut.steps.size(), 20u);
  for (size_t i = 0; i < cut.steps.size(); ++i)
    EXPECT_EQ(cut.steps[i], static_cast<int>(i) + 1);
  EXPECT_GE(cut.checkpoints, 1) << "Ctrl-C saves a checkpoint, and the trace shows it";
}

// The headless browser the dashboard test loads the page in, if the machine has one.
std::optional<std::string> browser() {
  for (const char* candidate : {"chromium", "chromium-browser", "google-chrome"}) {
    if (testing::shell(absl::StrCat("command -v ", candidate, " >/dev/null")).code == 0) {
      return std::string(candidate);
    }
  }
  return std::nullopt;
}

// Where the test leaves its screenshot: $TROUPE_ARTIFACT_DIR, else /tmp/troupe-artifacts.
std::string artifact_dir() {
  const char* env = std::getenv("TROUPE_ARTIFACT_DIR");
  std::string dir = env != nullptr && *env != '\0' ? env : "/tmp/troupe-artifacts";
  std::filesystem::create_directories(dir);
  return dir;
}

// The head's dashboard loaded in headless Chromium while a real run trains (the pipeline example,
// dp 2 x pp 2): its charts are drawn from the run's values (the loss curve has points, the latest
// loss is the run's), the pipeline's timeline has every stage's ops, the cluster's nodes are
// listed, and the page logs no error. The screenshot is saved as an artifact.
TEST(ObservabilityTest, TheDashboardDrawsARunningJob) {
  const std::optional<std::string> chromium = browser();
  if (!chromium) {
    GTEST_SKIP() << "no headless browser (Debian's chromium; scripts/setup.sh installs it)";
  }
  // Ctrl-C ends it once the page was read (bounded by its steps and the timeout otherwise).
  TrainingRun run("addition_pipeline", 20000);
  const std::string address = run.address();
  const std::string dir = run.dir();
  // A few dozen steps in, so that the curves have points.
  for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
    const std::string metrics = address.empty() ? "" : http_get(address, "/metrics");
    std::smatch step;
    if (std::regex_search(metrics, step,
                          std::regex(R"(troupe_train_step\{job="[0-9]+"\} ([0-9]+))")) &&
        std::stoi(step[1]) >= 40) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string png = artifact_dir() + "/dashboard.png";
  std::filesystem::remove(png);
  const std::string flags =
      "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars "
      "--window-size=1400,1900 "
      "--virtual-time-budget=6000 --enable-logging=stderr --v=0 --user-data-dir='" +
      dir + "/profile'";
  const testing::Shell dom =
      testing::shell(absl::StrCat("timeout 120 ", *chromium, " ", flags, " --dump-dom 'http://",
                                  address, "/' 2>", dir, "/console.log"));
  const std::string console = read_file(dir + "/console.log");
  const testing::Shell shot = testing::shell(absl::StrCat(
      "timeout 120 ", *chromium, " ", flags, " --screenshot='", png, "' 'http://", address, "/'"));
  // Ends the run: Ctrl-C to the training process (it saves and exits).
  // (The pattern matches the troupe process alone, not the shell or timeout around it.)
  static_cast<void>(
      testing::shell("pkill -INT -f -- '^" TROUPE_BINARY " train .*--steps 20000 --output out'"));
  run.wait();
  ASSERT_FALSE(address.empty()) << run.output();

  ASSERT_EQ(dom.code, 0) << dom.output;
  const std::string& page = dom.output;
  // The charts, drawn from the run's history.
  std::smatch points;
  ASSERT_TRUE(std::regex_search(page, points,
                                std::regex(R"rx(data-series="training" data-points="([0-9]+)")rx")))
      << page.substr(0, 4000);
  EXPECT_GE(std::stoi(points[1]), 2) << "the loss curve has the run's points";
  EXPECT_NE(page.find("data-series=\"tokens/s\""), std::string::npos);
  EXPECT_NE(page.find("data-series=\"compute\""), std::string::npos);
  // The latest values, the job's row, the ranks' memory, the nodes.
  std::smatch loss;
  ASSERT_TRUE(std::regex_search(page, loss, std::regex(R"(data-metric="loss">([0-9.]+)<)")))
      << page.substr(0, 4000);
  EXPECT_GT(std::stod(loss[1]), 0);
  EXPECT_NE(page.find("d1.p1.t0"), std::string::npos) << "the last rank's memory";
  // The timeline: the four stages' forwards and backwards.
  std::smatch spans;
  ASSERT_TRUE(std::regex_search(page, spans, std::regex(R"rx(data-spans="([0-9]+)")rx")))
      << page.substr(0, 4000);
  EXPECT_GE(std::stoi(spans[1]), 4 * 2 * 4) << "4 stages, forward and backward of 4 micro-batches";
  EXPECT_NE(page.find("data-kind=\"backward\""), std::string::npos);
  EXPECT_NE(page.find("class=\"state-RUNNING\""), std::string::npos);
  EXPECT_NE(page.find("worker"), std::string::npos);
  // No script error, no failed request.
  EXPECT_EQ(console.find("Uncaught"), std::string::npos) << console;
  EXPECT_EQ(console.find("Failed to load resource"), std::string::npos) << console;
  EXPECT_EQ(page.find("class=\"error\""), std::string::npos);
  // The screenshot, for a person to look at.
  EXPECT_EQ(shot.code, 0) << shot.output;
  EXPECT_GT(std::filesystem::exists(png) ? std::filesystem::file_size(png) : 0, 10000u) << png;
  std::printf("[ artifact ] %s\n", png.c_str());
}

}  // namespace
}  // namespace troupe
