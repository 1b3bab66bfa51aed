#!/usr/bin/env python3
"""A stock grpcio interop server: grpc.testing.TestService as the gRPC interop test
descriptions' "Server" part asks (EmptyCall, UnaryCall, CacheableUnaryCall,
StreamingOutputCall, StreamingInputCall, FullDuplexCall, HalfDuplexCall, Echo Status,
Echo Metadata, ResponseParameters.interval_us; UnimplementedCall answers UNIMPLEMENTED
and UnimplementedService is not served at all).

    server.py --port N [--use_tls=false]

Prints "listening on PORT" once it serves (--port 0: a free port, the one printed) and
runs until killed. Plaintext only.
"""

import argparse
import signal
import sys
import threading
import time
from concurrent import futures

import interop_env

empty_pb2, messages_pb2, test_pb2_grpc, grpc = interop_env.load_stubs()

ECHO_INITIAL = "x-grpc-test-echo-initial"
ECHO_TRAILING = "x-grpc-test-echo-trailing-bin"

STATUS_BY_CODE = {status.value[0]: status for status in grpc.StatusCode}


def echo_metadata(context):
    """Echo Metadata: the client's x-grpc-test-echo-initial comes back as initial
    metadata, its x-grpc-test-echo-trailing-bin as trailing metadata."""
    initial = []
    trailing = []
    for key, value in context.invocation_metadata():
        if key == ECHO_INITIAL:
            initial.append((key, value))
        elif key == ECHO_TRAILING:
            trailing.append((key, value))
    if initial:
        context.send_initial_metadata(initial)
    if trailing:
        context.set_trailing_metadata(trailing)


def payload(size, context):
    if size < 0:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "negative payload size %d" % size)
    return messages_pb2.Payload(type=messages_pb2.COMPRESSABLE, body=bytes(size))


def check_response_type(request, context):
    if request.response_type != messages_pb2.COMPRESSABLE:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      "unsupported response_type %d" % request.response_type)


def echo_status(request, context):
    """Echo Status: a request's response_status with a non-zero code ends the call with
    that code and message (the trailing metadata set so far goes with it)."""
    if request.HasField("response_status") and request.response_status.code != 0:
        code = STATUS_BY_CODE.get(request.response_status.code, grpc.StatusCode.UNKNOWN)
        context.abort(code, request.response_status.message)


def streamed_responses(request, context):
    """The responses one StreamingOutputCallRequest asks for, each after its interval_us."""
    check_response_type(request, context)
    echo_status(request, context)
    for params in request.response_parameters:
        if params.interval_us > 0:
            time.sleep(params.interval_us / 1e6)
        if not context.is_active():
            return
        yield messages_pb2.StreamingOutputCallResponse(payload=payload(params.size, context))


class TestService(test_pb2_grpc.TestServiceServicer):
    def EmptyCall(self, request, context):
        echo_metadata(context)
        return empty_pb2.Empty()

    def UnaryCall(self, request, context):
        echo_metadata(context)
        check_response_type(request, context)
        echo_status(request, context)
        return messages_pb2.SimpleResponse(payload=payload(request.response_size, context))

    def CacheableUnaryCall(self, request, context):
        echo_metadata(context)
        context.send_initial_metadata([("cache-control", "max-age=60, public")])
        body = str(time.time_ns()).encode()
        return messages_pb2.SimpleResponse(
            payload=messages_pb2.Payload(type=messages_pb2.COMPRESSABLE, body=body))

    def StreamingOutputCall(self, request, context):
        echo_metadata(context)
        yield from streamed_responses(request, context)

    def StreamingInputCall(self, request_iterator, context):
        echo_metadata(context)
        total = 0
        for request in request_iterator:
            total += len(request.payload.body)
        return messages_pb2.StreamingInputCallResponse(aggregated_payload_size=total)

    def FullDuplexCall(self, request_iterator, context):
        echo_metadata(context)
        for request in request_iterator:
            yield from streamed_responses(request, context)

    def HalfDuplexCall(self, request_iterator, context):
        echo_metadata(context)
        requests = list(request_iterator)
        for request in requests:
            yield from streamed_responses(request, context)

    def UnimplementedCall(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "UnimplementedCall is not implemented, on purpose")


def main():
    parser = argparse.ArgumentParser(description="grpcio interop server (grpc.testing.TestService)")
    parser.add_argument("--port", type=int, default=10000,
                        help="port to listen on; 0 picks a free one (default 10000)")
    parser.add_argument("--use_tls", type=interop_env.parse_bool, default=False,
                        help="only false is supported")
    args = parser.parse_args()
    if args.use_tls:
        parser.error("--use_tls=true is not supported: plaintext only")

    # Streaming handlers hold a thread each for the call's life: leave room for several.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    test_pb2_grpc.add_TestServiceServicer_to_server(TestService(), server)
    port = 0
    try:
        port = server.add_insecure_port("[::]:%d" % args.port)
    except RuntimeError:
        pass
    if not port:  # no IPv6 on this machine
        port = server.add_insecure_port("0.0.0.0:%d" % args.port)
    server.start()
    print("listening on %d" % port, flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    server.stop(grace=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
