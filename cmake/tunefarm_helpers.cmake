# Helpers in the shape of abseil's absl_cc_library / absl_cc_test.
#
#   tf_cc_library(NAME compiler SRCS a.cc b.cc DEPS other PUBLIC_DEPS x)
#     -> target tunefarm_compiler, include root at the repository top.
#   tf_cc_test(NAME compiler_workload SRCS t.cc DEPS tunefarm_compiler LABEL compiler)
#     -> a GoogleTest binary registered with CTest under LABEL.

set(TF_WARNINGS -Wall -Wextra -Wno-unused-parameter)

function(tf_cc_library)
  cmake_parse_arguments(TF "" "NAME" "SRCS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(tunefarm_${TF_NAME} STATIC ${TF_SRCS})
  target_include_directories(tunefarm_${TF_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(tunefarm_${TF_NAME} PRIVATE ${TF_WARNINGS})
  target_link_libraries(tunefarm_${TF_NAME} PUBLIC ${TF_PUBLIC_DEPS} PRIVATE ${TF_DEPS})
  set_target_properties(tunefarm_${TF_NAME} PROPERTIES UNITY_BUILD ${TUNEFARM_UNITY_BUILD})
endfunction()

function(tf_cc_test)
  cmake_parse_arguments(TF "" "NAME;LABEL" "SRCS;DEPS" ${ARGN})
  add_executable(test_${TF_NAME} ${TF_SRCS})
  target_compile_options(test_${TF_NAME} PRIVATE ${TF_WARNINGS})
  if(TUNEFARM_UNOPTIMIZED_TESTS)
    target_compile_options(test_${TF_NAME} PRIVATE -O0)
  endif()
  target_link_libraries(test_${TF_NAME} PRIVATE ${TF_DEPS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${TF_NAME} COMMAND test_${TF_NAME})
  set_tests_properties(${TF_NAME} PROPERTIES LABELS "${TF_LABEL}")
endfunction()
