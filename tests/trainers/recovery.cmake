# Recovery from lost workers, with real worker processes killed mid-run
# (labels recovery and trainers).
add_executable(trainers_recovery_test recovery_test.cc)
target_link_libraries(trainers_recovery_test PRIVATE troupe_trainers GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_include_directories(trainers_recovery_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(trainers_recovery_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_recovery_test troupe)
gtest_discover_tests(trainers_recovery_test TEST_FILTER "-RecoveryReliabilityTest.*"
                     PROPERTIES LABELS "recovery;trainers" TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_recovery_test recovery trainers)
# What a probe of the running system found (the replacement's node lost too,
# the head down and then a worker lost): also `ctest -L reliability`.
gtest_discover_tests(trainers_recovery_test TEST_FILTER "RecoveryReliabilityTest.*"
                     PROPERTIES LABELS "recovery;reliability;trainers" TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_recovery_test recovery reliability trainers)
