#!/usr/bin/python3
"""The move of issue 36: server/'s files into rooms by concern, by `git mv` and path
rewrites only (#include lines, header guards, CMake source lists, paths in comments and
docs). Run once from the repository root on a clean tree; the build passes after it.
Kept for the record (as the common/ move was): `git log --follow` and rename detection
carry history and concurrent edits across it. `--rewrite-only` does the path rewrites
alone (idempotent), for code merged from branches that still name the old paths."""

import re
import subprocess
import sys

from tree_rewrite import git, require_clean_tree, rewrite_tracked_files

# room -> the files it receives (basename kept; renames are later, separate commits).
ROOMS = {
    # What every room may use: time, logging, the options struct, counters, version.
    "base": ["clock.h", "log.h", "log.cc", "server_options.h", "server_stats.h",
             "server_stats.cc", "version.h", "memory_limit.h", "memory_limit.cc"],
    # POSIX sockets and addresses, no gRPC.
    "net": ["host_port.h", "host_port.cc", "unix_socket.h", "unix_socket.cc",
            "descriptor_limit.h", "descriptor_limit.cc"],
    # Shards in, decoded batches out.
    "assembly": ["served_dataset.h", "served_dataset.cc", "remote_storage.h",
                 "remote_storage.cc", "batch_assembler.h", "batch_assembler.cc",
                 "decode_pool.h", "decode_pool.cc", "decode_budget.h", "decode_budget.cc",
                 "batch_memory.h", "batch_memory.cc"],
    # The status page's renderers: Prometheus text and its HTTP endpoint.
    "status": ["metrics_text.h", "metrics_text.cc", "metrics_http.h", "metrics_http.cc"],
    # Datasets, jobs, streams and the service core that answers the protocol.
    "serving": ["dataset_registry.h", "dataset_registry.cc", "job_registry.h",
                "job_registry.cc", "stream_control.h", "stream_control.cc",
                "stream_manager.h", "stream_manager.cc", "stall_watch.h", "stall_watch.cc",
                "batch_window.h", "batch_window.cc", "shardcast_service_impl.h",
                "shardcast_service_impl.cc"],
    # Everything that touches gRPC: the adapter, wire encoding, the listener's guard.
    "rpc": ["grpc_shardcast_service.h", "grpc_shardcast_service.cc", "batch_encoding.h",
            "batch_encoding.cc", "accept_watch.h", "accept_watch.cc",
            "grpc_socket_mutator_abi.h", "listener_probe.h", "listener_probe.cc",
            "security.h", "security.cc"],
}
ROOM_OF = {name: room for room, names in ROOMS.items() for name in names}
# Not rewritten: the lead's file.
SKIP = {"docs/testing.md", "tools/move_server_into_rooms.py"}


def main():
    rewrite_only = "--rewrite-only" in sys.argv[1:]
    if not rewrite_only:
        require_clean_tree()
    for room, names in ([] if rewrite_only else ROOMS.items()):
        for name in names:
            subprocess.run(["mkdir", "-p", f"server/{room}"], check=True)
            git("mv", f"server/{name}", f"server/{room}/{name}")

    names = "|".join(re.escape(n) for n in sorted(ROOM_OF, key=len, reverse=True))
    # server/NAME, but not tests/server/NAME nor server/room/NAME.
    path = re.compile(rf"(?<!tests/)(?<![\w-])server/({names})(?![\w.])")
    guard = re.compile(
        r"SHARDCAST_SERVER_(" + "|".join(
            re.escape(n[:-2].upper()) for n in ROOM_OF if n.endswith(".h")) + r")_H_")
    guard_room = {n[:-2].upper(): ROOM_OF[n] for n in ROOM_OF if n.endswith(".h")}

    def rewrite(f, text):
        new = path.sub(lambda m: f"server/{ROOM_OF[m.group(1)]}/{m.group(1)}", text)
        if f.startswith("server/") and f.endswith(".h"):
            new = guard.sub(
                lambda m: f"SHARDCAST_SERVER_{guard_room[m.group(1)].upper()}_{m.group(1)}_H_",
                new)
        if f == "server/CMakeLists.txt" and not rewrite_only:
            # The source lists name files relative to server/.
            new = re.sub(rf"(?m)^(\s+)({names})$",
                         lambda m: f"{m.group(1)}{ROOM_OF[m.group(2)]}/{m.group(2)}", new)
        return new

    rewrite_tracked_files(rewrite, SKIP)


if __name__ == "__main__":
    main()
