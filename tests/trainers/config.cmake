# config tests (label trainers).
find_package(nlohmann_json 3 REQUIRED)
troupe_test(trainers_config_test trainers SOURCES config_test.cc
  LIBS troupe_trainers nlohmann_json::nlohmann_json)
target_compile_definitions(trainers_config_test
  PRIVATE EXAMPLE_CONFIGS="${PROJECT_SOURCE_DIR}/examples/configs")
troupe_test(trainers_model_file_test trainers SOURCES model_file_test.cc LIBS troupe_trainers)
troupe_test(trainers_elastic_batch_test trainers SOURCES elastic_batch_test.cc
  LIBS troupe_trainers)
