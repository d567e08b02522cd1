# Every config of examples/configs/ trained to its stated result (labels example and
# example_config; examples/configs/README.md, "Stated results"): example_config_test.sh runs
# each as its README row says, from one working directory, where llama_finetune finds what
# llama_addition trained (a fixture orders them). One at a time: each takes the machine.
file(GLOB example_configs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/examples/configs/*.json)
set(example_config_dir ${CMAKE_CURRENT_BINARY_DIR}/example_configs)
foreach(config ${example_configs})
  get_filename_component(name ${config} NAME_WE)
  add_test(NAME example_config_${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/example_config_test.sh $<TARGET_FILE:troupe>
                   ${PROJECT_SOURCE_DIR} ${example_config_dir} ${name})
  set_tests_properties(example_config_${name} PROPERTIES LABELS "example;example_config"
                       TIMEOUT 1200 RUN_SERIAL TRUE)
endforeach()
set_tests_properties(example_config_llama_addition PROPERTIES FIXTURES_SETUP llama_addition_weights)
set_tests_properties(example_config_llama_finetune PROPERTIES FIXTURES_REQUIRED llama_addition_weights)
