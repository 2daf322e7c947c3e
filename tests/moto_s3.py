"""A moto S3 server on 127.0.0.1 for the tests that store on a bucket."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from workbench.store import objstore


@contextmanager
def moto_s3(*buckets: str) -> Iterator[dict[str, str]]:
    """Start the server, make `buckets`, and set the environment that reaches it (credentials,
    WORKBENCH_S3_ENDPOINT) until the block ends; yields that environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its buckets per process, not per server: a module's server would otherwise
    # start with the buckets an earlier module on the same test worker made.
    reset = urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset, timeout=30).close()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "WORKBENCH_S3_ENDPOINT": f"http://{host}:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for bucket in buckets:
            objstore.filesystem().mkdir(bucket)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
