#!/usr/bin/env bash
# steps.sh STEP...: runs `make STEP` for each step in order and stops at the
# first that fails. Whatever happened, it ends with a table of each step's
# wall time and, when the end-to-end step ran, each end-to-end package's and
# test's (hack/testtimes, from the go test event stream in $OUT/e2e.json), so
# a slow step or test shows in every CI log. It exits with the failed step's
# status.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/_output}
mkdir -p "$OUT"
rm -f "$OUT/e2e.json"

declare -a names=() secs=() results=()
status=0
total_start=$SECONDS
for step in "$@"; do
	start=$SECONDS
	echo "=== make $step"
	make OUT="$OUT" "$step"
	rc=$?
	names+=("$step")
	secs+=($((SECONDS - start)))
	if [ "$rc" -eq 0 ]; then results+=("ok"); else results+=("FAILED (exit $rc)"); fi
	if [ "$rc" -ne 0 ]; then
		status=$rc
		break
	fi
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
if [ "$status" -ne 0 ]; then
	echo "make ${names[-1]} failed (exit $status); see its output above (for end-to-end tests, the \"=== Failed\" section names each failed test)" >&2
fi
exit "$status"
