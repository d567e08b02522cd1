// What every trainer over a mesh of members does the same way, whatever its
// parallelism: it keeps what it spawned (for stop()), forms the mesh once
// each coordinate's loader, stage and shard are spawned (trainers/
// member_spawn.h), and recovers a lost member (trainers/recovery.h) through
// the head (trainers/mesh_watch.h). A trainer derived from it says what its
// mesh is, which actors hold each coordinate, and how it spawns a
// coordinate's actors again; DataParallelTrainer and HybridTrainer are the
// two.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/mesh.h"
#include "trainers/member_spawn.h"
#include "trainers/mesh_watch.h"
#include "trainers/recovery.h"
#include "trainers/trainer.h"

namespace troupe::trainers {

class MeshTrainer : public Trainer, public MeshRepair {
 public:
  // Stops the job (stop()).
  ~MeshTrainer() override;

  const DataInfo& data_info() const final { return data_info_; }
  TrainerController& controller() final { return *controller_; }
  // Kills every actor spawned and removes the placement groups. Idempotent.
  absl::Status stop() final;

  // Recovery, with fault_tolerance.enabled: the actors of a lost coordinate
  // are restarted by the head in their bundle, placed again on a spare node,
  // a node with room, or one that joins; those a restarted head does not
  // know get new ones (respawn).
  MeshRepair* repair() final { return config_.fault_tolerance.enabled ? this : nullptr; }
  std::optional<HeadAway> head_away() const final { return watch_.head_away(); }
  absl::StatusOr<std::vector<LostMember>> find_lost(absl::Time deadline) override;
  absl::Status fence(const std::vector<LostMember>& hung) final;
  absl::Status await_replacements(const std::vector<LostMember>& lost, absl::Time deadline) final;
  // The mesh's collective groups (trainers/mesh_layout.h), each of more than
  // one stage: (p, t)'s data-parallel one, (d, t)'s pipe group, (d, p)'s tp
  // group. The first error; the others are declared all the same.
  absl::Status declare_groups() final;
  void mark_whole() final;
  int64_t samples_per_epoch() const final { return data_info_.samples_per_epoch; }
  std::vector<ActorId> actors_at(const actors::Coordinate& at) const final;

 protected:
  static constexpr absl::Duration kSetupTimeout = absl::Seconds(120);

  MeshTrainer(Cluster& cluster, TrainConfig config, std::string job, int threads)
      : cluster_(cluster), config_(std::move(config)), job_(std::move(job)), threads_(threads) {}

  // The mesh as it stands now.
  virtual actors::Mesh mesh() const = 0;
  // The actors at `at` now. REQUIRES: actors::contains(mesh(), at), and
  // they were spawned.
  virtual const MemberActors& member_at(const actors::Coordinate& at) const = 0;
  // The parameters of pipeline stage p (of any tp slice's layout).
  virtual nn::ParamRange stage_params(int p) const = 0;
  // Recovery: spawns new actors for `at` in bundle 0 of `pg` and holds them
  // as its member from now on (member_at); the controller is told by the
  // caller. Errors: spawn_member's.
  virtual absl::StatusOr<MemberActors> spawn_replacement(const actors::Coordinate& at,
                                                         cluster::PlacementGroupId pg) = 0;
  // The name of the placement group a replacement for `at` is placed in (a
  // count is appended: every one differs).
  virtual std::string replacement_group(const actors::Coordinate& at) const = 0;

  // Places a SPREAD placement group of `bundles` named `name` (kept for
  // stop()), waiting up to kSetupTimeout. Errors: those of creating and of
  // waiting for it.
  absl::StatusOr<cluster::PlacementGroupId> place_spread(const std::vector<std::string>& bundles,
                                                         const std::string& name);
  // Where the actors at `at` of `mesh` go and what they join, under
  // `config`: bundle `bundle` of `pg` (with fault tolerance the head
  // restarts them there, placed again elsewhere), the mesh's groups
  // (trainers/mesh_layout.h), names made from `names`; the shard owning its
  // stage's parameters, under ZeRO partition d of them.
  MemberPlace member_place(const actors::Coordinate& at, const actors::Mesh& mesh,
                           cluster::PlacementGroupId pg, int bundle, const std::string& names,
                           const TrainConfig& config) const;
  // Every coordinate of mesh(), in mesh order.
  std::vector<actors::Coordinate> coordinates() const;
  // What the shard at `at` owns: its stage's parameters, under ZeRO
  // partition d of them (at dp mesh().dp).
  nn::ParamRange owned(const actors::Coordinate& at) const;
  // The controller's members: every coordinate's endpoints, in mesh order,
  // with what its shard owns and its buddy (trainers/mesh_layout.h).
  std::vector<MeshMember> members() const;
  // Once the actors of every coordinate of mesh() are spawned: declares the
  // groups, has every stage join them (setup) and every shard initialise its
  // range, reads the data's shape from the first loader, creates the
  // controller over members() and connects the buddies; with fault
  // tolerance the job stands whole from here (mark_whole). The first error
  // that is not a timeout where there is one (a member that failed leaves
  // the others of its groups waiting for it).
  absl::Status form_mesh();

  Cluster& cluster_;
  TrainConfig config_;
  std::string job_;
  int threads_ = 0;  // each stage's compute threads
  // Every placement group placed (the mesh's, and one per coordinate spawned
  // again) and every actor spawned, for stop().
  std::vector<cluster::PlacementGroupId> placement_groups_;
  std::vector<ActorId> actors_;
  std::optional<TrainerController> controller_;
  DataInfo data_info_;

 private:
  // Recovery: the actors of `at` are unknown to a restarted head (their node
  // was lost while it was down, so nothing restarts them): new ones take the
  // coordinate, in a placement group of their own, once a node has room for
  // them (by `deadline`); the controller's member at `at` is them from then
  // on. ResourceExhausted (no_node_for) when none had room.
  absl::Status respawn(const actors::Coordinate& at, absl::Time deadline);

  bool stopped_ = false;
  // The members' actors as the head sees them (recovery).
  MeshWatch watch_{cluster_, job_, [this](const actors::Coordinate& at) { return actors_at(at); }};
};

}  // namespace troupe::trainers
