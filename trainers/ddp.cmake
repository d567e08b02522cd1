# The controller, the DDP trainer and `troupe train` / `troupe generate`.
# Paths relative to trainers/.
target_sources(troupe_trainers PRIVATE
  ddp_trainer.cc
  generate_command.cc
  model_file.cc
  progress.cc
  train_command.cc
  trainer_controller.cc
)
