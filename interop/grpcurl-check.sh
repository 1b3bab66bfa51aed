#!/usr/bin/env bash
# Checks server reflection and health with grpcurl, a stock gRPC tool that has no .proto
# files: against ADDR (an interop-server's gRPC face) it must list the services, describe
# grpc.testing.TestService, call UnaryCall and EmptyCall, and get SERVING from the health
# service. Prints one line per check and exits non-zero if any failed.
#
#   interop/grpcurl-check.sh HOST:PORT      (run interop/install.sh first)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${INTEROP_DIR:-$here/../target/interop}
grpcurl=$out/bin/grpcurl
addr=${1:?usage: grpcurl-check.sh HOST:PORT}
[[ -x $grpcurl ]] || { echo "grpcurl-check: $grpcurl is missing: run interop/install.sh" >&2; exit 2; }

failed=0
check() { # NAME EXPECTED-SUBSTRING grpcurl-args...
  local name=$1 want=$2 got
  shift 2
  if got=$(timeout 30 "$grpcurl" -plaintext "$@" 2>&1) && [[ $got == *"$want"* ]]; then
    echo "grpcurl $name: PASS"
  else
    echo "grpcurl $name: FAIL (wanted '$want', got: $(tr '\n' ' ' <<<"$got" | cut -c1-300))"
    failed=$((failed + 1))
  fi
}

check "list shows TestService" "grpc.testing.TestService" "$addr" list
check "list shows the health service" "grpc.health.v1.Health" "$addr" list
check "list shows reflection" "grpc.reflection.v1alpha.ServerReflection" "$addr" list
check "describe TestService" "rpc UnaryCall ( .grpc.testing.SimpleRequest ) returns ( .grpc.testing.SimpleResponse )" \
  "$addr" describe grpc.testing.TestService
check "describe a message" "int32 response_size" "$addr" describe grpc.testing.SimpleRequest
# 10 zero bytes, base64.
check "call UnaryCall" '"body": "AAAAAAAAAAAAAA=="' -d '{"response_size": 10}' "$addr" grpc.testing.TestService/UnaryCall
check "call EmptyCall" "{" "$addr" grpc.testing.TestService/EmptyCall
check "health check" '"status": "SERVING"' "$addr" grpc.health.v1.Health/Check

echo "grpcurl: $((8 - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
