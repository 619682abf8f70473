# The e2e scripts' shared checks (sourced; they set $tmp first): each counts into $pass / $fails.
fails=0
pass=0
expect() {  # expect CODE DESCRIPTION -- command...: the exit code; stdout in $tmp/out, stderr in $tmp/err
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1))
  else
    fails=$((fails + 1))
    echo "FAIL: $what: exit $got, expected $want"
    tail -5 "$tmp/err"
  fi
}
contains() {  # contains FILE TEXT DESCRIPTION
  if grep -q -- "$2" "$1"; then pass=$((pass + 1)); else fails=$((fails + 1)); echo "FAIL: $3: '$2' not in $1"; fi
}
check() {  # check DESCRIPTION -- command...: passes when the command succeeds
  local what=$1
  shift 2
  if "$@"; then pass=$((pass + 1)); else fails=$((fails + 1)); echo "FAIL: $what"; fi
}
