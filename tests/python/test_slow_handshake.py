"""A server slower to answer a new connection than the largest reconnect backoff is
still reached: the loader gives one connection attempt the time a handshake needs
(CONNECT_TIMEOUT_MS). While gRPC's attempt time was the 0.1 s backoff, every attempt to
such a server was cut short and registration failed after `reconnect_deadline`.

The server sits behind a TCP relay that holds each new connection for 3 s before
passing bytes on, as a slow network or host would."""

import socket
import threading
import time

import shardcast


class SlowRelay:
    """127.0.0.1:port; each accepted connection waits `delay` s, then is joined to
    `target` and relayed both ways until either side closes."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.connections = 0
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            self.connections += 1
            t = threading.Thread(target=self._relay, args=(client,), daemon=True)
            self.threads.append(t)
            t.start()

    def _relay(self, client: socket.socket) -> None:
        if self.stop.wait(self.delay):
            client.close()
            return
        server = socket.create_connection(("127.0.0.1", self.target_port))
        pumps = [
            threading.Thread(target=self._pump, args=(a, b), daemon=True)
            for a, b in ((client, server), (server, client))
        ]
        for p in pumps:
            p.start()
        for p in pumps:
            p.join()
        client.close()
        server.close()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        source.settimeout(0.05)
        while not self.stop.is_set():
            try:
                data = source.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            try:
                sink.sendall(data)
            except OSError:
                break
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)
        self.listener.close()


def test_a_server_slower_than_the_largest_backoff_is_reached(server):
    relay = SlowRelay(int(server.address.rsplit(":", 1)[1]), delay=3.0)
    try:
        start = time.monotonic()
        # Backoff 0.1 s .. 2 s (the defaults); 10 s of failures would end registration.
        with shardcast.Loader(
            f"127.0.0.1:{relay.port}",
            job_id="slow-handshake",
            batch_size=8,
            world_size=1,
            rank=0,
            reconnect_deadline=10.0,
        ) as loader:
            batches = sum(1 for _ in loader)
        assert batches == len(loader) > 0
        assert time.monotonic() - start >= 3.0
        assert relay.connections == 1  # the first attempt waited for the handshake
    finally:
        relay.close()
