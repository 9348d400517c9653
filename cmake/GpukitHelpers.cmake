# gpukit_cc_library(NAME name [HDRS ...] SRCS ... [DEPS ...] [PRIVATE_DEPS ...])
#   Creates target gpukit_<name> with alias gpukit::<name>. The repository root is the include
#   root, so headers are included as "runtime/device.h".
function(gpukit_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "HDRS;SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target gpukit_${ARG_NAME})
  if(ARG_SRCS)
    add_library(${target} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
    target_compile_options(${target} PRIVATE ${GPUKIT_WARNING_FLAGS})
  else()
    add_library(${target} INTERFACE ${ARG_HDRS})
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
  add_library(gpukit::${ARG_NAME} ALIAS ${target})
endfunction()

# gpukit_cc_test(NAME name SRCS ... [DEPS ...] [LABELS ...])
#   A GoogleTest binary registered with CTest; LABELS defaults to "unit".
function(gpukit_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  target_compile_options(${ARG_NAME} PRIVATE ${GPUKIT_WARNING_FLAGS})
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  # The daemons and executors a test starts keep absl's lock-order check, which releases
  # turn off (runtime/base/mutex_mode.h): a lock-order cycle fails the test.
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 300
                       ENVIRONMENT "GPUKIT_MUTEX_DEADLOCK_CHECK=1")
  if("gpu" IN_LIST ARG_LABELS)
    # GoogleTest's skip marker makes CTest report the binary as skipped ("Not Run"), so GPU
    # tests on a machine without a GPU show up as skipped instead of passed.
    set_tests_properties(${ARG_NAME} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
  if("unit" IN_LIST ARG_LABELS)
    add_dependencies(unit_tests ${ARG_NAME})
  endif()
endfunction()
