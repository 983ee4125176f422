"""A local S3-protocol server for the tests: moto's server mode on 127.0.0.1, with faults.

:class:`Faults` answers chosen requests with an error instead of passing them to moto, so
that a test can inject a transient failure (S3's ``500 InternalError``) on the wire.
"""

import threading
import uuid

BUCKET = "globalstep-tests"

_REASONS = {403: "Forbidden", 500: "Internal Server Error", 503: "Service Unavailable"}


class Faults:
    """Requests to fail: each rule answers the next ``times`` matching requests itself."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules = []
        self.injected = 0
        self.seen = []
        """(method, path, query) of every request since the last :meth:`clear`."""

    def inject(self, method, path_part, *, times=1, status=500, code="InternalError"):
        """Fails the next ``times`` requests of ``method`` whose path contains ``path_part``."""
        with self._lock:
            self._rules.append([method, path_part, times, status, code])

    def clear(self):
        """Drops every rule not used up, and zeroes the count."""
        with self._lock:
            self._rules.clear()
            self.injected = 0
            self.seen.clear()

    def _match(self, method, path):
        with self._lock:
            for rule in self._rules:
                if rule[0] == method and rule[1] in path and rule[2] > 0:
                    rule[2] -= 1
                    self.injected += 1
                    return rule[3], rule[4]
        return None

    def wrap(self, app):
        """Returns ``app`` (a WSGI application) with the faults in front of it."""

        def faulty(environ, start_response):
            with self._lock:
                self.seen.append(
                    (
                        environ["REQUEST_METHOD"],
                        environ.get("PATH_INFO", ""),
                        environ.get("QUERY_STRING", ""),
                    )
                )
            hit = self._match(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""))
            if hit is None:
                return app(environ, start_response)
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length:
                environ["wsgi.input"].read(length)
            status, code = hit
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                f"<Error><Code>{code}</Code><Message>injected by the test</Message></Error>"
            ).encode()
            start_response(
                f"{status} {_REASONS.get(status, 'Error')}",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            return [body]

        return faulty


class S3Server:
    """moto's threaded server on 127.0.0.1, on a free port, with :class:`Faults`."""

    def __init__(self):
        from moto.moto_server.threaded_moto_server import ThreadedMotoServer

        faults = self.faults = Faults()

        class _Server(ThreadedMotoServer):
            def _server_entry(self):
                from moto.moto_server.werkzeug_app import (
                    DomainDispatcherApplication,
                    MotoRequestHandler,
                    create_backend_app,
                )
                from werkzeug.serving import make_server

                app = faults.wrap(DomainDispatcherApplication(create_backend_app))
                self._server = make_server(
                    self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
                )
                self._server_ready_event.set()
                self._server.serve_forever()

        self._server = _Server(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.options = {
            "endpoint_url": self.endpoint,
            "key": "testing",
            "secret": "testing",
            # botocore's own retries off: an injected failure reaches globalstep's retries.
            "config_kwargs": {"retries": {"mode": "standard", "total_max_attempts": 1}},
        }
        import s3fs

        self.fs = s3fs.S3FileSystem(**self.options)
        self.fs.mkdir(BUCKET)

    def new_url(self, name="run"):
        """Returns a fresh ``s3://`` prefix in the test bucket."""
        return f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"

    def stop(self):
        """Stops the server."""
        self._server.stop()
