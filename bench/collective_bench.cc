// Collective benchmark: allreduce, reduce-scatter or allgather (fp32, sum)
// bus bandwidth in the nccl-tests convention and 8-byte allreduce latency,
// for troupe and, in the same invocation, Gloo (allreduce only) and Open MPI
// (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather), with every rank a
// separate process on this host.
//
//   collective_bench [--op allreduce|reduce_scatter|allgather] [--ranks 2,4] [--sizes
//   1K,4K,...,64M] [--iters N]
//                    [--warmup N] [--latency-iters N] [--repeat 3]
//                    [--transport ucx|tcp] [--algorithm auto|ring|...]
//                    [--shared-memory on|off]
//                    [--peers gloo,mpi] [--timeout 300] [--json FILE]
//
// algbw = bytes / time per operation; busbw = algbw x 2(n-1)/n for allreduce
// and x (n-1)/n for reduce-scatter and allgather (bytes: the whole buffer),
// the rate each rank's link would need for a ring to take that time
// (nccl-tests' PERFORMANCE.md), so it compares across rank counts. Time is the slowest
// rank's mean over the timed iterations (after warm-up and a correctness
// check), the median over --repeat runs. Each run starts its group afresh,
// the libraries taking turns, so drift in a shared machine's load spreads
// over all three.
//
// troupe: its own transport per rank (ucx: shared memory; or tcp), meeting
// through a FileStore; as every rank runs on this host, the collectives go
// through a segment of shared memory the ranks map together (kAuto's choice
// there), or with --shared-memory off over the transport. Gloo: tcp device on 127.0.0.1 (it has no
// shared- memory transport), ring allreduce, as PyTorch's CPU process group runs it. MPI: Open
// MPI's MPI_Allreduce over shared memory (vader), started by mpirun. A peer that is not built in,
// or whose launcher is not on PATH, is skipped with a message; one that fails to run is dropped
// with its error. A wrong result from any library fails the benchmark.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/collective_bench.h"
#include "bench/collective_bench_report.h"
#include "transport/collectives/collectives.h"

using namespace troupe::bench::collective;

