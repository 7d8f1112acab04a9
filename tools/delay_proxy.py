#!/usr/bin/python3
"""A TCP proxy that adds latency: every chunk is passed on `--delay-ms / 2` after it
arrived, in each direction, so a connection through it sees that much more round-trip
time. For machines whose kernel has no netem (sch_netem), like this one's containers.

  tools/delay_proxy.py --listen 10.77.0.1:7100 --to 10.77.0.2:7000 --delay-ms 20

Order and bytes are kept; bandwidth is what one Python thread moves (hundreds of MB/s
on loopback), so at high rates the proxy itself shows as a limit: say so where it is
used. Prints "listening on HOST:PORT" once it accepts.
"""
import argparse
import asyncio
import time


async def pipe(reader, writer, delay):
    """Copies reader to writer, each chunk `delay` seconds after it arrived."""
    queue = asyncio.Queue()

    async def forward():
        while True:
            due, chunk = await queue.get()
            if chunk is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(forward())
    try:
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            await queue.put((time.monotonic() + delay, chunk))
    except ConnectionError:
        pass
    await queue.put((0, None))
    try:
        await sender
    except ConnectionError:
        pass


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument("--to", required=True, help="HOST:PORT")
    parser.add_argument("--delay-ms", type=float, required=True, help="added round trip")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    to_host, to_port = args.to.rsplit(":", 1)
    one_way = args.delay_ms / 2000.0

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(to_host, int(to_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, one_way), pipe(server_reader, client_writer, one_way)
        )

    server = await asyncio.start_server(handle, host, int(port))
    print(f"listening on {host}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
