#!/usr/bin/python3
"""Two "hosts" without a cluster: network namespaces made here, each running a
shardcast-server replica and two CPU trainer ranks; c10d rendezvous (Gloo) across
them, shards in one directory both servers read (issue 26).

  sudo tools/netns_replicas.py [--build-dir build] [--samples 1024] [--delays 0,5,20,50]

1. An undisturbed run: 4 ranks (2 per host), each host's ranks on its own replica.
2. The same run with host A's server killed (SIGKILL) in the middle of epoch 0: A's
   ranks move to B's replica and training ends with exact counts; every rank's
   sample keys, step by step, equal the undisturbed run's.
3. With --delays: added round-trip time between every rank and its replica (each rank
   made to use the other host's), steps per second against no delay (a benchmark: the
   rows are what was measured on this machine, where 4 ranks and 2 servers share its
   cores). The delay is netem on both hosts' links where the kernel has it (--loss
   too), else tools/delay_proxy.py in each rank's namespace.

Needs root (ip netns, veth, a bridge, tc). Only the script's own addresses
(10.77.0.0/24) and namespaces (sc-a, sc-b) are touched; they are removed at the end.
The outcome is recorded in docs/deploy.md, not run in CI: the CI machine may not let
a job create namespaces, and the run takes minutes.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

HOSTS = {"a": "10.77.0.1", "b": "10.77.0.2"}
PORT = 7000
BRIDGE = "sc-br"


def sh(*args, check=True):
    return subprocess.run(
        list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ).stdout


def make_network():
    teardown_network()
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "link", "set", BRIDGE, "up")
    for host, address in HOSTS.items():
        ns = f"sc-{host}"
        sh("ip", "netns", "add", ns)
        sh(
            "ip",
            "link",
            "add",
            f"sc-{host}0",
            "type",
            "veth",
            "peer",
            "name",
            f"sc-{host}1",
            "netns",
            ns,
        )
        sh("ip", "link", "set", f"sc-{host}0", "master", BRIDGE)
        sh("ip", "link", "set", f"sc-{host}0", "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", f"sc-{host}1")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", f"sc-{host}1", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")


def teardown_network():
    for host in HOSTS:
        sh("ip", "netns", "delete", f"sc-{host}", check=False)
        sh("ip", "link", "delete", f"sc-{host}0", check=False)
    sh("ip", "link", "delete", BRIDGE, check=False)


def netem_available():
    sh("ip", "link", "add", "sc-probe0", "type", "veth", "peer", "name", "sc-probe1")
    try:
        return (
            subprocess.run(
                ["tc", "qdisc", "add", "dev", "sc-probe0", "root", "netem", "delay", "1ms"],
                capture_output=True,
            ).returncode
            == 0
        )
    finally:
        sh("ip", "link", "delete", "sc-probe0", check=False)


def set_delay(delay_ms, loss):
    """netem on the root side of both links: every packet between the hosts crosses two."""
    for host in HOSTS:
        sh("tc", "qdisc", "del", "dev", f"sc-{host}0", "root", check=False)
        if delay_ms > 0 or loss > 0:
            # Half the round trip on each host's link: RTT = delay_ms.
            sh(
                "tc",
                "qdisc",
                "add",
                "dev",
                f"sc-{host}0",
                "root",
                "netem",
                "delay",
                f"{delay_ms / 2}ms",
                "loss",
                f"{loss}%",
            )


PROXY_PORT = 7100


def start_proxies(delay_ms):
    """In each host's namespace, a proxy to the other host's server with `delay_ms` RTT."""
    proxies = []
    for host, address in HOSTS.items():
        other = HOSTS["b" if host == "a" else "a"]
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                f"sc-{host}",
                sys.executable,
                str(pathlib.Path(__file__).with_name("delay_proxy.py")),
                "--listen",
                f"{address}:{PROXY_PORT}",
                "--to",
                f"{other}:{PORT}",
                "--delay-ms",
                str(delay_ms),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        if not proc.stdout.readline().startswith("listening on"):
            sys.exit(f"delay proxy on host {host} did not start")
        proxies.append(proc)
    return proxies


class Run:
    """Two servers and four trainer ranks; `servers_for(host)` is a rank's --server."""

    def __init__(self, args, shards, out, servers_for, epochs):
        self.args, self.shards, self.out = args, shards, out
        self.servers_for, self.epochs = servers_for, epochs
        self.servers, self.trainers = {}, {}
        out.mkdir(parents=True, exist_ok=True)

    def bin(self, path):
        return str(pathlib.Path(self.args.build_dir, path).resolve())

    def start_servers(self):
        for host, address in HOSTS.items():
            log = open(self.out / f"server-{host}.log", "w")
            self.servers[host] = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    f"sc-{host}",
                    self.bin("server/shardcast-server"),
                    "--shards",
                    str(self.shards),
                    "--listen",
                    f"{address}:{PORT}",
                    "--decode-threads",
                    "2",
                    "--resize",
                    "36",
                    "--crop",
                    "32",
                    "--grace-period",
                    "30s",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        for host, address in HOSTS.items():
            deadline = time.time() + 120
            while True:
                ok = (
                    subprocess.run(
                        [
                            "ip",
                            "netns",
                            "exec",
                            f"sc-{host}",
                            self.bin("client/shardcast-ctl"),
                            "health",
                            "--server",
                            f"{address}:{PORT}",
                            "--rpc-timeout",
                            "2s",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    ).returncode
                    == 0
                )
                if ok:
                    break
                if time.time() > deadline or self.servers[host].poll() is not None:
                    sys.exit(f"server on host {host} did not become healthy; see {self.out}")
                time.sleep(0.2)

    def start_trainers(self):
        for node, host in enumerate(HOSTS):
            log = open(self.out / f"train-{host}.log", "w")
            env = dict(os.environ, GLOO_SOCKET_IFNAME=f"sc-{host}1", OMP_NUM_THREADS="1")
            self.trainers[host] = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    f"sc-{host}",
                    self.bin("client/shardcast-train"),
                    "--server",
                    self.servers_for(host),
                    "--job-id",
                    "netns",
                    "--nnodes",
                    "2",
                    "--node-rank",
                    str(node),
                    "--nproc-per-node",
                    "2",
                    "--master-addr",
                    HOSTS["a"],
                    "--master-port",
                    "29500",
                    "--device",
                    "cpu",
                    "-b",
                    "16",
                    "--n_epochs",
                    str(self.epochs),
                    "--split",
                    "sample",
                    "--seed",
                    "1",
                    "--resize",
                    "36",
                    "--crop",
                    "32",
                    "--lr",
                    "1e-3",
                    "--log-keys",
                    "--metrics",
                    str(self.out / "metrics-{rank}.jsonl"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def steps(self, rank):
        path = self.out / f"metrics-{rank}.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [line for line in lines if line.get("event") == "step"]

    def wait_trainers(self, timeout):
        codes = {}
        for host, trainer in self.trainers.items():
            try:
                codes[host] = trainer.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                trainer.kill()
                codes[host] = "timeout"
        return codes

    def stop(self):
        for process in list(self.trainers.values()) + list(self.servers.values()):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in list(self.trainers.values()) + list(self.servers.values()):
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()


def keys_by_step(run):
    return {
        rank: [(s["epoch"], s["step"], tuple(s["keys"])) for s in run.steps(rank)]
        for rank in range(4)
    }


def local_first(host):
    other = "b" if host == "a" else "a"
    return f"{HOSTS[host]}:{PORT},{HOSTS[other]}:{PORT}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--kill-after-steps",
        type=int,
        default=4,
        help="kill host A's server once rank 0 logged this many steps",
    )
    parser.add_argument(
        "--delays", default="", help="RTTs in ms for the netem rows, e.g. 0,5,20,50"
    )
    parser.add_argument("--loss", type=float, default=0.0, help="netem loss %% with --delays")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: ip netns, veth, bridge, tc")
    work = pathlib.Path(tempfile.mkdtemp(prefix="netns-replicas-"))
    shards = work / "shards"
    sh(
        str(pathlib.Path(args.build_dir, "tools/shardcast-pack").resolve()),
        "--synthetic",
        str(args.samples),
        "--classes",
        "4",
        "--size",
        "48x48",
        "--per-shard",
        "128",
        "--quiet",
        str(shards),
    )
    make_network()
    failures = []
    try:
        # 1. Undisturbed.
        reference = Run(args, shards, work / "undisturbed", local_first, args.epochs)
        reference.start_servers()
        started = time.time()
        reference.start_trainers()
        codes = reference.wait_trainers(1200)
        undisturbed_seconds = time.time() - started
        reference.stop()
        want = keys_by_step(reference)
        n = len([s for s in want[0] if s[0] == 0])
        print(
            f"undisturbed: exit {codes}, {n} steps per epoch per rank, "
            f"{undisturbed_seconds:.1f} s"
        )
        if set(codes.values()) != {0}:
            failures.append(f"undisturbed run failed: {codes}")

        # 2. Host A's server killed mid-epoch.
        killed = Run(args, shards, work / "killed", local_first, args.epochs)
        killed.start_servers()
        started = time.time()
        killed.start_trainers()
        deadline = time.time() + 600
        while len(killed.steps(0)) < args.kill_after_steps and time.time() < deadline:
            time.sleep(0.1)
        at = len(killed.steps(0))
        killed.servers["a"].send_signal(signal.SIGKILL)
        print(f"killed host A's server after rank 0's step {at} of {n} (epoch 0)")
        codes = killed.wait_trainers(1200)
        killed_seconds = time.time() - started
        killed.stop()
        got = keys_by_step(killed)
        same = all(got[rank] == want[rank] for rank in range(4))
        counts = {rank: len(got[rank]) for rank in range(4)}
        print(
            f"killed: exit {codes}, steps per rank {counts}, sample keys step by step equal "
            f"to the undisturbed run: {same}, {killed_seconds:.1f} s"
        )
        if set(codes.values()) != {0} or not same:
            failures.append(f"killed run: exit {codes}, same keys {same}")

        # 3. Delay on the links, every rank on the other host's replica.
        delays = [float(d) for d in args.delays.split(",") if d.strip()]
        netem = bool(delays) and netem_available()
        if delays:
            how = "netem" if netem else "tools/delay_proxy.py (this kernel has no netem)"
            print(f"\nadded RTT by {how}")
            print("| RTT (ms) | loss % | steps/s (4 ranks, remote replica) | vs 0 ms |")
            print("|---|---|---|---|")
        base = None
        for delay in delays:
            proxies = []
            if netem:
                set_delay(delay, args.loss)

                def target(host):
                    return f"{HOSTS['b' if host == 'a' else 'a']}:{PORT}"

            else:

                def target(host):
                    return f"{HOSTS[host]}:{PROXY_PORT}"

            remote = Run(args, shards, work / f"delay-{delay:g}", target, 1)
            remote.start_servers()
            if not netem:
                proxies = start_proxies(delay)
            started = time.time()
            remote.start_trainers()
            codes = remote.wait_trainers(1200)
            seconds = time.time() - started
            remote.stop()
            for proxy in proxies:
                proxy.kill()
                proxy.wait()
            steps = len(remote.steps(0))
            rate = steps / seconds
            base = base or rate
            print(f"| {delay:g} | {args.loss:g} | {rate:.2f} (exit {codes}) | {rate / base:.2f} |")
            if set(codes.values()) != {0}:
                failures.append(f"delay {delay} ms: exit {codes}")
        if netem:
            set_delay(0, 0)
    finally:
        teardown_network()
    print(f"\nlogs and metrics: {work}")
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print("OK")


if __name__ == "__main__":
    main()
