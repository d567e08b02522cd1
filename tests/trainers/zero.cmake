# ZeRO-1/2/3 on a local cluster of troupe processes (label zero).
add_executable(trainers_zero_test zero_test.cc)
target_link_libraries(trainers_zero_test PRIVATE troupe_trainers GTest::gtest GTest::gtest_main
                      troupe_warnings)
target_compile_definitions(trainers_zero_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_zero_test troupe)
gtest_discover_tests(trainers_zero_test PROPERTIES LABELS "zero;trainers" TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_zero_test zero trainers)
