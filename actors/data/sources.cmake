# Data: token datasets, the byte-level tokenizer, synthetic tasks, the
# distributed sampler and DataLoaderActor. Paths relative to actors/.
target_sources(troupe_actors PRIVATE
)
