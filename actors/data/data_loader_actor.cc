#include "actors/data/data_loader_actor.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "actors/handoff.h"
#include "actors/mesh.h"

namespace troupe::actors {

DataLoaderActor::DataLoaderActor(LoaderOptions options) {
  if (!options.job.empty()) {
    handoff_name_ = actor_name(options.job, "loader", {.d = options.rank, .p = 0, .t = 0});
  }
  absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::create(std::move(options));
  if (!loader.ok()) throw std::invalid_argument(std::string(loader.status().message()));
  loader_ = *std::move(loader);
  if (!handoff_name_.empty()) Handoff::publish(handoff_name_, loader_);
}

DataLoaderActor::~DataLoaderActor() {
  if (!handoff_name_.empty()) Handoff::retract(handoff_name_, loader_.get());
}

absl::StatusOr<Batch> DataLoaderActor::next() {
  return loader_->next();
}

int64_t DataLoaderActor::position() const {
  return loader_->position();
}

absl::Status DataLoaderActor::seek(int64_t position) {
  return loader_->seek(position);
}

LoaderInfo DataLoaderActor::info() const {
  return loader_->info();
}

// Lets other processes spawn a loader: spawn<DataLoaderActor>(options, loader_options).
TROUPE_ACTOR_CONSTRUCTOR(DataLoaderActor, LoaderOptions);

}  // namespace troupe::actors
