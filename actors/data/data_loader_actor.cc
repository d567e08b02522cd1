#include "actors/data/data_loader_actor.h"

#include <string>
#include <utility>

#include "actors/handoff.h"
#include "actors/mesh.h"

namespace troupe::actors {

absl::StatusOr<std::unique_ptr<DataLoaderActor>> DataLoaderActor::create(
    const LoaderOptions& options) {
  std::string handoff_name;
  if (!options.job.empty()) {
    handoff_name = actor_name(options.job, "loader",
                              {.d = options.rank, .p = options.stage, .t = options.slice});
  }
  absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::create(options);
  if (!loader.ok()) return loader.status();
  return std::unique_ptr<DataLoaderActor>(
      new DataLoaderActor(std::move(handoff_name), *std::move(loader)));
}

DataLoaderActor::DataLoaderActor(std::string handoff_name, std::shared_ptr<DataLoader> loader)
    : handoff_name_(std::move(handoff_name)), loader_(std::move(loader)) {
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

TROUPE_ACTOR_DEFINE(DataLoaderActor);
TROUPE_ACTOR_CONSTRUCTOR_DEFINE(DataLoaderActor, LoaderOptions);

}  // namespace troupe::actors
