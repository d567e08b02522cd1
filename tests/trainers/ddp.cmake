# The DDP trainer on a local cluster of troupe processes (label trainers).
add_executable(trainers_ddp_test ddp_test.cc)
target_link_libraries(trainers_ddp_test PRIVATE troupe_trainers GTest::gtest GTest::gtest_main
                      troupe_warnings)
target_compile_definitions(trainers_ddp_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
add_dependencies(trainers_ddp_test troupe)
gtest_discover_tests(trainers_ddp_test PROPERTIES LABELS trainers TIMEOUT 300 RUN_SERIAL TRUE
                     DISCOVERY_TIMEOUT 60)
# troupe train / generate / data as a user runs them.
add_executable(trainers_train_command_test train_command_test.cc)
target_link_libraries(trainers_train_command_test PRIVATE GTest::gtest GTest::gtest_main
                      troupe_warnings absl::time)
target_compile_definitions(trainers_train_command_test PRIVATE
  TROUPE_BINARY="$<TARGET_FILE:troupe>"
  EXAMPLE_CONFIGS="${PROJECT_SOURCE_DIR}/examples/configs"
  TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(trainers_train_command_test troupe)
gtest_discover_tests(trainers_train_command_test TEST_FILTER "-TrainReliabilityTest.*"
                     PROPERTIES LABELS trainers TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "TROUPE_HEAD=" DISCOVERY_TIMEOUT 60)
# The cases a probe of the running system found (a full disk, ...): also `ctest -L reliability`.
gtest_discover_tests(trainers_train_command_test TEST_FILTER "TrainReliabilityTest.*"
                     PROPERTIES LABELS reliability TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "TROUPE_HEAD=" DISCOVERY_TIMEOUT 60)
troupe_discovered_test_labels(trainers_train_command_test reliability trainers)
# The controller on an in-process actor system, with stand-in stages and shards.
troupe_test(trainers_controller_test trainers SOURCES controller_test.cc LIBS troupe_trainers)
# A stage, its shard and its loader on an in-process actor system: the step protocol.
troupe_test(trainers_stage_steps_test trainers SOURCES stage_steps_test.cc LIBS troupe_trainers)
# The layout rules both trainers share: group names, shard ranges, buddies.
troupe_test(trainers_mesh_layout_test trainers SOURCES mesh_layout_test.cc LIBS troupe_trainers)
# The codecs of nn's types and the one nn/transport dtype mapping.
# The trainers on a GPU: DDP, ZeRO-3 and a pipeline over ranks sharing one device against one
# rank, and a GPU stage against a CPU one (label gpu: they skip without a GPU).
if(TARGET troupe_nn_cuda)
  add_executable(trainers_gpu_test gpu_trainers_test.cc)
  target_link_libraries(trainers_gpu_test PRIVATE troupe_trainers GTest::gtest GTest::gtest_main
                        troupe_warnings)
  target_compile_definitions(trainers_gpu_test PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")
  add_dependencies(trainers_gpu_test troupe troupe_nn_cuda)
  gtest_discover_tests(trainers_gpu_test PROPERTIES LABELS gpu TIMEOUT 300 RUN_SERIAL TRUE
                       DISCOVERY_TIMEOUT 60)
endif()
# What a training job reports to the head's /metrics (label observability).
troupe_test(trainers_job_metrics_test observability SOURCES job_metrics_test.cc
  LIBS troupe_trainers)
# TensorBoard event files written by troupe, read back (label observability).
troupe_test(trainers_tensorboard_test observability SOURCES tensorboard_test.cc
  LIBS troupe_trainers)
