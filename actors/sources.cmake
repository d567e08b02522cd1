# Parameter shards, pipeline stages and what they share. Paths relative to actors/.
target_sources(troupe_actors PRIVATE
  generation.cc
  gradient_buckets.cc
  handoff.cc
  mesh.cc
  param_shard_actor.cc
  pipeline_stage_actor.cc
  training_types.cc
)
