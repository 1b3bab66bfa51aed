#!/usr/bin/env python3
"""A stock grpcio interop client: the cases of the gRPC interop test descriptions.

    client.py --server_host H --server_port N --test_case=all|NAME[,NAME...] [--use_tls=false]

Prints one line per case, "case NAME: PASS" or "case NAME: FAIL <reason>", then
"summary: N passed, N failed"; exits 0 only if every case run passed (1 if one failed,
2 on a bad command line). All cases share one channel; each case has its own deadline
(--case_timeout_s, default 10), which every call of the case gets what is left of, so a
server that never answers fails the case instead of hanging it. After each cancel or
timeout case an EmptyCall on the same channel must succeed too.
"""

import argparse
import queue
import sys
import time

import interop_env

empty_pb2, messages_pb2, test_pb2_grpc, grpc = interop_env.load_stubs()

SPECIAL_MESSAGE = "\t\ntest with whitespace\r\nand Unicode BMP \u263a and non-BMP \U0001f608\t\n"
ECHO_INITIAL = ("x-grpc-test-echo-initial", "test_initial_metadata_value")
ECHO_TRAILING = ("x-grpc-test-echo-trailing-bin", b"\xab\xab\xab")


class CaseFailed(Exception):
    pass


def check(condition, reason):
    if not condition:
        raise CaseFailed(reason)


def zeros(n):
    return messages_pb2.Payload(type=messages_pb2.COMPRESSABLE, body=bytes(n))


def streaming_request(sizes, body_size=None, status=None):
    req = messages_pb2.StreamingOutputCallRequest(
        response_type=messages_pb2.COMPRESSABLE,
        response_parameters=[messages_pb2.ResponseParameters(size=s) for s in sizes])
    if body_size is not None:
        req.payload.CopyFrom(zeros(body_size))
    if status is not None:
        req.response_status.code, req.response_status.message = status
    return req


class Requests:
    """A request stream the case feeds one message at a time (for ping-pong), ended by
    close(): grpcio pulls from it in a thread of its own."""

    _END = object()

    def __init__(self):
        self._queue = queue.Queue()

    def __iter__(self):
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            yield item

    def send(self, request):
        self._queue.put(request)

    def close(self):
        self._queue.put(self._END)


def describe(err):
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return "%s %r" % (err.code().name, err.details())
    return repr(err)


