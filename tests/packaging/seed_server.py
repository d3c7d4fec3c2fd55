"""A NoCloud seed over HTTP for a guest on QEMU's user network: ``meta-data``, ``user-data`` and
any files (the package the user-data downloads), served from a thread of the test
(stdlib ``http.server``), with the paths the guest asked for."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: the host as a guest on QEMU's user network sees it (VmConfig(user_network=True))
GUEST_HOST = "10.0.2.2"


@dataclass
class SeedServer:
    """What the server serves and what it was asked.

    :param files: body of each path (``/meta-data``, ``/user-data``, ``/pkg.deb``).
    :param port: the port it listens on (127.0.0.1; QEMU forwards 10.0.2.2 to it).
    :param asked: each request as ``"GET /path 200"``, in order.
    """

    files: Mapping[str, bytes]
    port: int = 0
    asked: list[str] = field(default_factory=list)

    @property
    def guest_origin(self) -> str:
        """The server's origin as the guest reaches it."""
        return f"http://{GUEST_HOST}:{self.port}"

    def kernel_word(self) -> str:
        """The kernel command-line word that makes cloud-init 22.4 (Debian 12) seed NoCloud
        from this server: ``ds=nocloud-net`` (its http seeds; ``ds=nocloud`` takes only
        local paths) and the seed URL, whose trailing ``/`` cloud-init appends the file
        names to."""
        return f"ds=nocloud-net;s={self.guest_origin}/"

    def served(self, path: str) -> bool:
        """Whether the guest got ``path`` (status 200)."""
        return f"GET {path} 200" in self.asked


@contextmanager
def serve_seed(meta_data: str, user_data: Callable[[str], str], files: Mapping[str, bytes]
               ) -> Iterator[SeedServer]:
    """Serve a NoCloud seed and ``files`` (path -> body) until the block ends.

    :param meta_data: the ``meta-data`` YAML.
    :param user_data: the ``user-data`` for the server's origin as the guest sees it.
    :param files: further paths and their bodies.
    """
    seed = SeedServer({})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = seed.files.get(self.path)
            seed.asked.append(f"GET {self.path} {200 if body is not None else 404}")
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the requests are in seed.asked

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    seed.port = httpd.server_address[1]
    seed.files = {"/meta-data": meta_data.encode(),
                  "/user-data": user_data(seed.guest_origin).encode(), **files}
    thread = threading.Thread(target=httpd.serve_forever, name="nocloud-seed", daemon=True)
    thread.start()
    try:
        yield seed
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
