#!/usr/bin/env bash
# Runs the aggregated benchmarks (test/aggregated) at each number of retained Jobs given
# (default: 10000 30000) and prints one table per size. Each size builds its own control plane
# and Jobs; 30,000 takes about 25 minutes on 2 cores, 100,000 well over an hour.
#   hack/bench-scale.sh 10000 30000 100000
# BENCH_TIME sets -benchtime (default 3x); BENCH_TIME=1x measures each benchmark once, on
# servers that have not had a storm, and fits 100,000 Jobs in about 31 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 30000)
for n in "${sizes[@]}"; do
	if ! out=$(CAPTF_BENCH_JOBS=$n go test -count=1 -timeout 180m -run '^$' -bench '^BenchmarkAggregated' -benchtime "${BENCH_TIME:-3x}" ./test/aggregated 2>&1); then
		echo "$out" >&2
		exit 1
	fi
	echo "$out" | grep -E '^(Benchmark|FAIL|---)' >&2 || true
	echo "$out" | awk -v n="$n" '
		function metric(line, unit,    i, f) {
			f = split(line, w, /[ \t]+/)
			for (i = 2; i <= f; i++) if (w[i] == unit) return w[i-1]
			return ""
		}
		/^BenchmarkAggregatedList\/kubectl-get-jobs/ { jobs = metric($0, "ns/op") / 1e9; kubeRSS = metric($0, "kube-apiserver-RSS-B/job") }
		/^BenchmarkAggregatedList\/kubectl-get-runs-[0-9]/ {
			runs = metric($0, "ns/op") / 1e9; rss = metric($0, "apiserver-RSS-B/job")
			lg = metric($0, "list-peak-growth-MB"); ls = metric($0, "list-peak/steady")
		}
		/^BenchmarkAggregatedList\/kubectl-get-runs-floor/ { floor = metric($0, "ns/op") / 1e9 }
		/^BenchmarkAggregatedLabelSelectedList/ { label = metric($0, "p50-ms") }
		/^BenchmarkAggregatedWatchDelay/ { delay = metric($0, "p50-ms") }
		/^BenchmarkAggregatedWatchStorm/ {
			jl = metric($0, "jobs-last-s"); rl = metric($0, "runs-last-s")
			kg = metric($0, "kube-peak-growth-MB"); cg = metric($0, "captf-peak-growth-MB"); cs = metric($0, "captf-peak-growth/steady")
		}
		END {
			printf "\n%d retained Jobs\n\n| Figure | captf | kube-apiserver | Ratio |\n| --- | --- | --- | --- |\n", n
			printf "| kubectl get runs -A / jobs -A (s) | %.2f | %.2f | %.2f× |\n", runs, jobs, runs / jobs
			printf "| kubectl get runs -A / its floor (s) | %.2f | %.2f (floor) | %.2f× |\n", runs, floor, runs / floor
			printf "| One object'\''s runs by label, p50 (ms) | %s | | |\n", label
			printf "| Watch event delay, p50 (ms) | %s | | |\n", delay
			printf "| RSS per retained Job (B) | %.0f | %.0f | |\n", rss, kubeRSS
			printf "| One whole list: captf peak RSS growth (MB) | %s | | |\n", lg
			printf "| One whole list: captf peak RSS / steady RSS | %s | | |\n", ls
			printf "| 50 watchers: the last has its initial events (s) | %s | %s | %.2f× |\n", rl, jl, (jl > 0 ? rl / jl : 0)
			printf "| 50 watchers: peak RSS growth (MB) | %s | %s | %.2f× |\n", cg, kg, (kg > 0 ? cg / kg : 0)
			printf "| 50 watchers: captf peak RSS growth / steady RSS | %s | | |\n", cs
		}'
done
