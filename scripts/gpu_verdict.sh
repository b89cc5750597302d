# What decides a GPU-machine script's exit status, kept apart from the GPU work so that a CPU test
# (tests/cpu/gpu_verdict_test.sh) can drive it with made-up results. Source it, record every step:
#   verdict_pass NAME RC            a step that must exit 0 (a build, a test binary, a bench suite)
#   verdict_fail NAME RC [WANT]     a negative control: must exit WANT (default 1); 0 means it missed
#   verdict_none NAME COUNT         COUNT failures that must be none (failed runs of a repeated test)
#   verdict_end                     prints "RESULT: ok" or "RESULT: FAILED" and one line per failed
#                                   step; returns 0 or 1
# A status that is not a number (a step that never ran) counts as a failure.
verdict_failures=()
verdict_pass() {
  [ "$2" = 0 ] || verdict_failures+=("$1: exit $2, must exit 0")
}
verdict_fail() {
  local want=${3:-1}
  [ "$2" = "$want" ] || verdict_failures+=("$1: negative control exit $2, must exit $want (it did not catch the fault)")
}
verdict_none() {
  [ "$2" = 0 ] || verdict_failures+=("$1: $2 failed, must be none")
}
verdict_end() {
  if [ ${#verdict_failures[@]} -eq 0 ]; then
    echo "RESULT: ok"
    return 0
  fi
  echo "RESULT: FAILED (${#verdict_failures[@]})"
  printf '  - %s\n' "${verdict_failures[@]}"
  return 1
}
