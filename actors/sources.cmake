# Parameter shards, pipeline stages and what they share. Paths relative to actors/.
target_sources(troupe_actors PRIVATE
  allreduce_gradient_sync.cc
  buffer_pool.cc
  distributed_optimizer_sync.cc
  failpoint.cc
  generation.cc
  sampling.cc
  gradient_buckets.cc
  gradient_sync.cc
  handoff.cc
  mesh.cc
  param_shard_actor.cc
  param_shard_buddy.cc
  param_shard_partition.cc
  param_shard_recovery.cc
  pipeline_stage_actor.cc
  pipeline_stage_schedule.cc
  stage_buffers.cc
  stage_plan.cc
  stage_sends.cc
  stage_turns.cc
  training_types.cc
  validation.cc
  zero_gradient_sync.cc
  zero_param_gather.cc
  zero_partition.cc
)
