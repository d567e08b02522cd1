# Data: token datasets, the byte-level tokenizer, synthetic tasks, the
# distributed sampler and DataLoaderActor. Paths relative to actors/.
target_sources(troupe_actors PRIVATE
  data/addition_task.cc
  data/data_loader.cc
  data/llmc_format.cc
  data/nanogpt_format.cc
  data/data_loader_actor.cc
  data/sampler.cc
  data/token_dataset.cc
  data/token_dataset_header.cc
  data/token_dataset_writer.cc
)
