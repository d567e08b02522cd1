// A Gloo rank of collective_bench, written as PyTorch's ProcessGroupGloo
// drives Gloo on CPU tensors: a tcp device on loopback, a full mesh found
// through gloo::rendezvous::FileStore (behind a PrefixStore), and
// gloo::allreduce with the default (ring) algorithm and gloo::sum<float>.
// Gloo reports errors by exception; they stop here, as Status.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/collective_bench.h"

namespace troupe::bench::collective {
namespace {

constexpr std::chrono::seconds kTimeout{120};

template <typename Fn>
absl::Status guarded(const char* what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo ", what, ": ", e.what()));
  }
}

class GlooRank final : public RankComm {
 public:
  explicit GlooRank(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  absl::Status allreduce_sum(float* data, size_t count) override {
    return guarded("allreduce", [&] {
      gloo::AllreduceOptions options(context_);
      options.setOutput(data, count);
      options.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      options.setTag(tag_++);
      gloo::allreduce(options);
    });
  }
  absl::Status barrier() override {
    return guarded("barrier", [&] {
      gloo::BarrierOptions options(context_);
      options.setTag(tag_++);
      gloo::barrier(options);
    });
  }

 private:
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
};

absl::Status run(const Flags& flags, int rank, int size) {
  absl::StatusOr<Plan> plan = plan_from(flags);
  if (!plan.ok()) return plan.status();
  const std::string run_dir = flags.get("--run-dir", "");
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status connected = guarded("rendezvous", [&] {
    gloo::rendezvous::FileStore file_store(run_dir);
    gloo::rendezvous::PrefixStore store("bench", file_store);
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(kTimeout);
    context->connectFullMesh(store, device);
  });
  if (!connected.ok()) return connected;
  GlooRank bench_rank(context);
  absl::Status status = run_rank(bench_rank, *plan, figures_path(run_dir, rank));
  if (!status.ok()) return status;
  return bench_rank.barrier();  // no rank closes its pairs while another still reads
}

}  // namespace

int gloo_rank_main(const Flags& flags) {
  int rank = static_cast<int>(flags.get_long("--rank", -1));
  int size = static_cast<int>(flags.get_long("--size", 0));
  return rank_exit_code(absl::StrCat("gloo rank ", rank, " of ", size), run(flags, rank, size));
}

}  // namespace troupe::bench::collective
