# Run by ctest (troupe_discovered_test_labels in tests/CMakeLists.txt): gives
# every test that one gtest_discover_tests call discovered, listed in
# ${tests_file}, all of ${labels}. gtest_discover_tests itself passes a list
# of LABELS on as separate arguments, so only the first would stick.
if(EXISTS "${tests_file}")
  file(STRINGS "${tests_file}" lines REGEX "^add_test\\(\\[=\\[")
  foreach(line IN LISTS lines)
    if(line MATCHES "^add_test\\(\\[=\\[(.+)\\]=\\]  ")
      set_tests_properties("${CMAKE_MATCH_1}" PROPERTIES LABELS "${labels}")
    endif()
  endforeach()
endif()
