# Checkpoints of training jobs on a local cluster of troupe processes
# (labels checkpoint and trainers).
add_executable(trainers_checkpoint_test checkpoint_resume_test.cc)
target_link_libraries(trainers_checkpoint_test PRIVATE troupe_trainers GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_include_directories(trainers_checkpoint_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(trainers_checkpoint_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_checkpoint_test troupe)
gtest_discover_tests(trainers_checkpoint_test TEST_FILTER "-CheckpointReliabilityTest.*"
                     PROPERTIES LABELS "checkpoint;trainers" TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_checkpoint_test checkpoint trainers)
# What probes of the running system found (misleading messages, a corrupt
# latest kept, failed saves' directories piling up): also `ctest -L reliability`.
gtest_discover_tests(trainers_checkpoint_test TEST_FILTER "CheckpointReliabilityTest.*"
                     PROPERTIES LABELS reliability TIMEOUT 600
                     RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_checkpoint_test checkpoint reliability trainers)

# troupe export / troupe generate --checkpoint, and the export against
# transformers' AutoModelForCausalLM (tests/reference/hf_export_reference.py).
add_executable(trainers_export_test export_test.cc ${PROJECT_SOURCE_DIR}/trainers/export_tokenizer.cc)
target_link_libraries(trainers_export_test PRIVATE troupe_checkpoint troupe_nn troupe_text GTest::gtest
                      GTest::gtest_main troupe_warnings)
target_include_directories(trainers_export_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(trainers_export_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>"
                           TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(trainers_export_test troupe)
gtest_discover_tests(trainers_export_test TEST_FILTER "-ExportReliabilityTest.*"
                     PROPERTIES LABELS "checkpoint;trainers" TIMEOUT 300 DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_export_test checkpoint trainers)
# What --output export refuses (a device, a link, the checkpoint's own
# files): also `ctest -L reliability`.
gtest_discover_tests(trainers_export_test TEST_FILTER "ExportReliabilityTest.*"
                     PROPERTIES LABELS "checkpoint;reliability;trainers" TIMEOUT 300
                     DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_export_test checkpoint reliability trainers)
