# The controller, the trainers and `troupe train` / `troupe generate`.
# Paths relative to trainers/.
target_sources(troupe_trainers PRIVATE
  checkpointer.cc
  data_parallel_resize.cc
  data_parallel_trainer.cc
  elastic_batch.cc
  elastic_scaler.cc
  export_command.cc
  export_tokenizer.cc
  generate_command.cc
  hybrid_trainer.cc
  interrupt.cc
  job_device.cc
  member_spawn.cc
  mesh_layout.cc
  mesh_trainer.cc
  mesh_watch.cc
  model_file.cc
  progress.cc
  recovery.cc
  job_metrics.cc
  run_watchers.cc
  tensorboard.cc
  trace.cc
  run_metrics.cc
  run_tokenizer.cc
  step_reports.cc
  train_command.cc
  trainer.cc
  trainer_controller.cc
)
