# The DeepSpeed-style config. Paths relative to trainers/.
target_sources(troupe_trainers PRIVATE
  config.cc
)
