#include "actors/zero_gradient_sync.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "actors/gradient_buckets.h"
#include "actors/step_clock.h"
#include "nn/device_backend.h"

namespace troupe::actors {
namespace {

// Reductions of bucket scratch in flight at once (stages 2, 3), the
// embeddings' bucket among them: what bounds the gradient memory beyond the
// partition, with the bucket being written and the embeddings'.
constexpr size_t kMaxInFlight = 2;

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroGradientSync>> ZeroGradientSync::create(
    const GradientSyncOptions& options, int stage, const StagePlan& plan, nn::Model& gpt,
    CollectiveGroup& group, const ZeroBuffers& buffers) {
  if (absl::Status s = check(options, stage, gpt.layout()); !s.ok()) return s;
  // An empty partition (more ranks than parameters) has no buffer, and needs none.
  const bool empty = ZeroPartition(plan.params, group.world_size(), group.rank()).own().size() == 0;
  if (!empty && ((stage >= 2 && buffers.own_grads == nullptr) ||
                 (stage == 3 && buffers.own_params == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeRO-", stage, ": the stage gave no buffer for its partition"));
  }
  return std::unique_ptr<ZeroGradientSync>(
      new ZeroGradientSync(options, stage, plan, gpt, group, buffers));
}

absl::Status ZeroGradientSync::check(const GradientSyncOptions& options, int stage,
                                     const nn::ModelLayout& layout) {
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("ZeRO stage ", stage, " is not 1, 2 or 3"));
  }
  if (stage == 3) {
    size_t largest = 0;
    for (const nn::ParamRange& r : layout.segment_ranges())
      largest = std::max(largest, r.size());
    if (options.max_live_parameters < static_cast<int64_t>(largest)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zero_optimization.stage3_max_live_parameters ", options.max_live_parameters,
          " is below the ", largest,
          " parameters of the model's largest segment (a block, or the embeddings), which "
          "ZeRO-3 gathers whole; raise it to at least ",
          largest));
    }
  }
  return absl::OkStatus();
}

ZeroGradientSync::ZeroGradientSync(const GradientSyncOptions& options, int stage,
                                   const StagePlan& plan, nn::Model& gpt, CollectiveGroup& group,
                                   const ZeroBuffers& buffers)
    : options_(options),
      stage_(stage),
      gpt_(gpt),
      group_(group),
      partition_(plan.params, group.world_size(), group.rank()),
      buffers_(buffers),
      pool_(nn::MemoryCategory::kGatherBuffers, gpt.device()),
      gather_({.buffered = stage == 3,
               .prefetch_elements = options.prefetch_elements,
               .max_live_elements = options.max_live_parameters,
               .persistence_threshold = options.persistence_threshold},
              gpt, group, partition_, buffers.own_params, pool_),
      layer_buckets_(gpt.layout(),
                     static_cast<size_t>(std::max<int64_t>(options.bucket_elements, 1))) {
  plan_buckets(gpt.layout().segment_ranges());
}

void ZeroGradientSync::plan_buckets(const std::vector<nn::ParamRange>& segments) {
  const int F = static_cast<int>(segments.size()) - 1;  // the head
  const auto limit = static_cast<size_t>(std::max<int64_t>(options_.bucket_elements, 1));
  bucket_of_.assign(segments.size(), 0);
  // Whole segments from the end down to block 0; the embeddings alone, last.
  for (int top = F; top >= 1;) {
    Bucket b{.range = segments[top], .top = top, .bottom = top};
    while (b.bottom > 1 && b.range.size() < limit) {
      --b.bottom;
      b.range.begin = segments[b.bottom].begin;
    }
    for (int s = b.bottom; s <= b.top; ++s)
      bucket_of_[s] = static_cast<int>(buckets_.size());
    buckets_.push_back(b);
    top = b.bottom - 1;
  }
  bucket_of_[0] = static_cast<int>(buckets_.size());
  buckets_.push_back({.range = segments[0], .top = 0, .bottom = 0});
  open_.resize(buckets_.size());
}

float* ZeroGradientSync::owned_gradients() {
  if (stage_ == 1) return gpt_.grads() + partition_.own().begin;
  return buffers_.own_grads;
}

