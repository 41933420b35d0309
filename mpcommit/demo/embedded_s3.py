"""An S3-compatible server inside the current process, for ``mpcommit demo`` and for tests.

Why it exists: the demo must run with no setup at all (no AWS account, no credentials, no Docker, no LocalStack),
and the test-suite needs a real HTTP S3 endpoint that boto3, pyarrow's C++ S3 client and Spark workers in other
processes can all reach. moto's ``ThreadedMotoServer`` speaks the S3 REST API over HTTP on a local port, so the
very same code path that talks to AWS (signed requests, multipart uploads, server-side copies) is exercised,
just against a server that lives in a daemon thread of this process.

It listens on 127.0.0.1 only, on a free port chosen by the OS, and never reads or writes ``AWS_*`` environment
variables: its settings are handed to clients explicitly through :meth:`EmbeddedS3Server.options`.

Caveats of moto (see ``/work/shared/notes/localstack-host-mode.md``): its state is process-global (two embedded
servers in one process, or a ``moto.mock_aws`` started in the same process, share and may reset the same
buckets); ``ListMultipartUploads`` does not paginate and reports a fixed ``Initiated`` date, so age-based cleanup
cannot be tested on it; completing an already completed upload answers 200 (LocalStack answers NoSuchUpload).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from ..errors import UsageError
from ..options import RetryPolicy, S3Options

__all__ = ["EmbeddedS3Server", "missing_demo_extra"]

#: The fixed, fake credentials and region the embedded server is used with. moto accepts any credentials.
ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
REGION = "us-east-1"


def missing_demo_extra(what: str) -> str:
    """What to say when the demo's extra is not installed: ``pip install mpcommit`` leaves out the S3 test server
    (and PySpark), which no production install needs."""
    return (f"the demo needs {what}, which `pip install mpcommit` does not install (production installs need no S3 "
            f"server): pip install 'mpcommit[demo]' (from a clone: pip install -e '.[demo]', or make demo)")


class EmbeddedS3Server:
    """moto's S3 server on ``127.0.0.1:<free port>`` in a daemon thread.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with EmbeddedS3Server() as server:
            job = Job.create("s3://demo/table", s3=server.options())

    ``port=0`` (the default) lets the OS pick a free port; :attr:`endpoint_url` tells which one it got.
    ``quiet=True`` keeps werkzeug from logging every request to stderr (it only raises the ``werkzeug`` logger's
    level to WARNING when nobody has configured that logger).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, quiet: bool = True) -> None:
        self._host = host
        self._requested_port = port
        self._quiet = quiet
        self._server = None  # moto.server.ThreadedMotoServer once started
        self._port: int | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> EmbeddedS3Server:
        """Start serving (idempotent); returns ``self``."""
        with self._lock:
            if self._server is not None:
                return self
            # Imported here: moto is heavy to import and is only needed once a server is really wanted.
            try:
                from moto.server import ThreadedMotoServer
            except ImportError as exc:
                raise UsageError(missing_demo_extra("moto's S3 server (moto[server])")) from exc

            if self._quiet:
                werkzeug_logger = logging.getLogger("werkzeug")
                if werkzeug_logger.level == logging.NOTSET:
                    werkzeug_logger.setLevel(logging.WARNING)
            server = ThreadedMotoServer(ip_address=self._host, port=self._requested_port, verbose=False)
            server.start()
            _host, port = server.get_host_and_port()
            self._server = server
            self._port = int(port)
            return self

    def stop(self) -> None:
        """Stop serving and release the port (idempotent). moto's in-memory state is not cleared."""
        with self._lock:
            server, self._server = self._server, None
            self._port = None
            if server is not None:
                server.stop()

    def __enter__(self) -> EmbeddedS3Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what clients need -----------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("EmbeddedS3Server is not running; call start() or use it as a context manager")
        return self._port

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self._host}:{self.port}"

    def options(self, *, retry: RetryPolicy | None = None) -> S3Options:
        """:class:`~mpcommit.options.S3Options` that reach this server, with explicit fake credentials
        (so that nothing is taken from the environment, profiles or instance metadata)."""
        kwargs = {"retry": retry} if retry is not None else {}
        return S3Options(
            endpoint_url=self.endpoint_url,
            region=REGION,
            access_key_id=ACCESS_KEY_ID,
            secret_access_key=SECRET_ACCESS_KEY,
            **kwargs,
        )

    def reset(self) -> None:
        """Drop every bucket and upload. moto's state is process-global: this resets all moto backends of the
        process, including those of any other embedded server or ``mock_aws`` in it."""
        import urllib.request

        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST", data=b"")
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an HTTP proxy
        with no_proxy.open(request, timeout=30) as response:
            response.read()

    def __repr__(self) -> str:
        where = self.endpoint_url if self.running else "stopped"
        return f"EmbeddedS3Server({where})"
