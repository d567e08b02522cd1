# data tests (label trainers).
# `troupe data`, with its source compiled in: the test needs none of the rest
# of troupe_trainers. The GPT-2 case reads the tokenizer scripts/fetch_text.sh fetches.
troupe_test(trainers_data_command_test trainers
  SOURCES data_command_test.cc ${PROJECT_SOURCE_DIR}/trainers/data_command.cc
          ${PROJECT_SOURCE_DIR}/trainers/data_prepare.cc
  LIBS troupe_actors)
target_compile_definitions(trainers_data_command_test PRIVATE
  TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
