// An MPI rank of collective_bench (started by mpirun, which the parent runs;
// see mpi_command in collective_bench.cc): MPI_Allreduce in place on
// MPI_COMM_WORLD, MPI_FLOAT and MPI_SUM, Open MPI choosing its algorithm.
// The C API only: without these, Open MPI's mpi.h pulls in its C++ bindings,
// which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "bench/collective_bench.h"

namespace troupe::bench::collective {
namespace {

absl::Status mpi_status(const char* what, int code) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(absl::StrCat(what, ": ", std::string(text, length)));
}

class MpiRank final : public RankComm {
 public:
  MpiRank() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status allreduce_sum(float* data, size_t count) override {
    return mpi_status("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count),
                                                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
  absl::Status reduce_scatter_sum(const float* input, float* output, size_t count) override {
    return mpi_status("MPI_Reduce_scatter_block",
                      MPI_Reduce_scatter_block(input, output, static_cast<int>(count), MPI_FLOAT,
                                               MPI_SUM, MPI_COMM_WORLD));
  }
  absl::Status allgather(const float* input, float* output, size_t count) override {
    return mpi_status("MPI_Allgather",
                      MPI_Allgather(input, static_cast<int>(count), MPI_FLOAT, output,
                                    static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD));
  }
  absl::Status barrier() override { return mpi_status("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD)); }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

int mpi_rank_main(const Flags& flags) {
  int argc = 0;
  char** argv = nullptr;
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    return rank_exit_code("mpi rank", absl::InternalError("MPI_Init failed"));
  }
  // Errors come back as codes rather than aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MpiRank rank;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<Plan> plan = plan_from(flags);
    if (!plan.ok()) return plan.status();
    return run_rank(rank, *plan, figures_path(flags.get("--run-dir", ""), rank.rank()));
  }();
  int code = rank_exit_code(absl::StrCat("mpi rank ", rank.rank(), " of ", rank.size()), status);
  if (code != 0) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return 0;
}

}  // namespace troupe::bench::collective
