# config tests (label trainers; ConfigReliabilityTest, the messages a probe of
# the running system found misleading, also reliability).
find_package(nlohmann_json 3 REQUIRED)
add_executable(trainers_config_test config_test.cc)
target_link_libraries(trainers_config_test PRIVATE troupe_trainers nlohmann_json::nlohmann_json
                      GTest::gtest GTest::gtest_main troupe_warnings)
target_compile_definitions(trainers_config_test
  PRIVATE EXAMPLE_CONFIGS="${PROJECT_SOURCE_DIR}/examples/configs")
gtest_discover_tests(trainers_config_test TEST_FILTER "-ConfigReliabilityTest.*"
                     PROPERTIES LABELS trainers TIMEOUT 300 ${TROUPE_TEST_PROPERTIES}
                     ENVIRONMENT "${TROUPE_TEST_ENV}" DISCOVERY_TIMEOUT 60)
gtest_discover_tests(trainers_config_test TEST_FILTER "ConfigReliabilityTest.*"
                     PROPERTIES LABELS reliability TIMEOUT 300 ${TROUPE_TEST_PROPERTIES}
                     ENVIRONMENT "${TROUPE_TEST_ENV}" DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_config_test reliability trainers)
troupe_test(trainers_model_file_test trainers SOURCES model_file_test.cc LIBS troupe_trainers)
troupe_test(trainers_elastic_batch_test trainers SOURCES elastic_batch_test.cc
  LIBS troupe_trainers)
# Which device a job computes on, and what its stages ask for (label trainers).
add_executable(trainers_job_device_test job_device_test.cc)
target_link_libraries(trainers_job_device_test PRIVATE troupe_trainers GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_compile_definitions(trainers_job_device_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_job_device_test troupe)
gtest_discover_tests(trainers_job_device_test PROPERTIES LABELS trainers TIMEOUT 300
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
