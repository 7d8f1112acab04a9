#!/usr/bin/python3
"""Plays deploy/k8s/ with `podman kube play` on this machine (issue 26): the server's
pod becomes ready, and a 2-rank training run completes against it.

  sudo tools/k8s_podman_check.py [--samples 1024] [--epochs 1]

Debian 12's podman (4.3) plays Pods and Deployments, not DaemonSets, Services or Jobs.
So the check plays the manifests' pod templates as they are written: the DaemonSet's
as one Pod (one node), and the Indexed Job's as one Pod per rank, with RANK set as the
Job controller's completion index would set it. The only substitutions are the ones
only a cluster provides:
- the shards' hostPath points at a dataset made here;
- the Secrets become hostPath directories holding the same keys as files: podman 4.3
  writes a Secret's data into its volume still base64-encoded (and crashes on a secret
  volume that leaves `optional` out), so a mounted certificate would not parse;
- the trainer's --server and MASTER_ADDR name 127.0.0.1, where the Service's DNS name
  and rank 0's pod name would resolve (hostNetwork: this host is the node);
- the Job's completion-index annotation becomes the rank's RANK value;
- the server's `ports` list is dropped: on the node's network (hostNetwork) it only
  documents the ports for Kubernetes, and podman 4.3 refuses it ("PortMappings can only
  be used with Bridge or slirp4netns networking").
The kubelet's grpc probes are not run by podman 4.3. The check asks the same question
(grpc.health.v1 on the --health-listen port, plaintext, service shardcast.v1.Shardcast
for readiness) with shardcast-ctl from the host.

Images: shardcast-server:latest and shardcast-trainer:latest, built first as
../shared/containers.md says when missing (minutes of CPU each).
"""
import argparse
import copy
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def run(*args, check=True, **kwargs):
    print("+", " ".join(str(a) for a in args), flush=True)
    return subprocess.run([str(a) for a in args], check=check, **kwargs)


def image_exists(name):
    return subprocess.run(PODMAN + ["image", "exists", name]).returncode == 0


def build_images():
    for target, name in (
        ("server", "shardcast-server:latest"),
        ("trainer", "shardcast-trainer:latest"),
    ):
        if image_exists(name):
            print(f"image {name} exists", flush=True)
            continue
        started = time.time()
        run(
            *PODMAN,
            "build",
            "--network",
            "host",
            "--pull=never",
            "-f",
            ROOT / "deploy/Dockerfile",
            "--target",
            target,
            "-t",
            name,
            ROOT,
        )
        print(f"built {name} in {time.time() - started:.0f} s", flush=True)


