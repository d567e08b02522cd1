# Elasticity: DDP and ZeRO jobs resized between steps on a local cluster of troupe
# processes (labels elastic and trainers).
add_executable(trainers_elastic_test elastic_test.cc)
target_link_libraries(trainers_elastic_test PRIVATE troupe_trainers GTest::gtest GTest::gtest_main
                      troupe_warnings)
target_include_directories(trainers_elastic_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(trainers_elastic_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_elastic_test troupe)
gtest_discover_tests(trainers_elastic_test PROPERTIES LABELS "elastic;trainers" TIMEOUT 300
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_elastic_test elastic trainers)

# The scaler: a worker joining, a drain and a SIGKILL resize a running job
# (a local cluster of its own per test).
add_executable(trainers_elastic_scaler_test elastic_scaler_test.cc)
target_link_libraries(trainers_elastic_scaler_test PRIVATE troupe_trainers GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_include_directories(trainers_elastic_scaler_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(trainers_elastic_scaler_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_elastic_scaler_test troupe)
gtest_discover_tests(trainers_elastic_scaler_test PROPERTIES LABELS "elastic;trainers" TIMEOUT 300
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_elastic_scaler_test elastic trainers)
