// collective_bench's parts. The parent (collective_bench.cc) starts the ranks
// of each library as separate processes of its own executable and prints
// what they measured; each rank runs the same Plan through a RankComm (one
// per library: collective_bench_troupe.cc, _gloo.cc, _mpi.cc) and writes its
// figures to a file the parent reads back.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"

namespace troupe::bench::collective {

// Exit codes of a rank process. kExitWrongResult is a failed correctness
// check (the benchmark fails, whichever library it was); kExitFailed is any
// other failure (a peer library that cannot run is skipped).
inline constexpr int kExitFailed = 1;
inline constexpr int kExitWrongResult = 3;

inline constexpr size_t kLatencyBytes = 8;  // two fp32 elements

// The collective measured (fp32, sum). A size is the whole buffer, as in
// nccl-tests: reduce-scatter's input and allgather's output, each rank
// holding size / n of it; busbw = algbw x 2(n-1)/n for allreduce and
// x (n-1)/n for the other two.
enum class Op { kAllreduce, kReduceScatter, kAllgather };
const char* name_of(Op op);  // "allreduce", "reduce_scatter", "allgather"
absl::StatusOr<Op> parse_op(const std::string& name);
double bus_factor(Op op, int ranks);

// What every rank of a group runs; the same on every rank. Sizes in bytes,
// multiples of 4 (fp32 elements) - for reduce-scatter and allgather, of 4n.
struct Plan {
  Op op = Op::kAllreduce;
  std::vector<size_t> sizes;
  long iterations = 0;          // timed iterations per size; 0: by size
  long warmup = -1;             // warm-up iterations per size; -1: by size
  long latency_iterations = 0;  // timed 8-byte allreduces; 0: 2000 (or `iterations` if set)
};

// Timed iterations for `bytes`: plan.iterations, else 256 MiB / bytes within [5, 1000].
long timed_iterations(const Plan& plan, size_t bytes);
// Warm-up iterations: plan.warmup, else a tenth of the timed ones within [2, 20].
long warmup_iterations(const Plan& plan, size_t bytes);
long latency_iterations(const Plan& plan);

// The plan as flags for a rank's command line, and back.
std::vector<std::string> plan_flags(const Plan& plan);
absl::StatusOr<Plan> plan_from(const Flags& flags);
// "1024,4K,64M" -> bytes. InvalidArgument for a size that is not a positive
// multiple of 4.
absl::StatusOr<std::vector<size_t>> parse_sizes(const std::string& list);

// One rank of a collective library, as the benchmark drives it.
class RankComm {
 public:
  virtual ~RankComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, count) = sum over ranks, in place (fp32).
  virtual absl::Status allreduce_sum(float* data, size_t count) = 0;
  // output[0, count) = the sum over ranks of their input[rank() * count,
  // (rank() + 1) * count) (input holds size() * count).
  virtual absl::Status reduce_scatter_sum(const float* input, float* output, size_t count) {
    static_cast<void>(input), static_cast<void>(output), static_cast<void>(count);
    return absl::UnimplementedError("this library's reduce_scatter is not measured");
  }
  // output[k * count, (k + 1) * count) = rank k's input[0, count).
  virtual absl::Status allgather(const float* input, float* output, size_t count) {
    static_cast<void>(input), static_cast<void>(output), static_cast<void>(count);
    return absl::UnimplementedError("this library's allgather is not measured");
  }
  // Returns once every rank has called it; starts each timed set together.
  virtual absl::Status barrier() = 0;
};

// What one rank measured: seconds per operation (the latency is always the
// 8-byte allreduce's).
struct RankFigures {
  std::map<size_t, double> seconds;  // by size in bytes
  double latency = 0;                // of the kLatencyBytes allreduce
};

// Runs `plan` on `comm`: for each size, warm-up iterations, one allreduce of
// rank r's (r + 1) * (i % 7 + 1) checked against the closed form (i % 7 + 1)
// * n(n + 1)/2 (exact in fp32), a barrier, then the timed iterations; then the
// same for the 8-byte latency. The timed iterations reduce zeros, so that
// sums repeated in place stay finite (an fp32 add costs the same whatever the
// values). Errors: the library's, or DataLoss for a wrong result (naming the
// size, element and values). Figures are written to `figures_path`.
absl::Status run_rank(RankComm& comm, const Plan& plan, const std::string& figures_path);

// The figures file of rank `rank` of run `run_dir` ("<run_dir>/rank-<rank>").
std::string figures_path(const std::string& run_dir, int rank);
absl::StatusOr<RankFigures> read_figures(const std::string& path);

// A rank's entry points (main() dispatches on --troupe-child, --gloo-child,
// --mpi-child); each returns the process's exit code. Flags: --rank, --size
// (not for MPI, which has its own), --run-dir (the rendezvous directory, and
// where figures go), plan_flags, and --transport/--algorithm/--shared-memory for troupe.
int troupe_rank_main(const Flags& flags);
int gloo_rank_main(const Flags& flags);  // only with TROUPE_HAVE_GLOO
int mpi_rank_main(const Flags& flags);   // only with TROUPE_HAVE_MPI

// The exit code for `status`, which is printed first, prefixed by `who`
// ("troupe rank 1 of 2").
int rank_exit_code(const std::string& who, const absl::Status& status);

// --- the parent's side: groups of rank processes -------------------------

enum class Library { kTroupe, kGloo, kMpi };
const char* name_of(Library library);  // "troupe", "gloo", "mpi"

struct GroupOptions {
  std::string self;                             // this executable, which the ranks run
  std::string mpirun;                           // for kMpi: the mpirun to start them with
  std::string run_dir;                          // an empty directory of the group's own
  std::string transport;                        // troupe's: "ucx" or "tcp"
  std::string algorithm;                        // troupe's, as parse_algorithm reads it
  bool shared_memory = true;                    // troupe's CommunicatorOptions::shared_memory
  absl::Duration timeout = absl::Seconds(300);  // for the whole group
};

// Starts `ranks` processes of `library` running `plan` (fork/exec of `self`
// with the hidden rank flags; for kMpi, mpirun starting them), waits for all,
// and returns each size's slowest rank (max seconds over ranks), the
// latency's too. Errors: DataLoss when a rank found a wrong result;
// DeadlineExceeded when the group outlived the timeout (its processes are
// killed); Internal when a rank failed otherwise (its own message is on
// stderr). Once one rank fails, the others get 10 s before they are killed.
absl::StatusOr<RankFigures> run_group(Library library, int ranks, const Plan& plan,
                                      const GroupOptions& options);

// The absolute path of `program` on $PATH, or "" when it is not there.
std::string find_on_path(const std::string& program);

}  // namespace troupe::bench::collective
