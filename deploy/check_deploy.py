#!/usr/bin/python3
"""Checks deploy/ without a Docker engine or a running systemd: what can be
checked from the files, the CMake build and the host's Debian 12 packages.

  deploy/check_deploy.py [--build-dir build] [--trainer-build-dir DIR]
                         [--configure [--build-stage build-server]]

- Dockerfile: stages, every COPY source exists and survives the
  Dockerfile.dockerignore filter, every COPY --from path is a CMake executable
  that the stage builds, HEALTHCHECK / EXPOSE / listen ports agree.
- docker-compose.yml: parses (PyYAML), services, build targets exist in the
  Dockerfile, depends_on conditions, volumes declared, the server's restart policy
  restarts exit 75, the flags passed to shardcast-server / shardcast-train are
  flags those binaries accept (--help).
- Runtime packages: every shared library the built binaries load belongs to a
  package in the dependency closure of the runtime stage's apt list.
- shardcast-server.service: `systemd-analyze verify` (on a temporary copy whose
  ExecStart points at the built binary when /usr/local/bin has none), flags in
  ExecStart and the example env file are accepted, TimeoutStopSec > grace, a
  server that exits 75 (listener lost) is restarted.
- deploy/k8s/*.yaml: parse; the server DaemonSet's args are flags it accepts, its
  native gRPC probes ask the --health-listen port, terminationGracePeriodSeconds
  exceeds --grace-period, the memory request covers --max-batch-memory +
  --max-decode-memory, TLS and token files come from Secret volumes, the shards are
  read-only, the pods restart (restartPolicy Always); a headless Service and a
  PodDisruptionBudget select the servers; the training Job is Indexed with
  WORLD_SIZE = completions, the torchrun variables, and --server naming the
  headless Service; servers and ranks on the node's network.
- --configure: copies exactly the COPY'd sources to a temporary directory and
  runs the build stages' cmake configure commands there; --build-stage STAGE
  runs that stage's whole configure + build + strip command instead.

Exit status 0 when every check passed; every failure is printed.
"""

import argparse
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)
    return ok


def skip(what):
    print("skip  " + what)


