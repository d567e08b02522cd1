# data tests (label trainers).
# `troupe data`, with its source compiled in: the test needs none of the rest
# of troupe_trainers.
troupe_test(trainers_data_command_test trainers
  SOURCES data_command_test.cc ${PROJECT_SOURCE_DIR}/trainers/data_command.cc
  LIBS troupe_actors)
