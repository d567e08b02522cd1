# The Llama model in every trainer and mesh on a local cluster of troupe processes, against one
# process (labels models and trainers).
add_executable(trainers_llama_test llama_trainers_test.cc)
target_link_libraries(trainers_llama_test PRIVATE troupe_trainers troupe_checkpoint GTest::gtest GTest::gtest_main
                      troupe_warnings)
target_compile_definitions(trainers_llama_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_llama_test troupe)
gtest_discover_tests(trainers_llama_test PROPERTIES LABELS "models;trainers" TIMEOUT 900
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_llama_test models trainers)