def dockerfile_instructions(path):
    """(instruction, args) pairs, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in open(path):
        s = line.rstrip("\n")
        if not cur and (s.lstrip().startswith("#") or not s.strip()):
            continue
        if s.lstrip().startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def dockerignore_keeps(patterns, path):
    """Docker's rule: the last matching pattern wins; '!' re-includes. A pattern
    matches a path or any of its parent directories."""
    keep = True
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        negate = pat.startswith("!")
        p = pat[1:] if negate else pat
        p = p.strip("/")
        regex = fnmatch.translate(p).replace(".*", "[^/]*")
        regex = regex.replace("[^/]*[^/]*/", "(?:.*/)?")  # '**/'
        if any(re.match(regex, x) for x in prefixes):
            keep = negate
    return keep


def executables_in(cmake_dir):
    text = open(os.path.join(ROOT, cmake_dir, "CMakeLists.txt")).read()
    return set(re.findall(r"add_executable\(\s*([A-Za-z0-9_.-]+)", text))


def help_flags(binary, *subcommand):
    if not binary or not os.access(binary, os.X_OK):
        return None
    res = subprocess.run([binary, *subcommand, "--help"], capture_output=True, text=True)
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", res.stdout + res.stderr))


def flags_of(args):
    return [a.split("=")[0] for a in args if a.startswith("-")]


SIZE_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_size(text):
    """'3GiB' (a server flag) or '5Gi' (a Kubernetes quantity) -> bytes."""
    m = re.fullmatch(r"([0-9.]+)\s*([A-Za-z]*)", text.strip())
    unit = m.group(2).lower() if m else ""
    if unit not in SIZE_UNITS and unit.endswith("b"):
        unit = unit[:-1]  # "MB" -> "m"
    if not m or unit not in SIZE_UNITS:
        raise ValueError(f"not a size: {text}")
    return float(m.group(1)) * SIZE_UNITS[unit]


def parse_seconds(text):
    m = re.fullmatch(r"([0-9.]+)(ms|s|m|h)", text.strip())
    if not m:
        raise ValueError(f"not a duration: {text}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def flag_values(args):
    """--name=value and --name value -> {name: value}."""
    values, i = {}, 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg.partition("=")
            values[name] = value
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            values[arg] = args[i + 1]
            i += 1
        i += 1
    return values


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def check_kubernetes(server_bin, train_bin):
    """deploy/k8s/: what a reader of the manifests could get wrong against the flags."""
    print("== deploy/k8s")
    docs = []
    for name in sorted(os.listdir(os.path.join(DEPLOY, "k8s"))):
        if name.endswith(".yaml"):
            with open(os.path.join(DEPLOY, "k8s", name)) as f:
                docs += [(name, d) for d in yaml.safe_load_all(f) if d]
    check(bool(docs), "k8s manifests parse (PyYAML)")
    kinds = {}
    for name, doc in docs:
        kinds.setdefault(doc.get("kind"), []).append(doc)
        check(
            all(k in doc for k in ("apiVersion", "kind", "metadata")),
            f"{name}: {doc.get('kind')} has apiVersion, kind, metadata",
        )
    daemonset = next(iter(kinds.get("DaemonSet", [])), None)
    if not check(daemonset is not None, "a server DaemonSet"):
        return
    pod = daemonset["spec"]["template"]["spec"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    check(
        daemonset["spec"]["selector"]["matchLabels"].items() <= labels.items(),
        "DaemonSet selector matches its pod labels",
    )
    server = pod["containers"][0]
    args = server.get("args", [])
    flags = flag_values(args)
    accepted = help_flags(server_bin)
    if accepted is None:
        skip(f"server args vs --help ({server_bin} not built)")
    else:
        bad = [f for f in flags_of(args) if f not in accepted]
        check(not bad, f"server args are shardcast-server flags {bad or ''}")
    grpc_port = port_of(flags.get("--listen", ":0"))
    health_port = port_of(flags.get("--health-listen", ":0"))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = server.get(probe, {})
        check(
            spec.get("grpc", {}).get("port") == health_port,
            f"{probe}: native gRPC probe on the --health-listen port {health_port} "
            "(plaintext: the main port speaks TLS)",
        )
    check(
        pod.get("restartPolicy", "Always") == "Always",
        f"server pods restart a server that exits 75 (restartPolicy "
        f"{pod.get('restartPolicy', 'Always')})",
    )
    grace = parse_seconds(flags.get("--grace-period", "10s"))
    check(
        pod.get("terminationGracePeriodSeconds", 30) > grace,
        f"terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds', 30)} > "
        f"--grace-period {grace:g} s (the drain ends before SIGKILL)",
    )
    budgets = sum(
        parse_size(flags[f]) for f in ("--max-batch-memory", "--max-decode-memory") if f in flags
    )
    request = parse_size(server.get("resources", {}).get("requests", {}).get("memory", "0"))
    check(
        "--max-batch-memory" in flags and "--max-decode-memory" in flags and request >= budgets,
        f"memory request {request / 2**30:.1f} GiB covers --max-batch-memory + "
        f"--max-decode-memory ({budgets / 2**30:.1f} GiB)",
    )
    mounts = {m["name"]: m for m in server.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    check(set(mounts) <= set(volumes), "every volumeMount has its volume")
    for flag in ("--tls-cert", "--tls-key", "--auth-token-file"):
        path = flags.get(flag, "")
        mount = next((m for m in mounts.values() if path.startswith(m["mountPath"] + "/")), None)
        check(
            mount is not None and "secret" in volumes.get(mount["name"], {}),
            f"{flag} {path} comes from a Secret volume",
        )
    shards = mounts.get("shards", {})
    check(
        shards.get("readOnly") is True
        and flags.get("--shards", "").startswith(shards.get("mountPath", "?")),
        "the shards are mounted read-only where --shards points",
    )
    services = {d["metadata"]["name"]: d for d in kinds.get("Service", [])}
    headless = [
        d
        for d in services.values()
        if d["spec"].get("clusterIP") == "None"
        and d["spec"].get("selector", {}).items() <= labels.items()
    ]
    check(
        len(headless) == 1 and any(p["port"] == grpc_port for p in headless[0]["spec"]["ports"]),
        f"one headless Service selects the servers on the --listen port {grpc_port}",
    )
    pdbs = kinds.get("PodDisruptionBudget", [])
    check(
        any(p["spec"]["selector"]["matchLabels"].items() <= labels.items() for p in pdbs),
        "a PodDisruptionBudget covers the servers",
    )
    job = next(iter(kinds.get("Job", [])), None)
    if not check(job is not None, "a training Job"):
        return
    jpod = job["spec"]["template"]["spec"]
    rank = jpod["containers"][0]
    env = {e["name"]: e for e in rank.get("env", [])}
    check(
        {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} <= set(env),
        "the trainer gets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
    )
    check(
        int(env.get("WORLD_SIZE", {}).get("value", "0")) == job["spec"].get("completions"),
        "WORLD_SIZE equals the Job's completions (one pod per rank)",
    )
    check(
        job["spec"].get("completionMode") == "Indexed",
        "the Job is Indexed (RANK from the completion index)",
    )
    targs = flag_values(rank.get("args", []))
    target = targs.get("--server", "")
    host = target.rsplit(":", 1)[0].split(".")[0]
    check(
        host in [d["metadata"]["name"] for d in headless] and port_of(target) == grpc_port,
        f"the trainer's --server {target} is the headless Service on port {grpc_port}",
    )
    check(
        jpod.get("hostNetwork") is True and pod.get("hostNetwork") is True,
        "servers and ranks share their node's network (a rank finds its node's server local)",
    )
    accepted = help_flags(train_bin)
    if accepted is None:
        skip(f"trainer args vs --help ({train_bin} not built)")
    else:
        bad = [f for f in flags_of(rank.get("args", [])) if f not in accepted]
        check(not bad, f"trainer args are shardcast-train flags {bad or ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--build-dir",
        default=os.path.join(ROOT, "build"),
        help="a CMake build of this tree (binaries for --help and ldd)",
    )
    ap.add_argument(
        "--trainer-build-dir",
        default=None,
        help="where shardcast-train was built, if not in --build-dir",
    )
    ap.add_argument(
        "--configure",
        action="store_true",
        help="also run the build stages' cmake configure on the COPY'd files",
    )
    ap.add_argument(
        "--build-stage",
        action="append",
        default=[],
        metavar="STAGE",
        help="with --configure: run STAGE's whole cmake RUN (configure + build + "
        "strip) instead of the configure alone, e.g. build-server",
    )
    ap.add_argument("--jobs", type=int, default=2, help="parallel jobs of --build-stage")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    server_bin = os.path.join(build, "server", "shardcast-server")
    ctl_bin = os.path.join(build, "client", "shardcast-ctl")
    pack_bin = os.path.join(build, "tools", "shardcast-pack")
    train_bin = os.path.join(
        os.path.abspath(args.trainer_build_dir or build), "client", "shardcast-train"
    )

    # ------------------------------------------------------------ Dockerfile
    print("== deploy/Dockerfile")
    instrs = dockerfile_instructions(os.path.join(DEPLOY, "Dockerfile"))
    ignore = [
        line.strip()
        for line in open(os.path.join(DEPLOY, "Dockerfile.dockerignore"))
        if line.strip() and not line.startswith("#")
    ]
    stages, stage, stage_targets, stage_base = [], None, {}, {}
    copied_sources, expose, healthcheck, entry_cmd = [], {}, {}, {}
    for word, rest in instrs:
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            stage = m.group(2)
            stages.append(stage)
            stage_base[stage] = m.group(1)
            check(
                m.group(1).startswith("debian:bookworm") or m.group(1) in stages,
                f"stage {stage} is based on Debian 12 ({m.group(1)})",
            )
            # a stage inherits the targets its base stage built
            stage_targets[stage] = set(stage_targets.get(m.group(1), set()))
        elif word == "RUN":
            for t in re.findall(r"--target\s+([^&|;]+)", rest):
                stage_targets[stage] |= set(t.split())
        elif word == "COPY":
            toks = shlex.split(rest)
            opts = [t for t in toks if t.startswith("--")]
            paths = [t for t in toks if not t.startswith("--")]
            srcs = paths[:-1]
            frm = [o.split("=", 1)[1] for o in opts if o.startswith("--from=")]
            if frm:
                src_stage = frm[0]
                check(src_stage in stages[:-1], f"COPY --from={src_stage}: stage defined earlier")
                for s in srcs:
                    m = re.match(r"/src/build/(.+)/([^/]+)$", s)
                    ok = bool(m) and m.group(2) in executables_in(m.group(1))
                    check(
                        ok,
                        f"COPY --from={src_stage} {s}: add_executable in "
                        f"{m.group(1) if m else '?'}/CMakeLists.txt",
                    )
                    check(
                        bool(m) and m.group(2) in stage_targets.get(src_stage, set()),
                        f"COPY --from={src_stage} {s}: built by that stage's --target list",
                    )
            else:
                for s in srcs:
                    copied_sources.append(s.rstrip("/"))
                    check(os.path.exists(os.path.join(ROOT, s)), f"COPY {s}: exists in the repo")
                    check(
                        dockerignore_keeps(ignore, s), f"COPY {s}: kept by Dockerfile.dockerignore"
                    )
        elif word == "EXPOSE":
            expose[stage] = rest.split()
        elif word == "HEALTHCHECK":
            healthcheck[stage] = rest
        elif word in ("ENTRYPOINT", "CMD"):
            entry_cmd.setdefault(stage, {})[word] = rest
        elif word == "USER":
            check(
                not rest.startswith("root") and not rest.startswith("0"),
                f"stage {stage} runs as a non-root user ({rest})",
            )
    for target in ("server", "trainer"):
        check(target in stages, f"a '{target}' stage exists (docker build --target {target})")
    check(stages[-1] == "server", "the last (default) stage is 'server'")
    hc = healthcheck.get("server", "")
    check("shardcast-ctl" in hc and "health" in hc, "server HEALTHCHECK runs shardcast-ctl health")
    hc_port = re.search(r"127\.0\.0\.1:(\d+)", hc)
    cmd = entry_cmd.get("server", {}).get("CMD", "")
    listen = re.search(r'"--listen",\s*"[^"]*:(\d+)"', cmd)
    check(
        bool(hc_port and listen)
        and hc_port.group(1) == listen.group(1)
        and hc_port.group(1) in expose.get("server", []),
        "server: HEALTHCHECK port == CMD --listen port == EXPOSE",
    )
    # Package caches stay out of the layers: a RUN that installs also cleans, in itself.
    for word, rest in instrs:
        if word == "RUN" and "apt-get install" in rest:
            check(
                "apt-get clean" in rest
                and "rm -rf /var/lib/apt/lists/*" in rest
                and "/var/cache/apt/archives/*.deb" in rest,
                f"RUN apt-get install ... cleans apt's lists and .debs in the same layer "
                f"({rest.split('--no-install-recommends', 1)[-1].split()[0]} ...)",
            )
    # `IMAGE shardcast-ctl ...` must reach shardcast-ctl, not the main binary.
    env = " ".join(rest for word, rest in instrs if word == "ENV")
    for target, main in (("server", "shardcast-server"), ("trainer", "shardcast-train")):
        check(
            entry_cmd.get(target, {}).get("ENTRYPOINT", "") == '["shardcast-entrypoint"]',
            f"{target}: ENTRYPOINT is the dispatching shardcast-entrypoint",
        )
    check(
        "SHARDCAST_MAIN=shardcast-server" in env and "SHARDCAST_MAIN=shardcast-train" in env,
        "SHARDCAST_MAIN names each image's main binary",
    )
    # The repo must configure from the COPY'd files alone: the build stages turn the
    # optional parts off, and every add_subdirectory and include() the top-level
    # CMakeLists then runs must have been copied.
    configures = [rest for word, rest in instrs if word == "RUN" and "cmake -S" in rest]
    for option in ("SHARDCAST_BUILD_TESTS", "SHARDCAST_BUILD_BENCH", "SHARDCAST_BUILD_PYTHON"):
        check(
            bool(configures) and all(f"-D{option}=OFF" in c for c in configures),
            f"every build stage's configure passes -D{option}=OFF",
        )
    top = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    top_wo_optional = re.sub(
        r"if\((?:SHARDCAST_BUILD_(?:TESTS|BENCH|PYTHON)|SHARDCAST_FUZZ)\).*?endif\(\)",
        "",
        top,
        flags=re.S,
    )
    for sub in re.findall(r"add_subdirectory\(([\w/]+)\)", top_wo_optional):
        check(sub in copied_sources, f"add_subdirectory({sub}) is COPY'd into the build stage")
    for included in re.findall(r"include\(([\w/.-]+\.cmake)\)", top):
        folder = os.path.dirname(included)
        check(
            included in copied_sources or folder in copied_sources,
            f"include({included}) is COPY'd into the build stage",
        )

    # ------------------------------------------------------------ compose
    print("== deploy/docker-compose.yml")
    compose = yaml.safe_load(open(os.path.join(DEPLOY, "docker-compose.yml")))
    check(isinstance(compose, dict) and "services" in compose, "compose YAML parses")
    services = compose["services"]
    for name in ("server", "trainer0", "trainer1"):
        check(name in services, f"service {name}")
    for name, svc in services.items():
        b = svc.get("build")
        check(
            isinstance(b, dict) and b.get("target") in stages,
            f"{name}: builds a Dockerfile stage ({b and b.get('target')})",
        )
        check(
            os.path.normpath(os.path.join(DEPLOY, b.get("context", "."))) == ROOT
            and os.path.exists(os.path.join(ROOT, b.get("dockerfile", ""))),
            f"{name}: build context is the repo root and the dockerfile exists",
        )
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if not src.startswith((".", "/")):
                check(src in (compose.get("volumes") or {}), f"{name}: volume {src} declared")
    srv = services["server"]
    check(
        any(v.endswith(":ro") and "/data" in v for v in srv.get("volumes", [])),
        "server mounts the shards read-only",
    )
    check(
        srv.get("depends_on", {}).get("data", {}).get("condition")
        == "service_completed_successfully",
        "server waits for the data job to finish",
    )
    check(
        "shardcast-ctl" in " ".join(srv.get("healthcheck", {}).get("test", [])),
        "server healthcheck uses shardcast-ctl",
    )
    check(
        str(srv.get("restart", "no")).split(":")[0] in ("always", "unless-stopped", "on-failure"),
        f"server restarts when it exits 75 (restart: {srv.get('restart', 'no')})",
    )
    for t in ("trainer0", "trainer1"):
        check(
            services[t].get("depends_on", {}).get("server", {}).get("condition")
            == "service_healthy",
            f"{t} waits for a healthy server",
        )
        env = services[t].get("environment", {})
        check(
            env.get("WORLD_SIZE") == "2" and env.get("MASTER_ADDR") == "trainer0",
            f"{t}: WORLD_SIZE=2, MASTER_ADDR=trainer0",
        )
    check(
        {services["trainer0"]["environment"]["RANK"], services["trainer1"]["environment"]["RANK"]}
        == {"0", "1"},
        "trainers are ranks 0, 1",
    )
    # A healthcheck with a flag `shardcast-ctl health` does not take exits 2 forever: the
    # server never turns healthy and the trainers never start.
    compose_hc = srv.get("healthcheck", {}).get("test", [])
    compose_hc = compose_hc[compose_hc.index("health") + 1 :] if "health" in compose_hc else []
    dockerfile_hc = re.findall(r'"(--[\w-]+)"', hc)
    for name, binary, sub, args_ in (
        ("server", server_bin, (), srv.get("command", [])),
        ("server healthcheck", ctl_bin, ("health",), compose_hc),
        ("Dockerfile HEALTHCHECK", ctl_bin, ("health",), dockerfile_hc),
        ("data", pack_bin, (), services.get("data", {}).get("command", [])),
        ("trainer0", train_bin, (), services["trainer0"].get("command", [])),
    ):
        accepted = help_flags(binary, *sub)
        if accepted is None:
            skip(f"{name}: flags vs --help ({binary} not built)")
            continue
        bad = [f for f in flags_of(args_) if f not in accepted]
        check(
            not bad,
            f"{name}: every flag is in "
            f"{' '.join([os.path.basename(binary), *sub])} --help {bad or ''}",
        )

    # ------------------------------------------------------------ runtime packages
    print("== runtime packages")
    runtime = []
    for word, rest in instrs:
        if word == "RUN" and "apt-get install" in rest:
            pkgs = rest.split("--no-install-recommends", 1)[1].split("&&")[0].split()
            runtime.append(pkgs)
    base_pkgs = runtime[2] if len(runtime) > 2 else []  # build-base, build-trainer, runtime-base
    trainer_pkgs = runtime[3] if len(runtime) > 3 else []
    if shutil.which("apt-cache") and shutil.which("dpkg"):

        def closure(pkgs):
            res = subprocess.run(
                [
                    "apt-cache",
                    "depends",
                    "--recurse",
                    "--no-recommends",
                    "--no-suggests",
                    "--no-conflicts",
                    "--no-breaks",
                    "--no-replaces",
                    "--no-enhances",
                ]
                + pkgs,
                capture_output=True,
                text=True,
            )
            names = set(pkgs)
            for line in res.stdout.splitlines():
                m = re.match(r"\s*(?:\|)?(?:Pre)?Depends:\s+<?([^>\s]+)>?", line)
                if m:
                    names.add(m.group(1).split(":")[0])
                elif line and not line.startswith(" "):
                    names.add(line.strip().split(":")[0])
            return names

        # Debian's slim image already has these (Priority: required / essential).
        essential = {
            "libc6",
            "libgcc-s1",
            "libstdc++6",
            "zlib1g",
            "libzstd1",
            "liblzma5",
            "libbz2-1.0",
            "libacl1",
            "libselinux1",
        }
        for label, bins, pkgs in (
            ("server", [server_bin, ctl_bin, pack_bin], base_pkgs),
            ("trainer", [train_bin, ctl_bin], base_pkgs + trainer_pkgs),
        ):
            present = [b for b in bins if os.access(b, os.X_OK)]
            if len(present) < len(bins):
                skip(f"{label}: ldd check ({', '.join(set(bins) - set(present))} not built)")
                continue
            have = closure(pkgs) | essential
            needed = set()
            for b in present:
                for line in subprocess.run(
                    ["ldd", b], capture_output=True, text=True
                ).stdout.splitlines():
                    m = re.search(r"=> (/\S+)", line)
                    if not m:
                        continue
                    lib = m.group(1)
                    owner = subprocess.run(
                        ["dpkg", "-S", os.path.realpath(lib)], capture_output=True, text=True
                    )
                    if owner.returncode != 0:
                        owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
                    needed.add(owner.stdout.split(":")[0] if owner.returncode == 0 else "?" + lib)
            missing = sorted(needed - have)
            check(
                not missing,
                f"{label}: {len(needed)} library packages covered by "
                f"{' '.join(pkgs)} {missing or ''}",
            )
    else:
        skip("runtime packages (no apt-cache/dpkg)")

    # ------------------------------------------------------------ systemd unit
    print("== deploy/shardcast-server.service")
    unit_path = os.path.join(DEPLOY, "shardcast-server.service")
    unit = open(unit_path).read()
    for key in (
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "CapabilityBoundingSet=\n",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "SystemCallFilter=@system-service",
        "Restart=on-failure",
        "EnvironmentFile=-/etc/shardcast/server.env",
        "KillSignal=SIGTERM",
        "CacheDirectory=shardcast",
        "MemoryMax=",
        "TasksMax=",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ):
        check(key in unit, f"unit has {key.strip()}")
    # A server whose listener stopped accepting exits 75 to be restarted (docs/deploy.md,
    # "Failures"): Restart= must cover a non-zero exit, and nothing may exempt 75.
    restart = re.findall(r"^Restart=(\S+)$", unit, re.M)
    exempt = " ".join(
        re.findall(r"^(?:RestartPreventExitStatus|SuccessExitStatus)=(.*)$", unit, re.M)
    ).split()
    check(
        restart[-1:] in (["on-failure"], ["always"]) and "75" not in exempt,
        f"unit restarts a server that exits 75 (Restart={restart[-1] if restart else 'no'}"
        f"{'; exempt: ' + ' '.join(exempt) if exempt else ''})",
    )
    exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    stop = re.search(r"^TimeoutStopSec=(\d+)s?$", unit, re.M)
    env_text = open(os.path.join(DEPLOY, "shardcast-server.env")).read()
    grace = re.search(r"--grace-period\s+(\d+)s", env_text)
    check(
        bool(stop and grace) and int(stop.group(1)) > int(grace.group(1)),
        "TimeoutStopSec exceeds the example --grace-period",
    )
    accepted = help_flags(server_bin)
    if accepted is None:
        skip(f"unit/env flags vs --help ({server_bin} not built)")
    else:
        env_args = re.search(r"^SHARDCAST_ARGS=(.*)$", env_text, re.M).group(1).split()
        bad = [f for f in flags_of(exec_start.split()[1:] + env_args) if f not in accepted]
        check(
            not bad,
            f"ExecStart and SHARDCAST_ARGS flags are in shardcast-server --help " f"{bad or ''}",
        )
    if shutil.which("systemd-analyze"):
        binary = exec_start.split()[0]
        with tempfile.TemporaryDirectory() as tmp:
            path = unit_path
            if not os.access(binary, os.X_OK):
                stand_in = server_bin if os.access(server_bin, os.X_OK) else "/bin/true"
                print(
                    f"      ({binary} is not installed here: verifying a copy whose "
                    f"ExecStart is {stand_in})"
                )
                path = os.path.join(tmp, "shardcast-server.service")
                open(path, "w").write(unit.replace(binary, stand_in))
            res = subprocess.run(
                ["systemd-analyze", "verify", path], capture_output=True, text=True
            )
            out = (res.stdout + res.stderr).strip()
            check(
                res.returncode == 0 and not out,
                "systemd-analyze verify: " + (out or "no warnings, exit 0"),
            )
            res = subprocess.run(
                ["systemd-analyze", "security", "--offline=true", path],
                capture_output=True,
                text=True,
            )
            level = [line for line in res.stdout.splitlines() if "Overall exposure" in line]
            check(
                res.returncode == 0 and bool(level),
                "systemd-analyze security --offline: "
                + (level[0].strip() if level else res.stderr.strip()),
            )
    else:
        skip("systemd-analyze verify (not installed)")

    # ------------------------------------------------------------ cmake configure
    if args.configure:
        print("== cmake configure of the build stages, on the COPY'd files only")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(src)
            for s in copied_sources:
                from_ = os.path.join(ROOT, s)
                to = os.path.join(src, s)
                if os.path.isdir(from_):
                    shutil.copytree(
                        from_, to, ignore=shutil.ignore_patterns("build*", "__pycache__", "*.swp")
                    )
                else:
                    os.makedirs(os.path.dirname(to), exist_ok=True)
                    shutil.copy2(from_, to)
            run_stage = None
            for word, rest in instrs:
                if word == "FROM":
                    run_stage = re.match(r"\S+(?:\s+AS\s+(\S+))?", rest, re.I).group(1)
                if word != "RUN" or "cmake -S" not in rest:
                    continue
                bdir = os.path.join(tmp, "build-" + run_stage)
                if run_stage in args.build_stage:
                    # The stage's whole RUN (configure, build, strip), its build/ in tmp.
                    command = re.sub(r"(?<=\s)build(?=[\s/]|$)", bdir, rest)
                    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(args.jobs))
                    res = subprocess.run(
                        ["nice", "-n", "10", "bash", "-c", command],
                        cwd=src,
                        capture_output=True,
                        text=True,
                        env=env,
                    )
                    check(
                        res.returncode == 0,
                        f"stage {run_stage}: configure, build, strip "
                        + (
                            "ok" if res.returncode == 0 else res.stdout[-1500:] + res.stderr[-1500:]
                        ),
                    )
                    continue
                configure = rest.split("&&")[0].split()
                configure[configure.index("-B") + 1] = bdir
                res = subprocess.run(configure, cwd=src, capture_output=True, text=True)
                check(
                    res.returncode == 0,
                    f"stage {run_stage}: cmake configure "
                    + ("ok" if res.returncode == 0 else res.stderr[-800:]),
                )

    check_kubernetes(server_bin, train_bin)

    print()
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
