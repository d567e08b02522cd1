// A troupe rank of collective_bench: its own transport (ucx or tcp on
// loopback), a Communicator found through a FileStore in the run directory,
// and allreduce() from transport/collectives/collectives.h.
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/collective_bench.h"
#include "transport/collectives/collectives.h"
#include "transport/collectives/file_store.h"
#include "transport/connection.h"

namespace troupe::bench::collective {
namespace {

using transport::Algorithm;
using transport::Communicator;

constexpr char kToken[] = "collective-bench-token";
constexpr absl::Duration kTimeout = absl::Seconds(120);  // rendezvous, and each recv

class TroupeRank final : public RankComm {
 public:
  TroupeRank(Communicator& comm, Algorithm algorithm) : comm_(comm), algorithm_(algorithm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  absl::Status allreduce_sum(float* data, size_t count) override {
    return transport::allreduce(comm_, transport::DType::kFloat32, transport::ReduceOp::kSum, data,
                                count, algorithm_);
  }
  absl::Status reduce_scatter_sum(const float* input, float* output, size_t count) override {
    return transport::reduce_scatter(comm_, transport::DType::kFloat32, transport::ReduceOp::kSum,
                                     input, output, count, reduce_scatter_algorithm());
  }
  absl::Status allgather(const float* input, float* output, size_t count) override {
    return transport::allgather(comm_, input, output, count * sizeof(float));
  }
  // reduce_scatter runs the ring or shared memory; for the others, kAuto's choice.
  Algorithm reduce_scatter_algorithm() const {
    return algorithm_ == Algorithm::kRing || algorithm_ == Algorithm::kSharedMemory
               ? algorithm_
               : Algorithm::kAuto;
  }
  // A one-element allreduce: it returns on no rank before every rank entered it.
  absl::Status barrier() override {
    float one = 1;
    return transport::allreduce(comm_, transport::DType::kFloat32, transport::ReduceOp::kSum, &one,
                                1, Algorithm::kRing);
  }

 private:
  Communicator& comm_;
  const Algorithm algorithm_;
};

absl::Status run(const Flags& flags, int rank, int size) {
  absl::StatusOr<Plan> plan = plan_from(flags);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<Algorithm> algorithm =
      transport::parse_algorithm(flags.get("--algorithm", "auto"));
  if (!algorithm.ok()) return algorithm.status();
  const std::string kind = flags.get("--transport", "ucx");
  const std::string run_dir = flags.get("--run-dir", "");

  transport::TransportOptions options;
  options.token = kToken;
  options.local_name = absl::StrCat("collective_bench rank ", rank);
  auto t = transport::make_transport(kind, options);
  if (!t.ok()) return t.status();
  transport::FileStore store(run_dir);
  auto comm = Communicator::create(**t, store,
                                   {.rank = rank,
                                    .size = size,
                                    .group = "bench",
                                    .listen_address = kind + "://127.0.0.1:0",
                                    .timeout = kTimeout,
                                    .shared_memory = flags.get("--shared-memory", "on") == "on"});
  if (!comm.ok()) return comm.status();
  TroupeRank bench_rank(**comm, *algorithm);
  absl::Status status = run_rank(bench_rank, *plan, figures_path(run_dir, rank));
  // Leave only when every rank is done: one that tears its transport down at
  // once could cut another's last frames short. (A failed rank leaves at once;
  // the others then fail too.)
  if (!status.ok()) return status;
  if (absl::Status s = store.set(absl::StrCat("bench/done/", rank), ""); !s.ok()) return s;
  for (int peer = 0; peer < size; ++peer) {
    if (auto s = store.wait_get(absl::StrCat("bench/done/", peer), kTimeout); !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace

int troupe_rank_main(const Flags& flags) {
  int rank = static_cast<int>(flags.get_long("--rank", -1));
  int size = static_cast<int>(flags.get_long("--size", 0));
  return rank_exit_code(absl::StrCat("troupe rank ", rank, " of ", size), run(flags, rank, size));
}

}  // namespace troupe::bench::collective
