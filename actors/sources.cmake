# Parameter shards and pipeline stages. Paths relative to actors/.
target_sources(troupe_actors PRIVATE
  mesh.cc
)
