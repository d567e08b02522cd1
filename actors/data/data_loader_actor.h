// DataLoaderActor: a DataLoader (data_loader.h) as an actor, one per
// data-parallel replica, spawned by name in the training job
// (actors/mesh.h: actor_name(job, "loader", {d, 0, 0})).
//
//   auto loader = system.spawn<DataLoaderActor>({.name = "run-1/loader/d0.p0.t0"},
//                                               LoaderOptions{.task = "addition", ...});
//   absl::StatusOr<Batch> batch = loader->call(&DataLoaderActor::next).get(timeout);
//
// A spawn whose options are bad or whose dataset is missing or too small
// fails with DataLoader::create's error (InvalidArgument, NotFound, ...) and
// message, after "cannot spawn DataLoaderActor: ". A restarted actor starts
// again at options.start_position: whoever restarts it seeks to its cursor.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/data/data_loader.h"
#include "core/actor.h"
#include "core/actor_declare.h"

namespace troupe::actors {

class DataLoaderActor {
 public:
  // The errors of DataLoader::create. With options.job set, publishes the
  // loader for the stage of coordinate (rank, stage, slice) in this process:
  // actor_name(job, "loader", ...) in actors/handoff.h; the stage then takes
  // batches by pointer.
  static absl::StatusOr<std::unique_ptr<DataLoaderActor>> create(const LoaderOptions& options);
  ~DataLoaderActor();

  // As DataLoader's.
  absl::StatusOr<Batch> next();
  int64_t position() const;
  absl::Status seek(int64_t position);
  LoaderInfo info() const;

 private:
  DataLoaderActor(std::string handoff_name, std::shared_ptr<DataLoader> loader);

  std::string handoff_name_;            // empty: not handed off
  std::shared_ptr<DataLoader> loader_;  // never null
};
TROUPE_ACTOR_DECLARE(DataLoaderActor, &DataLoaderActor::next, &DataLoaderActor::position,
                     &DataLoaderActor::seek, &DataLoaderActor::info);
// Other processes spawn it with its options: spawn<DataLoaderActor>(spawn_options, loaderOptions).
TROUPE_ACTOR_CONSTRUCTOR_DECLARE(DataLoaderActor, LoaderOptions);

}  // namespace troupe::actors