def make_credentials(work):
    """A CA, a server certificate for 127.0.0.1, a token: the Secrets' contents."""
    run(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=shardcast-test-ca",
        "-keyout",
        work / "ca.key",
        "-out",
        work / "ca.crt",
        capture_output=True,
    )
    run(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=shardcast",
        "-keyout",
        work / "tls.key",
        "-out",
        work / "server.csr",
        capture_output=True,
    )
    (work / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run(
        "openssl",
        "x509",
        "-req",
        "-in",
        work / "server.csr",
        "-CA",
        work / "ca.crt",
        "-CAkey",
        work / "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        work / "ext.cnf",
        "-out",
        work / "tls.crt",
        capture_output=True,
    )
    token = "k8s-check-" + os.urandom(8).hex()
    (work / "tokens").write_text(token + "\n")
    (work / "token").write_text(token)
    for path in ("ca.key", "tls.key"):
        os.chmod(work / path, 0o644)  # read by the image's unprivileged user


def secret_dir(work, name, files):
    """The directory a Secret `name` of `files` ({key: path}) would mount as."""
    folder = work / "secrets" / name
    folder.mkdir(parents=True)
    for key, path in files.items():
        (folder / key).write_bytes(pathlib.Path(path).read_bytes())
        os.chmod(folder / key, 0o644)
    os.chmod(folder, 0o755)
    os.chmod(folder.parent, 0o755)
    return folder


def secrets_as_host_paths(pod, folders):
    for volume in pod["spec"]["volumes"]:
        if "secret" in volume:
            name = volume.pop("secret")["secretName"]
            volume["hostPath"] = {"path": str(folders[name]), "type": "Directory"}


def pod_from_template(kind_doc, name):
    template = copy.deepcopy(kind_doc["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": template.get("metadata", {}).get("labels", {})},
        "spec": template["spec"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--build-dir",
        default=str(ROOT / "build"),
        help="for shardcast-pack and shardcast-ctl on the host",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (podman as used here)")
    build = pathlib.Path(args.build_dir).resolve()
    build_images()
    work = pathlib.Path(tempfile.mkdtemp(prefix="k8s-podman-"))
    os.chmod(work, 0o755)
    shards = work / "shards"
    run(
        build / "tools/shardcast-pack",
        "--synthetic",
        args.samples,
        "--classes",
        "4",
        "--size",
        "80x80",
        "--per-shard",
        "128",
        "--quiet",
        shards,
    )
    run("chmod", "-R", "a+rX", work)
    make_credentials(work)

    docs = {}
    for name in ("shardcast-server.yaml", "shardcast-train-job.yaml"):
        for doc in yaml.safe_load_all((ROOT / "deploy/k8s" / name).read_text()):
            if doc:
                docs[doc["kind"]] = doc
    server_pod = pod_from_template(docs["DaemonSet"], "shardcast-server-node0")
    cache = work / "index-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    for container in server_pod["spec"]["containers"]:
        container.pop("ports", None)
    for volume in server_pod["spec"]["volumes"]:
        if volume["name"] == "shards":
            volume["hostPath"] = {"path": str(shards), "type": "Directory"}
        if volume["name"] == "index-cache":
            volume["hostPath"] = {"path": str(cache), "type": "Directory"}
    folders = {
        "shardcast-tls": secret_dir(
            work, "shardcast-tls", {"tls.crt": work / "tls.crt", "tls.key": work / "tls.key"}
        ),
        "shardcast-tokens": secret_dir(work, "shardcast-tokens", {"tokens": work / "tokens"}),
        "shardcast-ca": secret_dir(work, "shardcast-ca", {"ca.crt": work / "ca.crt"}),
    }
    secrets_as_host_paths(server_pod, folders)
    server_yaml = work / "server-pod.yaml"
    server_yaml.write_text(yaml.safe_dump(server_pod))

    job = docs["Job"]
    world = int(job["spec"]["completions"])
    rank_pods = []
    for rank in range(world):
        pod = pod_from_template(job, f"shardcast-train-{rank}")
        secrets_as_host_paths(pod, folders)
        container = pod["spec"]["containers"][0]
        for env in container["env"]:
            if env["name"] == "RANK":
                env.pop("valueFrom")
                env["value"] = str(rank)  # the Job's completion index
            if env["name"] == "MASTER_ADDR":
                env["value"] = "127.0.0.1"  # rank 0's pod name; hostNetwork: this host
            if env.get("valueFrom", {}).get("secretKeyRef"):
                env.pop("valueFrom")  # the Secret's value, as the kubelet would set it
                env["value"] = (work / "token").read_text()
        container["args"] = [
            (
                "--server=127.0.0.1:50051"
                if a.startswith("--server=")
                else f"--n_epochs={args.epochs}"
                if a.startswith("--n_epochs=")
                else a
            )
            for a in container["args"]
        ]
        rank_pods.append(pod)
    train_yaml = work / "train-pods.yaml"
    train_yaml.write_text(yaml.safe_dump_all(rank_pods))

    ctl = build / "client/shardcast-ctl"
    ok = False
    try:
        started = time.time()
        run(*PODMAN, "kube", "play", server_yaml)
        ready = False
        while time.time() - started < 300:
            probe = subprocess.run(
                [
                    ctl,
                    "health",
                    "--server",
                    "127.0.0.1:50052",
                    "--service",
                    "shardcast.v1.Shardcast",
                    "--rpc-timeout",
                    "2s",
                ],
                capture_output=True,
                text=True,
            )
            if probe.returncode == 0:
                ready = True
                break
            time.sleep(1)
        print(
            f"server pod ready (grpc.health.v1 on the --health-listen port): {ready}, "
            f"{time.time() - started:.1f} s after play",
            flush=True,
        )
        if not ready:
            run(*PODMAN, "logs", "shardcast-server-node0-server", check=False)
            sys.exit("the server pod never became ready")
        status = subprocess.run(
            [
                ctl,
                "status",
                "--server",
                "127.0.0.1:50051",
                "--tls-ca",
                work / "ca.crt",
                "--auth-token-file",
                work / "token",
            ],
            capture_output=True,
            text=True,
        )
        print(
            "status over TLS with the token:",
            "ok" if status.returncode == 0 else status.stderr,
            flush=True,
        )
        started = time.time()
        run(*PODMAN, "kube", "play", train_yaml)
        codes = {}
        for rank in range(world):
            container = f"shardcast-train-{rank}-rank"
            result = run(*PODMAN, "wait", container, capture_output=True, text=True)
            codes[rank] = result.stdout.strip()
        print(f"training pods exited {codes} after {time.time() - started:.0f} s", flush=True)
        for rank, code in codes.items():
            if code != "0":
                tail = subprocess.run(
                    PODMAN + ["logs", "--tail", "20", f"shardcast-train-{rank}-rank"],
                    capture_output=True,
                    text=True,
                )
                print(f"rank {rank}'s last lines:\n{tail.stdout}{tail.stderr}", flush=True)
        logs = subprocess.run(
            PODMAN + ["logs", "shardcast-train-0-rank"], capture_output=True, text=True
        )
        # The progress line that closes an epoch: "epoch 1/1: 32/32 batches | ...".
        lines = (logs.stdout + logs.stderr).replace("\r", "\n").splitlines()
        # The trainer's last line: "shardcast-train: done: 32 steps, 2 epochs, last ...".
        done = [line for line in lines if line.startswith("shardcast-train: done:")]
        print("rank 0's last lines:\n  " + "\n  ".join(lines[-3:]), flush=True)
        ok = (
            all(code == "0" for code in codes.values())
            and len(done) == 1
            and f" {args.epochs} epochs," in done[0]
        )
    finally:
        run(*PODMAN, "kube", "down", train_yaml, check=False, capture_output=True)
        run(*PODMAN, "kube", "down", server_yaml, check=False, capture_output=True)
    print(f"files: {work}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
