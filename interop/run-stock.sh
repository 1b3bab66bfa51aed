#!/usr/bin/env bash
# Self-test of the stock side: the Python and the Node interop clients, all cases,
# against the stock Python interop server. Installs first (install.sh, quick when warm).
# Exits non-zero if either client failed a case, or the server did not come up.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${INTEROP_DIR:-$repo/target/interop}

bash "$here/install.sh" || exit 1

log=$(mktemp)
server=
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
  fi
  rm -f "$log"
}
trap cleanup EXIT

"$out/venv/bin/python" -u "$here/python/server.py" --port 0 >"$log" 2>&1 &
server=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "run-stock: the Python interop server did not come up:" >&2
  cat "$log" >&2
  exit 1
fi
echo "run-stock: stock Python server on port $port"

status=0
results=$(mktemp)
run_client() {
  "$@" --server_host localhost --server_port "$port" --use_tls=false --test_case=all | tee -a "$results"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
echo "run-stock: Python client (grpcio)"
run_client "$out/venv/bin/python" "$here/python/client.py"
echo "run-stock: Node client (@grpc/grpc-js, node $(node --version))"
run_client node "$here/node/client.js"
passed=$(grep -c '^case [a-z_]*: PASS$' "$results")
failed=$(grep -c '^case [a-z_]*: FAIL' "$results")
rm -f "$results"
# Both clients run all 14 cases: anything short of 28 lines is a failure too.
[ "$passed" = 28 ] || status=1

if ! kill -0 "$server" 2>/dev/null; then
  echo "run-stock: the server died during the run:" >&2
  cat "$log" >&2
  status=1
fi
echo "stock: $passed passed, $failed failed"
exit "$status"
