#include "actors/data/data_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troupe::actors {
namespace {

constexpr int kMaxPrefetch = 1024;

absl::Status check_options(const LoaderOptions& o) {
  auto at_least_one = [](const char* name, int64_t value) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: ", name, " is ", value, ", expected >= 1"));
  };
  if (absl::Status s = at_least_one("seq_len", o.seq_len); !s.ok()) return s;
  if (absl::Status s = at_least_one("micro_batch", o.micro_batch); !s.ok()) return s;
  if (absl::Status s = at_least_one("grad_accum", o.grad_accum); !s.ok()) return s;
  if (absl::Status s = at_least_one("dp", o.dp); !s.ok()) return s;
  if (o.rank < 0 || o.rank >= o.dp) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: rank ", o.rank, " is not in [0, dp = ", o.dp, ")"));
  }
  if (o.prefetch < 0 || o.prefetch >= kMaxPrefetch) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: prefetch is ", o.prefetch,
                                                   ", expected 0 to ", kMaxPrefetch - 1));
  }
  if (o.start_position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: start_position is ", o.start_position, ", expected >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenDataset> load_dataset(const LoaderOptions& options) {
  if (options.path.empty() == options.task.empty()) {
    return absl::InvalidArgumentError(
        options.path.empty()
            ? "data loader: no data: set path (a token dataset) or task (\"addition\")"
            : absl::StrCat("data loader: both path (", options.path, ") and task (", options.task,
                           ") are set; set one"));
  }
  if (!options.path.empty()) return TokenDataset::open(options.path);
  if (options.task != "addition") {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: unknown task \"", options.task, "\" (known: addition)"));
  }
  AdditionTaskOptions addition = options.addition;
  if (addition.seq_len != 0 && addition.seq_len != options.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: addition.seq_len ",
                                                   addition.seq_len, " differs from seq_len ",
                                                   options.seq_len, " (leave it 0)"));
  }
  addition.seq_len = options.seq_len;
  return make_addition_dataset(addition);
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::create(LoaderOptions options) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  absl::StatusOr<TokenDataset> dataset = load_dataset(options);
  if (!dataset.ok()) return dataset.status();
  return create(std::move(options), *std::move(dataset));
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::create(LoaderOptions options,
                                                               TokenDataset dataset) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  const int64_t num_samples = dataset.num_samples(options.seq_len);
  absl::StatusOr<DistributedSampler> sampler =
      DistributedSampler::create({.num_samples = num_samples,
                                  .micro_batch = options.micro_batch,
                                  .grad_accum = options.grad_accum,
                                  .dp = options.dp,
                                  .rank = options.rank,
                                  .seed = options.seed,
                                  .shuffle = options.shuffle});
  if (!sampler.ok()) {
    const int64_t g = int64_t{options.micro_batch} * options.grad_accum * options.dp;
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.name(), ": ", dataset.num_tokens(), " tokens make ", num_samples,
        " samples of seq_len ", options.seq_len, ", fewer than one global batch (micro_batch ",
        options.micro_batch, " x grad_accum ", options.grad_accum, " x dp ", options.dp, " = ", g,
        "); use more data, a shorter seq_len or a smaller batch"));
  }
  return std::unique_ptr<DataLoader>(
      new DataLoader(std::move(options), std::move(dataset), *std::move(sampler)));
}

DataLoader::DataLoader(LoaderOptions options, TokenDataset dataset, DistributedSampler sampler)
    : options_(std::move(options)),
      dataset_(std::move(dataset)),
      sampler_(std::make_shared<const DistributedSampler>(std::move(sampler))) {
  const std::string& made_by = dataset_.header().source;
  info_ = {.source = made_by.empty() ? dataset_.name()
                                     : absl::StrCat(dataset_.name(), " (", made_by, ")"),
           .num_tokens = dataset_.num_tokens(),
           .vocab_size = dataset_.vocab_size(),
           .seq_len = options_.seq_len};
  describe_sampler();
  consumer_position_ = produce_position_ = options_.start_position;
  if (options_.prefetch > 0) producer_ = std::thread([this] { produce(); });
}

void DataLoader::describe_sampler() {
  const DistributedSampler& s = *sampler_;
  info_.num_samples = s.options().num_samples;
  info_.samples_per_micro_step = s.samples_per_micro_step();
  info_.samples_per_replica_step = int64_t{s.options().micro_batch} * s.options().grad_accum;
  info_.global_batch = s.global_batch();
  info_.steps_per_epoch = s.steps_per_epoch();
  info_.samples_per_epoch = s.samples_per_epoch();
}

