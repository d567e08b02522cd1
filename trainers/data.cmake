# `troupe data`. Paths relative to trainers/.
target_sources(troupe_trainers PRIVATE
  data_command.cc
  data_prepare.cc
)