absl::Status ZeroGradientSync::begin_step() {
  drain();
  issue_ms_ = wait_ms_ = comm_ms_ = 0;
  pool_.reset_peak();
  if (stage_ == 1) {
    gpt_.zero_grad();
  } else if (partition_.own().size() > 0) {
    if (absl::Status s =
            nn::zero_bytes(buffers_.own_grads, gpt_.device(),
                           static_cast<int64_t>(partition_.own().size() * sizeof(float)));
        !s.ok()) {
      return s;
    }
  }
  return gather_.begin_step(options_.micro_batches);
}

absl::Status ZeroGradientSync::run_piece(int piece, const std::function<absl::Status()>& body) {
  // A step whose group lost a member cannot succeed: it stops here.
  if (absl::Status s = group_.failed(); !s.ok()) return s;
  if (absl::Status s = gather_.acquire(piece); !s.ok()) return s;
  absl::Status s = body();
  gather_.release(piece);
  return s;
}

absl::StatusOr<float> ZeroGradientSync::forward(const int32_t* inputs, const int32_t* targets,
                                                int B, int T, bool) {
  const int L = gpt_.config().num_layers();
  if (absl::Status s = gpt_.prepare(B, T); !s.ok()) return s;
  if (absl::Status s = run_piece(0, [&] { return gpt_.embed_forward(inputs); }); !s.ok()) return s;
  for (int l = 0; l < L; ++l) {
    if (absl::Status s = run_piece(1 + l, [&] { return gpt_.forward_blocks(l, l + 1); }); !s.ok()) {
      return s;
    }
  }
  // The head's piece stays acquired for its backward, which comes next.
  if (absl::Status s = gather_.acquire(L + 1); !s.ok()) return s;
  absl::StatusOr<float> loss = gpt_.head_forward(targets);
  if (!loss.ok()) drain();
  return loss;
}

absl::Status ZeroGradientSync::backward(float dloss, bool last) {
  absl::Status s = stage_ == 1 ? backward_in_place(dloss, last) : backward_partitioned(dloss);
  if (!s.ok()) drain();
  return s;
}

void ZeroGradientSync::issue_ready(const std::vector<size_t>& ready) {
  for (size_t i : ready) {
    const GradientBucket& b = layer_buckets_.buckets()[i];
    issue_in_place(b.begin, b.end);
  }
}

absl::Status ZeroGradientSync::backward_in_place(float dloss, bool last) {
  const nn::ModelLayout& layout = gpt_.layout();
  const int L = gpt_.config().num_layers();
  const bool overlap = last && options_.overlap_comm;
  layer_buckets_.reset();
  nn::Model::GradientsFinal on_final;
  if (overlap) on_final = [&](size_t from) { issue_ready(layer_buckets_.ready(from)); };
  absl::Status s = gpt_.head_backward(dloss);
  gather_.release(L + 1);
  if (!s.ok()) return s;
  if (overlap) issue_ready(layer_buckets_.ready(layout.block_begin(L)));
  for (int l = L - 1; l >= 0; --l) {
    s = run_piece(2 * L + 1 - l, [&] { return gpt_.backward_blocks(l, l + 1, on_final); });
    if (!s.ok()) return s;
  }
  s = run_piece(2 * L + 2, [&] { return gpt_.embed_backward(); });
  if (!s.ok()) return s;
  // What is left: the embeddings' bucket, or every bucket without overlap.
  if (last) issue_ready(layer_buckets_.ready(0));
  return absl::OkStatus();
}

absl::Status ZeroGradientSync::backward_partitioned(float dloss) {
  const int L = gpt_.config().num_layers(), E = 0, F = L + 1;
  const bool overlap = options_.overlap_comm;
  // The head writes its gradients (and a tied head its share of the token embedding's).
  if (absl::Status s = open_bucket(bucket_of_[E]); !s.ok()) return s;
  if (absl::Status s = open_bucket(bucket_of_[F]); !s.ok()) return s;
  absl::Status s = gpt_.head_backward(dloss);
  gather_.release(L + 1);
  if (!s.ok()) return s;
  if (overlap && buckets_[bucket_of_[F]].bottom == F) issue(bucket_of_[F]);
  for (int l = L - 1; l >= 0; --l) {
    const int seg = 1 + l, b = bucket_of_[seg];
    if (buckets_[b].top == seg) {
      if (s = open_bucket(b); !s.ok()) return s;
    }
    s = run_piece(2 * L + 1 - l, [&] { return gpt_.backward_blocks(l, l + 1); });
    if (!s.ok()) return s;
    if (overlap && buckets_[b].bottom == seg) issue(b);
  }
  s = run_piece(2 * L + 2, [&] { return gpt_.embed_backward(); });
  if (!s.ok()) return s;
  if (!overlap) {
    for (int b = 0; b + 1 < static_cast<int>(buckets_.size()); ++b)
      issue(b);
  }
  issue(bucket_of_[E]);
  return absl::OkStatus();
}

