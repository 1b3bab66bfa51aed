# shellcheck shell=bash
# perftest-lib.sh: perftest runs for the verbs benchmarks (scripts/bench-verbs, scripts/bench-ab
# in the Soft-RoCE guest), sourced, not run. The sourcing script defines say MESSAGE and
# die MESSAGE, and sets ADDR (the RDMA device's IP address) and LOGS (where output goes).

# Waits up to SECONDS for PID to exit on its own, then kills it.
reap() { # PID SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Whether perftest's client output FILE has a usable result row: a line of numbers after the
# '#bytes' header, none of them inf or nan. Under an emulated CPU perftest's clock calibration
# sometimes fails ("Correlation coefficient r^2 < 0.9"): ib_send_bw then prints no row ("Can't
# produce a report") and ib_send_lat a row of inf.
perftest_usable() { # FILE
  awk '/#bytes/ { header = 1; next }
       header && $1 ~ /^[0-9]+$/ { found = 1; bad = ($0 ~ /inf|nan/); exit }
       END { exit !(found && !bad) }' "$1"
}

# perftest TOOL SIZE ITERATIONS ROUND: server and client of one perftest run (TCP port 18515
# for the exchange of QP numbers), the client's output in LOGS/TOOL.SIZE.rROUND.client (what
# bench-report logs reads); up to 5 attempts, until a usable result row (a failed calibration
# can repeat a few times in a row under TCG: 3 attempts were seen to fail at 4096 B).
perftest() {
  local tool=$1 size=$2 iters=$3 log="$LOGS/$1.$2.r$4" attempt spid i
  for attempt in 1 2 3 4 5; do
    timeout 300 "$tool" -x 1 -s "$size" -n "$iters" > "$log.server" 2>&1 &
    spid=$!
    for ((i = 0; i < 300; i++)); do
      [[ -n $(ss -Hltn 'sport = :18515' 2>/dev/null) ]] && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.1
    done
    timeout 300 "$tool" -x 1 -s "$size" -n "$iters" "$ADDR" > "$log.client" 2> "$log.client.err" || true
    # A result row is what counts: perftest sometimes fails only while closing.
    if perftest_usable "$log.client"; then
      reap "$spid" 20
      return 0
    fi
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    say "$tool -s $size: attempt $attempt failed: $(tail -n 2 "$log.client.err" "$log.client" | tr '\n' ' ')"
    sleep 1
  done
  die "$tool -s $size failed 5 times; see $log.client"
}
