# Registers every GoogleTest case of one test binary as a CTest test, at CTest time (the binary's
# TEST_INCLUDE_FILES entry sets WEAVE_GTEST_BINARY, _LABEL, _SKIP_LOG and _WORKDIR, then includes
# this). Replaces gtest_discover_tests, whose every test carries SKIP_REGULAR_EXPRESSION
# "\[  SKIPPED \]" that a later property cannot remove (CTest appends skip patterns) and that wins
# over a failing exit status: a multi-process test prints its children's output, skip lines
# included, so its failure would read as "Skipped". Here only the exit status decides:
# 77 = every selected case skipped (tests/support/gtest_main.cpp), reported as Skipped.
if(NOT EXISTS "${WEAVE_GTEST_BINARY}")
  add_test("${WEAVE_GTEST_LABEL}.NOT_BUILT" "${WEAVE_GTEST_BINARY}")
  set_tests_properties("${WEAVE_GTEST_LABEL}.NOT_BUILT" PROPERTIES LABELS "${WEAVE_GTEST_LABEL}")
  return()
endif()
execute_process(COMMAND "${WEAVE_GTEST_BINARY}" --gtest_list_tests WORKING_DIRECTORY "${WEAVE_GTEST_WORKDIR}"
                OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 60)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "weave: '${WEAVE_GTEST_BINARY} --gtest_list_tests' failed (${_rc}):\n${_out}${_err}")
endif()
string(REPLACE ";" "," _out "${_out}")
string(REPLACE "\n" ";" _lines "${_out}")
set(_suite "")
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^([^ #][^ ]*)\\.")       # "Suite." or "Prefix/Suite/0.  # TypeParam = ..."
    set(_suite "${CMAKE_MATCH_1}")
  elseif(_line MATCHES "^  ([^ ]+)" AND _suite)  # "  Name" or "  Name/3  # GetParam() = ..."
    set(_name "${_suite}.${CMAKE_MATCH_1}")
    add_test("${_name}" "${WEAVE_GTEST_BINARY}" "--gtest_filter=${_name}")
    set_tests_properties("${_name}" PROPERTIES LABELS "${WEAVE_GTEST_LABEL}" SKIP_RETURN_CODE 77 TIMEOUT 900
                         WORKING_DIRECTORY "${WEAVE_GTEST_WORKDIR}"
                         ENVIRONMENT "WEAVE_TEST_SKIP_LOG=${WEAVE_GTEST_SKIP_LOG}")
  endif()
endforeach()
