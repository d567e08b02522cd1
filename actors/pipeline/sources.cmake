# Pipeline schedules, one a file, and their check. Paths relative to actors/.
target_sources(troupe_actors PRIVATE
  pipeline/schedule.cc
  pipeline/schedule_1f1b.cc
  pipeline/schedule_check.cc
  pipeline/schedule_gpipe.cc
  pipeline/schedule_interleaved.cc
  pipeline/schedule_kind.cc
)