class Cases:
    def __init__(self, channel, case_timeout):
        self.stub = test_pb2_grpc.TestServiceStub(channel)
        self.unimplemented_stub = test_pb2_grpc.UnimplementedServiceStub(channel)
        self.case_timeout = case_timeout
        self.deadline = 0.0

    def left(self):
        """Seconds left of the running case's deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CaseFailed("case deadline of %gs passed" % self.case_timeout)
        return left

    def expect_status(self, fn, code, message=None, what="call"):
        """Runs fn, which must end in an RpcError with this code (and message)."""
        try:
            fn()
        except grpc.RpcError as err:
            check(err.code() == code,
                  "%s: want status %s, got %s" % (what, code.name, describe(err)))
            if message is not None:
                check(err.details() == message,
                      "%s: want message %r, got %r" % (what, message, err.details()))
            return err
        raise CaseFailed("%s: want status %s, got OK" % (what, code.name))

    def channel_still_works(self, after):
        try:
            self.stub.EmptyCall(empty_pb2.Empty(), timeout=self.left())
        except grpc.RpcError as err:
            raise CaseFailed("EmptyCall on the same channel after %s failed: %s"
                             % (after, describe(err)))

    # ---- the cases ----

    def empty_unary(self):
        resp = self.stub.EmptyCall(empty_pb2.Empty(), timeout=self.left())
        check(isinstance(resp, empty_pb2.Empty), "response is not an Empty: %r" % (resp,))

    def large_unary(self):
        req = messages_pb2.SimpleRequest(response_type=messages_pb2.COMPRESSABLE,
                                         response_size=314159, payload=zeros(271828))
        resp = self.stub.UnaryCall(req, timeout=self.left())
        check(resp.payload.body == bytes(314159),
              "want 314159 zero bytes, got %d bytes" % len(resp.payload.body))

    def client_streaming(self):
        reqs = [messages_pb2.StreamingInputCallRequest(payload=zeros(n))
                for n in (27182, 8, 1828, 45904)]
        resp = self.stub.StreamingInputCall(iter(reqs), timeout=self.left())
        check(resp.aggregated_payload_size == 74922,
              "aggregated_payload_size %d, want 74922" % resp.aggregated_payload_size)

    def server_streaming(self):
        sizes = [31415, 9, 2653, 58979]
        call = self.stub.StreamingOutputCall(streaming_request(sizes), timeout=self.left())
        got = [len(r.payload.body) for r in call]
        check(got == sizes, "response sizes %s, want %s" % (got, sizes))
        check(call.code() == grpc.StatusCode.OK, "status %s" % call.code())

    def ping_pong(self):
        pairs = [(31415, 27182), (9, 8), (2653, 1828), (58979, 45904)]
        requests = Requests()
        call = self.stub.FullDuplexCall(iter(requests), timeout=self.left())
        try:
            for i, (resp_size, body_size) in enumerate(pairs):
                requests.send(streaming_request([resp_size], body_size))
                resp = next(call, None)
                check(resp is not None, "stream ended before response %d" % (i + 1))
                check(resp.payload.body == bytes(resp_size),
                      "response %d: %d bytes, want %d zeros"
                      % (i + 1, len(resp.payload.body), resp_size))
        finally:
            requests.close()
        extra = list(call)
        check(not extra, "%d responses after the fourth" % len(extra))
        check(call.code() == grpc.StatusCode.OK, "status %s" % call.code())

    def empty_stream(self):
        call = self.stub.FullDuplexCall(iter([]), timeout=self.left())
        got = list(call)
        check(not got, "%d responses, want none" % len(got))
        check(call.code() == grpc.StatusCode.OK, "status %s" % call.code())

    def timeout_on_sleeping_server(self):
        requests = Requests()
        requests.send(streaming_request([], 27182))  # and no half-close: the client waits

        def call():
            for _ in self.stub.FullDuplexCall(iter(requests), timeout=0.001):
                pass
        try:
            self.expect_status(call, grpc.StatusCode.DEADLINE_EXCEEDED, what="FullDuplexCall")
        finally:
            requests.close()
        self.channel_still_works("the timeout")

    def cancel_after_begin(self):
        requests = Requests()
        future = self.stub.StreamingInputCall.future(iter(requests), timeout=self.left())
        try:
            future.cancel()
            try:
                resp = future.result(timeout=self.left())
            except grpc.FutureCancelledError:
                pass
            except grpc.RpcError as err:
                check(err.code() == grpc.StatusCode.CANCELLED,
                      "StreamingInputCall: want status CANCELLED, got %s" % describe(err))
            else:
                raise CaseFailed("StreamingInputCall: want status CANCELLED, got OK %r" % resp)
            check(future.code() == grpc.StatusCode.CANCELLED, "status %s" % future.code())
        finally:
            requests.close()
        self.channel_still_works("the cancel")

    def cancel_after_first_response(self):
        requests = Requests()
        call = self.stub.FullDuplexCall(iter(requests), timeout=self.left())
        try:
            requests.send(streaming_request([31415], 27182))
            resp = next(call, None)
            check(resp is not None, "stream ended before the first response")
            check(len(resp.payload.body) == 31415,
                  "first response %d bytes, want 31415" % len(resp.payload.body))
            call.cancel()
            self.expect_status(lambda: list(call), grpc.StatusCode.CANCELLED,
                               what="FullDuplexCall")
            check(call.code() == grpc.StatusCode.CANCELLED, "status %s" % call.code())
        finally:
            requests.close()
        self.channel_still_works("the cancel")

    def _echo_status(self, message, full_duplex):
        unary = messages_pb2.SimpleRequest(response_type=messages_pb2.COMPRESSABLE)
        unary.response_status.code = 2
        unary.response_status.message = message
        self.expect_status(lambda: self.stub.UnaryCall(unary, timeout=self.left()),
                           grpc.StatusCode.UNKNOWN, message, what="UnaryCall")
        if full_duplex:
            req = streaming_request([], status=(2, message))
            self.expect_status(
                lambda: list(self.stub.FullDuplexCall(iter([req]), timeout=self.left())),
                grpc.StatusCode.UNKNOWN, message, what="FullDuplexCall")

    def status_code_and_message(self):
        self._echo_status("test status message", full_duplex=True)

    def special_status_message(self):
        self._echo_status(SPECIAL_MESSAGE, full_duplex=False)

    def unimplemented_method(self):
        self.expect_status(
            lambda: self.stub.UnimplementedCall(empty_pb2.Empty(), timeout=self.left()),
            grpc.StatusCode.UNIMPLEMENTED, what="TestService/UnimplementedCall")

    def unimplemented_service(self):
        self.expect_status(
            lambda: self.unimplemented_stub.UnimplementedCall(empty_pb2.Empty(),
                                                               timeout=self.left()),
            grpc.StatusCode.UNIMPLEMENTED, what="UnimplementedService/UnimplementedCall")

    def _check_echoed(self, what, initial, trailing):
        initial = list(initial or ())
        trailing = list(trailing or ())
        check(ECHO_INITIAL in initial,
              "%s: initial metadata %r lacks %s: %s" % (what, initial, *ECHO_INITIAL))
        check(ECHO_TRAILING in trailing,
              "%s: trailing metadata %r lacks %s: %r" % (what, trailing, *ECHO_TRAILING))

    def custom_metadata(self):
        metadata = [ECHO_INITIAL, ECHO_TRAILING]
        unary = messages_pb2.SimpleRequest(response_type=messages_pb2.COMPRESSABLE,
                                           response_size=314159, payload=zeros(271828))
        resp, call = self.stub.UnaryCall.with_call(unary, metadata=metadata,
                                                   timeout=self.left())
        check(len(resp.payload.body) == 314159,
              "UnaryCall: %d bytes, want 314159" % len(resp.payload.body))
        self._check_echoed("UnaryCall", call.initial_metadata(), call.trailing_metadata())

        req = streaming_request([314159], 271828)
        call = self.stub.FullDuplexCall(iter([req]), metadata=metadata, timeout=self.left())
        got = [len(r.payload.body) for r in call]
        check(got == [314159], "FullDuplexCall: response sizes %s, want [314159]" % got)
        check(call.code() == grpc.StatusCode.OK, "FullDuplexCall: status %s" % call.code())
        self._check_echoed("FullDuplexCall", call.initial_metadata(), call.trailing_metadata())


CASES = [
    "empty_unary", "large_unary", "client_streaming", "server_streaming", "ping_pong",
    "empty_stream", "timeout_on_sleeping_server", "cancel_after_begin",
    "cancel_after_first_response", "status_code_and_message", "special_status_message",
    "unimplemented_method", "unimplemented_service", "custom_metadata",
]


def one_line(text):
    return " ".join(str(text).split()) or "(no reason)"


def main():
    parser = argparse.ArgumentParser(description="grpcio interop client")
    parser.add_argument("--server_host", default="localhost")
    parser.add_argument("--server_host_override", default="",
                        help="authority to claim (default: the host)")
    parser.add_argument("--server_port", type=int, required=True)
    parser.add_argument("--test_case", default="all",
                        help="all, one case, or a comma-separated list: " + ",".join(CASES))
    parser.add_argument("--use_tls", type=interop_env.parse_bool, default=False,
                        help="only false is supported")
    parser.add_argument("--use_test_ca", type=interop_env.parse_bool, default=False,
                        help="accepted for compatibility; TLS is not supported")
    parser.add_argument("--case_timeout_s", type=float, default=10.0,
                        help="deadline of each case, in seconds (default 10)")
    args = parser.parse_args()
    if args.use_tls:
        parser.error("--use_tls=true is not supported: plaintext only")
    if args.test_case == "all":
        selected = list(CASES)
    else:
        selected = [name.strip() for name in args.test_case.split(",") if name.strip()]
        unknown = [name for name in selected if name not in CASES]
        if unknown or not selected:
            parser.error("unknown test case(s) %s; known: all, %s"
                         % (",".join(unknown) or "(none given)", ",".join(CASES)))

    host = args.server_host
    target = "[%s]:%d" % (host, args.server_port) if ":" in host else "%s:%d" % (host, args.server_port)
    options = [("grpc.default_authority", args.server_host_override)] if args.server_host_override else []
    channel = grpc.insecure_channel(target, options=options)
    cases = Cases(channel, args.case_timeout_s)
    passed = failed = 0
    for name in selected:
        cases.deadline = time.monotonic() + args.case_timeout_s
        try:
            getattr(cases, name)()
        except CaseFailed as err:
            result = "FAIL " + one_line(err)
        except grpc.RpcError as err:
            result = "FAIL unexpected status " + one_line(describe(err))
        except Exception as err:  # a broken case must not stop the others
            result = "FAIL " + one_line("%s: %s" % (type(err).__name__, err))
        else:
            result = "PASS"
        if result == "PASS":
            passed += 1
        else:
            failed += 1
        print("case %s: %s" % (name, result), flush=True)
    print("summary: %d passed, %d failed" % (passed, failed), flush=True)
    channel.close()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
