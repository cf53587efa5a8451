#!/usr/bin/env bash
# cores.sh runs the multi-core checks (no slowdown from 2 to 16 cores) in
# one go, sized for a short lease of a many-core machine: each step has a
# time limit, so the whole run takes twelve minutes at most.
#
#   bench/cores.sh build DIR    compile the test binaries and the main job
#                               into DIR, with a copy of this script, for a
#                               machine without Go (CGO_ENABLED=0, static)
#   DIR/cores.sh run OUT        run them there; results go into OUT
#   bench/cores.sh run OUT      compile into a temporary folder and run
#
# CORES_PROCS overrides the processor counts (default 2,3,4,8,16),
# CORES_TASKS the tasks per dispatch run (default 1000000), and
# CORES_SCALE the matrix's -scale (default 1).
set -euo pipefail

procs=${CORES_PROCS:-2,3,4,8,16}
tasks=${CORES_TASKS:-1000000}
scale=${CORES_SCALE:-1}

build() {
	local dir=$1 src
	src=$(cd "$(dirname "$0")" && pwd)
	mkdir -p "$dir"
	(cd "$src" && CGO_ENABLED=0 go test -c -o "$dir/bench.test" . &&
		CGO_ENABLED=0 go build -o "$dir/mainjob" .)
	(cd "$src/.." && CGO_ENABLED=0 go test -c -o "$dir/crew.test" . &&
		CGO_ENABLED=0 go test -c -o "$dir/engine.test" ./internal/engine)
	cp "$src/cores.sh" "$dir/"
}

# step runs a command with a time limit, its output into $out/NAME.txt,
# and notes a failure (a timeout included) or a run without any result:
# the script then exits 1, after the other steps.
step() {
	local name=$1 limit=$2
	shift 2
	if ! timeout "$limit" "$@" >"$out/$name.txt" 2>&1; then
		echo "$name: failed or timed out (see $out/$name.txt)" >&2
		failed=1
	elif ! grep -qE '^Benchmark|^wrote' "$out/$name.txt"; then
		echo "$name: no result" >&2
		failed=1
	fi
}

run() {
	local dir=$1
	mkdir -p "$out"
	{ date -u; nproc; lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)' || true; } >"$out/machine.txt"
	cat "$out/machine.txt"
	local b=(-test.run '^$' -test.benchtime "${tasks}x" -test.benchmem)
	# crew alone, every dispatch cell, six runs per processor count.
	step crew 120 "$dir/bench.test" "${b[@]}" -test.bench 'Dispatch/.*/.*/^crew$' \
		-test.count 6 -test.cpu "$procs"
	# crew beside the fastest subjects, one run per cell; the others (ants,
	# gammazero, conc, errgroup, pond v2 Submit and the unbuffered channel
	# pool) are left out as the slowest per task in BENCHMARKS.md.
	step peers 240 "$dir/bench.test" "${b[@]}" -test.cpu "$procs" \
		-test.bench 'Dispatch/.*/.*/^(crew|pond-eager|pond-balanced|pond-lazy|pond2-go|goroutines|chanpool-buffered)$'
	step push 40 "$dir/engine.test" "${b[@]}" -test.bench Push -test.count 3 -test.cpu "$procs"
	step qwait 60 "$dir/crew.test" -test.run '^$' -test.bench QueueWait -test.count 3 -test.cpu "$procs"
	# The matrix on every processor, its fastest subjects only, one run.
	step matrix 240 "$dir/mainjob" -procs "$(nproc)" -tasks rand,sleep -runs 1 -scale "$scale" \
		-subjects crew,pond-eager,pond-balanced,pond-lazy,pond2-go,gammazero,goroutines,chanpool-buffered \
		-out "$out/matrix"
	return $failed
}

failed=0
case ${1:-} in
build)
	build "${2:?usage: cores.sh build DIR}"
	;;
run)
	out=${2:?usage: cores.sh run OUT}
	dir=$(cd "$(dirname "$0")" && pwd)
	if [ ! -x "$dir/bench.test" ]; then
		dir=$(mktemp -d)
		trap 'rm -rf "$dir"' EXIT
		build "$dir"
	fi
	run "$dir"
	;;
*)
	echo "usage: cores.sh build DIR | cores.sh run OUT" >&2
	exit 2
	;;
esac
