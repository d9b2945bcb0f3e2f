#!/usr/bin/env bash
# steps.sh [--beside STEP | STEP]...: runs `make STEP` for each step in
# order and stops at the first that fails. A step after --beside starts in
# the background and the steps after it go on at once; its output goes to
# $OUT/STEP.log and is printed whole, under its own heading, when every
# other step has ended, so it never interleaves with theirs (the unit tests
# run beside the end-to-end tests, whose first minutes leave the CPU mostly
# idle; the steps before compile the end-to-end tests, which a compile
# beside them would only slow down). Whatever happened, it ends with a
# table of each step's wall time and, when the end-to-end step ran, each
# end-to-end package's and test's (hack/testtimes, from the go test event
# stream in $OUT/e2e.json), so a slow step or test shows in every CI log.
# It exits with the status of the first step that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/_output}
mkdir -p "$OUT"
rm -f "$OUT/e2e.json"

declare -a names=() secs=() results=() rcs=()
declare -a bg_names=() bg_pids=() bg_starts=()
total_start=$SECONDS

# record NAME SECONDS RC adds a row to the time table.
record() {
	names+=("$1")
	secs+=("$2")
	rcs+=("$3")
	if [ "$3" -eq 0 ]; then results+=("ok"); else results+=("FAILED (exit $3)"); fi
}

beside=false
for step in "$@"; do
	if [ "$step" = --beside ]; then
		beside=true
		continue
	fi
	if $beside; then
		beside=false
		echo "=== make $step (beside the next steps; output in $OUT/$step.log, printed when they end)"
		# Its own status and end time: its row in the time table is how
		# long it ran, not how long the others took.
		rm -f "$OUT/$step.end"
		{
			make OUT="$OUT" "$step" >"$OUT/$step.log" 2>&1
			echo "$? $SECONDS" >"$OUT/$step.end"
		} &
		bg_names+=("$step")
		bg_pids+=($!)
		bg_starts+=($SECONDS)
		continue
	fi
	start=$SECONDS
	echo "=== make $step"
	make OUT="$OUT" "$step"
	rc=$?
	record "$step" $((SECONDS - start)) "$rc"
	if [ "$rc" -ne 0 ]; then
		break
	fi
done

for i in "${!bg_names[@]}"; do
	wait "${bg_pids[$i]}"
	rc=1 end=$SECONDS
	if [ -s "$OUT/${bg_names[$i]}.end" ]; then
		read -r rc end <"$OUT/${bg_names[$i]}.end"
	fi
	record "${bg_names[$i]}" $((end - bg_starts[i])) "$rc"
	echo
	echo "=== make ${bg_names[$i]} (ran beside the steps after it): output"
	cat "$OUT/${bg_names[$i]}.log"
done

echo
echo "=== Time table"
printf '%-12s %8s  %s\n' step seconds result
for i in "${!names[@]}"; do
	printf '%-12s %8d  %s\n' "${names[$i]}" "${secs[$i]}" "${results[$i]}"
done
printf '%-12s %8d\n' total $((SECONDS - total_start))
if [ -s "$OUT/e2e.json" ]; then
	echo
	go run ./hack/testtimes "$OUT/e2e.json"
fi
status=0
for i in "${!names[@]}"; do
	if [ "${rcs[$i]}" -ne 0 ]; then
		status=${rcs[$i]}
		echo "make ${names[$i]} failed (exit $status); see its output above (for end-to-end tests, the \"=== Failed\" section names each failed test)" >&2
	fi
done
exit "$status"
