# pds_add_test(NAME SOURCES... LIBS ...): one gtest executable, discovered by ctest.
include(GoogleTest)

function(pds_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    PDSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    PDSERVE_BINARY="$<TARGET_FILE:pdserve>")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endfunction()
