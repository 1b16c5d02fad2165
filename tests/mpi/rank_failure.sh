#!/usr/bin/env bash
# A rank that dies (kill -9) or stops answering (SIGSTOP) mid-generation must
# end every rank of the job within 10 s, non-zero, with one message naming
# the rank, and leave no process behind.
#   rank_failure.sh PARSPEC TARGET DRAFT kill|stop [STRATEGY FLAGS...]
# (default flags: --strategy pipedec; rank 1 is then a target stage, with
# `--strategy easyspec --lp-size 2` one of the drafter's slots)
set -u
parspec=$1 target=$2 draft=$3 mode=$4
shift 4
strategy=("$@")
[ ${#strategy[@]} -gt 0 ] || strategy=(--strategy pipedec)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
timeout_flag=()
[ "$mode" = stop ] && timeout_flag=(--dist-timeout 3)
mpirun --oversubscribe -np 3 "$parspec" generate -m "$target" -md "$draft" "${strategy[@]}" \
  -p "Once upon a time" -n 3000 -c 4096 --ignore-eos --temp 0 -t 1 "${timeout_flag[@]}" \
  > "$out" 2> "$err" &
job=$!
# The ranks: children of mpirun; rank 1 is the one whose environment says so.
victim=""
for _ in $(seq 300); do
  sleep 0.1
  for pid in $(pgrep -P "$job"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then
      victim=$pid
    fi
  done
  # Wait until generation is under way (text beyond the prompt streams on
  # rank 0's stdout; a rank stopped while loading would only meet the
  # set-up's longer timeout).
  [ -n "$victim" ] && [ "$(wc -c < "$out")" -gt 40 ] && break
done
[ -n "$victim" ] || { echo "FAIL: rank 1 not found"; cat "$out" "$err"; kill -9 "$job"; exit 1; }
ranks=$(pgrep -P "$job" | tr '\n' ' ')
if [ "$mode" = kill ]; then kill -9 "$victim"; else kill -STOP "$victim"; fi
start=$(date +%s%N)
for _ in $(seq 150); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: mpirun still running 15 s after rank 1 was ${mode}ped"; tail -c 600 "$err"
  kill -9 $ranks "$job" 2>/dev/null
  exit 1
fi
wait "$job"
code=$?
left=""
sleep 0.5  # the launcher's last signals may still be on their way
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
for pid in $ranks; do
  [ -e "/proc/$pid" ] && ! grep -q "^State:.*Z" "/proc/$pid/status" 2>/dev/null && left="$left $pid($(cat /proc/$pid/comm 2>/dev/null))"
done
echo "exit code $code after ${elapsed_ms} ms; processes left:${left:- none}"
cat "$err" >> "$out"
grep -E "rank 1|rank: 1|process rank 1" "$out" | head -3
fail=0
[ "$code" -ne 0 ] || { echo "FAIL: exit code 0"; fail=1; }
[ -z "$left" ] || { echo "FAIL: processes left:$left"; kill -9 $left; fail=1; }
[ "$elapsed_ms" -lt 10000 ] || { echo "FAIL: took ${elapsed_ms} ms"; fail=1; }
grep -qE "rank 1 did not answer|process rank 1 " "$out" || { echo "FAIL: no message naming rank 1"; cat "$out"; fail=1; }
[ $fail -eq 0 ] && echo PASS
exit $fail