namespace {

std::string self_path() {
  char buf[PATH_MAX] = {};
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The peers to run, with a message for each one that cannot be.
std::vector<Library> usable_peers(const std::string& wanted, [[maybe_unused]] std::string* mpirun) {
  std::vector<Library> peers;
  for (absl::string_view name : absl::StrSplit(wanted, ',', absl::SkipEmpty())) {
    if (name == "gloo") {
#ifdef TROUPE_HAVE_GLOO
      peers.push_back(Library::kGloo);
#else
      std::printf("gloo: skipped (not built in: libgloo-dev was not found at configure time)\n");
#endif
    } else if (name == "mpi") {
#ifdef TROUPE_HAVE_MPI
      *mpirun = find_on_path("mpirun");
      if (mpirun->empty()) {
        std::printf("mpi: skipped (no mpirun on PATH; install openmpi-bin)\n");
      } else {
        peers.push_back(Library::kMpi);
      }
#else
      std::printf("mpi: skipped (not built in: no MPI C library was found at configure time)\n");
#endif
    } else if (name != "none") {
      std::printf("%s: skipped (unknown peer; known: gloo, mpi)\n", std::string(name).c_str());
    }
  }
  return peers;
}

int run_child(const troupe::bench::Flags& flags) {
  if (flags.has("--troupe-child")) return troupe_rank_main(flags);
#ifdef TROUPE_HAVE_GLOO
  if (flags.has("--gloo-child")) return gloo_rank_main(flags);
#endif
#ifdef TROUPE_HAVE_MPI
  if (flags.has("--mpi-child")) return mpi_rank_main(flags);
#endif
  std::fprintf(stderr, "collective_bench: this build has no such rank kind\n");
  return kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::bench::Flags flags(argc, argv);
  if (flags.has("--troupe-child") || flags.has("--gloo-child") || flags.has("--mpi-child")) {
    return run_child(flags);
  }
  if (flags.has("--help")) {
    std::printf(
        "usage: collective_bench [--op allreduce|reduce_scatter|allgather] [--ranks 2,4]\n"
        "                        [--sizes 1K,4K,...,64M] [--iters N] [--warmup N]\n"
        "                        [--latency-iters N] [--repeat 3] [--transport ucx|tcp]\n"
        "                        [--algorithm auto|ring|halving-doubling|hierarchical|\n"
        "                        shared-memory] [--shared-memory on|off]\n"
        "                        [--peers gloo,mpi|none] [--timeout SECONDS] [--json FILE]\n");
    return 0;
  }
  absl::StatusOr<Plan> plan = plan_from(flags);
  int repeat = static_cast<int>(flags.get_long("--repeat", 3));
  GroupOptions options;
  options.transport = flags.get("--transport", "ucx");
  options.algorithm = flags.get("--algorithm", "auto");
  const std::string shared_memory = flags.get("--shared-memory", "on");
  if (shared_memory != "on" && shared_memory != "off") {
    std::fprintf(stderr, "collective_bench: --shared-memory is on or off\n");
    return 2;
  }
  options.shared_memory = shared_memory == "on";
  options.timeout = absl::Seconds(flags.get_long("--timeout", 300));
  options.self = self_path();
  std::vector<int> rank_counts;
  for (absl::string_view n : absl::StrSplit(flags.get("--ranks", "2,4"), ',', absl::SkipEmpty())) {
    int value = 0;
    if (!absl::SimpleAtoi(n, &value) || value < 1) {
      std::fprintf(stderr, "collective_bench: --ranks wants positive counts\n");
      return 2;
    }
    rank_counts.push_back(value);
  }
  if (!plan.ok() || repeat < 1 || rank_counts.empty()) {
    std::fprintf(
        stderr, "collective_bench: %s\n",
        plan.ok() ? "--repeat and --ranks must be positive" : plan.status().ToString().c_str());
    return 2;
  }
  for (int n : rank_counts) {
    for (size_t bytes : plan->sizes) {
      if (plan->op != Op::kAllreduce && bytes % (sizeof(float) * static_cast<size_t>(n)) != 0) {
        std::fprintf(stderr,
                     "collective_bench: %s of %zu B on %d ranks: a size must be a multiple of "
                     "%zu B (4 B per element per rank)\n",
                     name_of(plan->op), bytes, n, sizeof(float) * static_cast<size_t>(n));
        return 2;
      }
    }
  }
  if (auto a = troupe::transport::parse_algorithm(options.algorithm); !a.ok()) {
    std::fprintf(stderr, "collective_bench: %s\n", a.status().ToString().c_str());
    return 2;
  }
  if (options.transport != "ucx" && options.transport != "tcp") {
    std::fprintf(stderr, "collective_bench: --transport is ucx or tcp\n");
    return 2;
  }
  std::vector<Library> libraries = {Library::kTroupe};
  for (Library peer : usable_peers(flags.get("--peers", "gloo,mpi"), &options.mpirun)) {
    if (peer == Library::kGloo && plan->op != Op::kAllreduce) {
      std::printf("gloo: skipped (its %s is not measured here)\n", name_of(plan->op));
      continue;
    }
    libraries.push_back(peer);
  }

  std::string work = (std::filesystem::temp_directory_path() / "collective-bench-XXXXXX").string();
  if (::mkdtemp(work.data()) == nullptr) {
    std::fprintf(stderr, "collective_bench: cannot create a directory under %s: %s\n",
                 std::filesystem::temp_directory_path().c_str(), std::strerror(errno));
    return 1;
  }
  Report report{*plan, repeat, options.transport, options.algorithm};
  int runs = 0;
  int exit_code = 0;
  for (int n : rank_counts) {
    for (int rep = 0; rep < repeat && exit_code == 0; ++rep) {
      for (Library library : libraries) {
        if (report.dropped.contains(library)) continue;
        options.run_dir = absl::StrCat(work, "/run-", runs++);
        std::filesystem::create_directory(options.run_dir);
        std::printf("collective_bench: %s, %d ranks, run %d of %d\n", name_of(library), n, rep + 1,
                    repeat);
        absl::StatusOr<RankFigures> figures = run_group(library, n, *plan, options);
        if (figures.ok()) {
          report.runs[{n, library}].push_back(*std::move(figures));
          continue;
        }
        std::fprintf(stderr, "collective_bench: %s\n", figures.status().ToString().c_str());
        if (library == Library::kTroupe || figures.status().code() == absl::StatusCode::kDataLoss) {
          exit_code = 1;  // troupe must run, and every library must be right
          break;
        }
        report.dropped[library] = std::string(figures.status().message());
      }
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(work, ignored);
  if (exit_code != 0) {
    std::fprintf(stderr, "collective_bench: FAILED\n");
    return exit_code;
  }
  print_report(report, rank_counts);
  std::string json = flags.get("--json", "");
  if (!json.empty() && !write_report_json(json, report, rank_counts)) {
    std::fprintf(stderr, "collective_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