LoaderInfo DataLoader::info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return info_;
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  if (producer_.joinable()) producer_.join();
}

absl::StatusOr<Batch> DataLoader::make_batch(const DistributedSampler& sampler,
                                             int64_t position) const {
  const int t = options_.seq_len;
  Batch batch;
  batch.position = position;
  batch.epoch = sampler.epoch_of(position);
  batch.seq_len = t;
  batch.sample_ids = sampler.micro_batch_indices(position);
  const size_t b = batch.sample_ids.size();
  batch.inputs.resize(b * static_cast<size_t>(t));
  batch.targets.resize(b * static_cast<size_t>(t));
  for (size_t k = 0; k < b; ++k) {
    const size_t row = k * static_cast<size_t>(t);
    absl::Status s = dataset_.read_sample(batch.sample_ids[k], t, batch.inputs.data() + row,
                                          batch.targets.data() + row);
    if (!s.ok()) return s;
  }
  return batch;
}

void DataLoader::produce() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    room_.wait(lock, [&] {
      return stop_ || (!error_ && queue_.size() < static_cast<size_t>(options_.prefetch));
    });
    if (stop_) return;
    const int64_t position = produce_position_;
    const uint64_t generation = generation_;
    std::shared_ptr<const DistributedSampler> sampler = sampler_;
    lock.unlock();
    absl::StatusOr<Batch> batch = make_batch(*sampler, position);
    lock.lock();
    if (generation != generation_) continue;  // seek() or reshape() moved the cursor meanwhile
    if (batch.ok()) {
      queue_.push_back(*std::move(batch));
      produce_position_ += sampler->samples_per_micro_step();
    } else {
      error_ = batch.status();
    }
    ready_.notify_all();
  }
}

absl::StatusOr<Batch> DataLoader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (options_.prefetch == 0) {
    absl::StatusOr<Batch> batch = make_batch(*sampler_, consumer_position_);
    if (batch.ok()) consumer_position_ += sampler_->samples_per_micro_step();
    return batch;
  }
  ready_.wait(lock, [&] { return !queue_.empty() || error_.has_value(); });
  if (queue_.empty()) return *error_;
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  consumer_position_ += sampler_->samples_per_micro_step();
  room_.notify_all();
  return batch;
}

int64_t DataLoader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumer_position_;
}

absl::Status DataLoader::seek(int64_t position) {
  if (position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: seek to position ", position, ", expected >= 0"));
  }
  move_to(position, nullptr);
  return absl::OkStatus();
}

void DataLoader::move_to(int64_t position, std::shared_ptr<const DistributedSampler> sampler) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sampler != nullptr) {
      sampler_ = std::move(sampler);
      describe_sampler();
    }
    queue_.clear();
    error_.reset();
    consumer_position_ = produce_position_ = position;
    ++generation_;
  }
  room_.notify_all();
}

absl::StatusOr<int64_t> DataLoader::seek_rebased(int64_t position, int64_t from_samples_per_epoch) {
  if (position < 0 || from_samples_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("data loader: resume at position ", position,
                                                   " of epochs of ", from_samples_per_epoch,
                                                   " samples"));
  }
  std::shared_ptr<const DistributedSampler> sampler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sampler = sampler_;
  }
  const int64_t rebased = sampler->rebase_position(position, from_samples_per_epoch);
  if (absl::Status s = seek(rebased); !s.ok()) return s;
  return rebased;
}

absl::Status DataLoader::reshape(int dp, int rank, int micro_batch, int grad_accum,
                                 int64_t position) {
  std::shared_ptr<const DistributedSampler> current;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current = sampler_;
  }
  SamplerOptions o = current->options();
  o.dp = dp;
  o.rank = rank;
  o.micro_batch = micro_batch;
  o.grad_accum = grad_accum;
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: reshape to rank ", rank, " of dp ", dp, ", micro_batch ", micro_batch,
        " x grad_accum ", grad_accum, " at position ", position, ": ", why));
  };
  if (position < 0) return fail("the position must be >= 0");
  absl::StatusOr<DistributedSampler> sampler = DistributedSampler::create(o);
  if (!sampler.ok()) return fail(sampler.status().message());
  if (sampler->global_batch() != current->global_batch()) {
    return fail(absl::StrCat("the global batch would change from ", current->global_batch(), " to ",
                             sampler->global_batch(),
                             ", and a position would not mean the same data"));
  }
  move_to(position, std::make_shared<const DistributedSampler>(*std::move(sampler)));
  return absl::OkStatus();
}

}  // namespace troupe::actors
