# Pipeline parallelism: the schedules printed and checked (labels pipeline
# and trainers).
add_executable(trainers_pipeline_schedule_test pipeline_schedule_test.cc)
target_link_libraries(trainers_pipeline_schedule_test PRIVATE troupe_actors GTest::gtest
                      GTest::gtest_main troupe_warnings)
gtest_discover_tests(trainers_pipeline_schedule_test PROPERTIES LABELS "pipeline;trainers"
                     DISCOVERY_TIMEOUT 60)
