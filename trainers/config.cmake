# The DeepSpeed-style config. Paths relative to trainers/.
target_sources(troupe_trainers PRIVATE
  config.cc
  config_elasticity.cc
  config_json.cc
  config_model.cc
  config_optim.cc
  config_parse.cc
  config_reader.cc
)
