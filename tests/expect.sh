# Sourced by the shell tests (cli_test.sh, build_parts_test.sh, gpu_kit_test.sh); they set
# failures=0 first and exit 1 when it is not 0 at the end.
#
# expect CODE PATTERN -- command...: runs the command, checks its exit code and that its
# stdout+stderr contains PATTERN (a fixed string; "" for none). A failure prints the command and
# the output's first 20 lines and counts in $failures.
expect() {
  local code=$1 pattern=$2
  shift 3
  local output status
  output=$("$@" 2>&1)
  status=$?
  if [[ $status -ne $code ]]; then
    echo "FAIL: '$*' exited $status, expected $code"; echo "$output" | head -20; failures=$((failures + 1)); return
  fi
  if [[ -n "$pattern" ]] && ! grep -qF -- "$pattern" <<<"$output"; then
    echo "FAIL: '$*' output lacks '$pattern'"; echo "$output" | head -20; failures=$((failures + 1)); return
  fi
  echo "ok: $*"
}