absl::Status ZeroGradientSync::open_bucket(int b) {
  while (in_flight_.size() >= kMaxInFlight) {
    if (absl::Status s = retire_oldest(); !s.ok()) return s;
  }
  const nn::ParamRange& r = buckets_[b].range;
  absl::StatusOr<nn::FloatBuffer> scratch = pool_.take(r.size(), /*zero=*/true);
  if (!scratch.ok()) return scratch.status();
  open_[b] = *std::move(scratch);
  return gpt_.bind_gradients(r.begin, r.end, open_[b].data());
}

void ZeroGradientSync::issue(int b) {
  const nn::ParamRange r = buckets_[b].range;
  Reduction red{.bucket = b, .scratch = std::move(open_[b]), .work = {}, .issued_at = 0};
  float* data = red.scratch.data();
  reduce(std::move(red), data, r);
}

void ZeroGradientSync::issue_in_place(size_t begin, size_t end) {
  reduce(Reduction{.bucket = -1, .scratch = {}, .work = {}, .issued_at = 0}, gpt_.grads() + begin,
         {begin, end});
}

void ZeroGradientSync::reduce(Reduction red, float* data, nn::ParamRange range) {
  const double t0 = now_ms();
  const nn::ParamRange mine = partition_.own_in(range.begin, range.end);
  red.issued_at = t0;
  // In place: this rank's block of `data` receives its reduced part.
  red.work = group_.reduce_scatter_v_async(DType::kFloat32, ReduceOp::kAvg, data,
                                           data + (mine.begin - range.begin),
                                           partition_.counts(range.begin, range.end));
  in_flight_.push_back(std::move(red));
  issue_ms_ += now_ms() - t0;
}

absl::Status ZeroGradientSync::retire_oldest() {
  Reduction& red = in_flight_.front();
  const double t0 = now_ms();
  absl::Status s = CollectiveGroup::wait(red.work);
  wait_ms_ += now_ms() - t0;
  if (!s.ok()) return s;
  comm_ms_ += ms_since_epoch(red.work.finished_at()) - red.issued_at;
  if (red.bucket >= 0) {
    // This rank's part of the reduced bucket joins what earlier micro-batches left.
    const nn::ParamRange& r = buckets_[red.bucket].range;
    const nn::ParamRange mine = partition_.own_in(r.begin, r.end);
    if (mine.size() > 0) {
      float* dst = buffers_.own_grads + (mine.begin - partition_.own().begin);
      const float* src = red.scratch.data() + (mine.begin - r.begin);
      absl::StatusOr<nn::DeviceBackend*> device = nn::backend(gpt_.device().kind);
      if (!device.ok()) return device.status();
      if (absl::Status added = (*device)->add(gpt_.device().index, dst, src, mine.size());
          !added.ok()) {
        return added;
      }
    }
    pool_.give(std::move(red.scratch));
  }
  in_flight_.pop_front();
  return absl::OkStatus();
}

absl::Status ZeroGradientSync::finish(SyncTimes& times) {
  while (!in_flight_.empty()) {
    if (absl::Status s = retire_oldest(); !s.ok()) {
      drain();
      return s;
    }
  }
  times.comm_ms = comm_ms_ + gather_.comm_ms();
  times.exposed_ms = issue_ms_ + wait_ms_ + gather_.wait_ms();
  return absl::OkStatus();
}

void ZeroGradientSync::drain() {
  // Their statuses were (or will be) reported by the step that issued them.
  for (Reduction& red : in_flight_) {
    CollectiveGroup::wait(red.work).IgnoreError();
    pool_.give(std::move(red.scratch));
  }
  in_flight_.clear();
  for (nn::FloatBuffer& b : open_)
    pool_.give(std::move(b));
  gather_.drain();
}

absl::Status ZeroGradientSync::gather_parameters() {
  drain();
  return gather_.gather_all();
}

size_t ZeroGradientSync::peak_buffer_bytes() const {
  return pool_.peak_bytes();
}

}  // namespace troupe::actors
