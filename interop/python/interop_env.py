"""Finds what ../install.sh installed and imports the grpc.testing stubs.

Shared by client.py and server.py. The install lives in $INTEROP_DIR, by default
<repo>/target/interop: the venv in venv/, the stubs in python-gen/.
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTEROP_DIR = os.environ.get("INTEROP_DIR") or os.path.join(REPO, "target", "interop")
VENV_PYTHON = os.path.join(INTEROP_DIR, "venv", "bin", "python")
GEN_DIR = os.path.join(INTEROP_DIR, "python-gen")


def fail(message):
    """A missing install: exit status 2, as for a bad command line."""
    print(message, file=sys.stderr)
    sys.exit(2)


def load_stubs():
    """Returns (empty_pb2, messages_pb2, test_pb2_grpc, grpc).

    When grpcio is not importable (the script was started with the system python),
    re-executes the script with the venv's python, once.
    """
    try:
        import grpc
    except ImportError:
        if os.path.exists(VENV_PYTHON) and not os.environ.get("INTEROP_REEXEC"):
            os.environ["INTEROP_REEXEC"] = "1"
            os.execv(VENV_PYTHON, [VENV_PYTHON] + sys.argv)
        fail("grpcio is not installed: run interop/install.sh (venv expected at %s)"
             % VENV_PYTHON)
    if not os.path.isdir(os.path.join(GEN_DIR, "grpc", "testing")):
        fail("no generated stubs in %s: run interop/install.sh" % GEN_DIR)
    # The .proto files are grpc/testing/*.proto, so protoc makes the modules
    # grpc.testing.*_pb2 and they import each other under that name. grpcio owns the
    # `grpc` package and has no `testing` in it: add the generated folder to the
    # package's search path so that grpc.testing is found there.
    gen_grpc = os.path.join(GEN_DIR, "grpc")
    if gen_grpc not in grpc.__path__:
        grpc.__path__.append(gen_grpc)
    from grpc.testing import empty_pb2, messages_pb2, test_pb2_grpc
    return empty_pb2, messages_pb2, test_pb2_grpc, grpc


def parse_bool(text):
    """A boolean flag's value as the gRPC interop programs write them."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError("not a boolean: %r" % text)
