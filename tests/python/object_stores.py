"""nginx (an HTTP store) and s3rver (an S3 store) as child processes over a folder of
shards, for the Python tests that read shards from object storage and for
bench/remote_shards_bench.py. Both come from tools/setup-test-servers.sh
($SHARDCAST_NGINX and $SHARDCAST_S3RVER override where)."""

import os
import socket
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import List

NGINX = os.environ.get("SHARDCAST_NGINX", "/usr/sbin/nginx")
S3RVER = os.environ.get(
    "SHARDCAST_S3RVER",
    os.path.join(
        os.environ.get("SHARDCAST_TEST_TOOLS", "/var/cache/shardcast-test-tools"),
        "node_modules",
        ".bin",
        "s3rver",
    ),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port}")


class Child:
    """A helper process (nginx, s3rver, a delay proxy) stopped with the bench."""

    def __init__(self, argv: List[str], log: Path, port: int = 0, what: str = "") -> None:
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE if not port else self.log, stderr=self.log, text=True
        )
        self.port = port
        if port:
            wait_for_port(port, self.proc, what)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_nginx(root: Path, scratch: Path) -> Child:
    prefix = scratch / "nginx"
    prefix.mkdir()
    port = free_port()
    (prefix / "nginx.conf").write_text(
        textwrap.dedent(
            f"""\
        daemon off;
        master_process off;
        worker_processes 1;
        pid "{prefix}/nginx.pid";
        error_log "{prefix}/error.log" warn;
        events {{ worker_connections 1024; }}
        http {{
          access_log off;
          client_body_temp_path "{prefix}/client_body";
          proxy_temp_path "{prefix}/proxy";
          fastcgi_temp_path "{prefix}/fastcgi";
          uwsgi_temp_path "{prefix}/uwsgi";
          scgi_temp_path "{prefix}/scgi";
          default_type application/octet-stream;
          sendfile on;
          tcp_nopush on;
          keepalive_timeout 60s;
          keepalive_requests 100000;
          server {{
            listen 127.0.0.1:{port};
            root "{root}";
            location / {{ }}
          }}
        }}
        """
        )
    )
    return Child(
        [
            NGINX,
            "-p",
            str(prefix),
            "-c",
            str(prefix / "nginx.conf"),
            "-e",
            str(prefix / "error.log"),
        ],
        scratch / "nginx.log",
        port,
        "nginx",
    )


def start_s3rver(shards: Path, scratch: Path) -> Child:
    """s3rver on its own directory, bucket `bench`, every file of `shards` under shards/."""
    data = scratch / "s3rver"
    (data / "buckets").mkdir(parents=True)
    port = free_port()
    child = Child(
        [
            S3RVER,
            "--directory",
            str(data / "buckets"),
            "--port",
            str(port),
            "--address",
            "127.0.0.1",
            "--silent",
        ],
        data / "s3rver.log",
        port,
        "s3rver",
    )
    base = f"http://127.0.0.1:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{base}/bench", method="PUT"), timeout=60)
    for f in sorted(shards.iterdir()):
        request = urllib.request.Request(
            f"{base}/bench/shards/{f.name}",
            data=f.read_bytes(),
            method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )
        urllib.request.urlopen(request, timeout=60).read()
    return child
