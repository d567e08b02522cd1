# Recovery from lost workers, with real worker processes killed mid-run
# (labels recovery and trainers).
add_executable(trainers_recovery_test recovery_test.cc)
target_link_libraries(trainers_recovery_test PRIVATE troupe_trainers GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_include_directories(trainers_recovery_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(trainers_recovery_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_recovery_test troupe)
gtest_discover_tests(trainers_recovery_test PROPERTIES LABELS "recovery;trainers" TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
