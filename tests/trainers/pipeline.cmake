# Pipeline-parallel training on a local cluster of troupe processes against
# one process (labels pipeline and trainers).
add_executable(trainers_pipeline_test pipeline_test.cc)
target_link_libraries(trainers_pipeline_test PRIVATE troupe_trainers GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_compile_definitions(trainers_pipeline_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_pipeline_test troupe)
gtest_discover_tests(trainers_pipeline_test PROPERTIES LABELS "pipeline;trainers" TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_pipeline_test pipeline trainers)
