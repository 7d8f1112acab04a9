#!/usr/bin/python3
"""Issue 36's renames of the server's three modules whose names differed by a word, by
`git mv` and word replacement only: shardcast_server -> daemon (ShardcastServer ->
Daemon), serving/shardcast_service_impl -> serving/service_core (ShardcastServiceImpl ->
ServiceCore); rpc/grpc_shardcast_service -> rpc/grpc_adapter was the commit before.
Run once from the repository root on a clean tree. docs/testing.md is the lead's.
`--rewrite-only` does the word replacements alone (idempotent), for code merged from
branches that still use the old names."""

import re
import sys

from tree_rewrite import git, require_clean_tree, rewrite_tracked_files

MOVES = [("server/shardcast_server.h", "server/daemon.h"),
         ("server/shardcast_server.cc", "server/daemon.cc"),
         ("server/serving/shardcast_service_impl.h", "server/serving/service_core.h"),
         ("server/serving/shardcast_service_impl.cc", "server/serving/service_core.cc")]
WORDS = [(r"\bShardcastServiceImpl\b", "ServiceCore"),
         (r"\bShardcastServer\b", "Daemon"),
         (r"\bSHARDCAST_SERVER_SERVING_SHARDCAST_SERVICE_IMPL_H_\b",
          "SHARDCAST_SERVER_SERVING_SERVICE_CORE_H_"),
         (r"\bSHARDCAST_SERVER_SHARDCAST_SERVER_H_\b", "SHARDCAST_SERVER_DAEMON_H_"),
         (r"\bshardcast_service_impl\b", "service_core"),
         # The file, not the libraries shardcast_server_<room>.
         (r"\bshardcast_server(?=\.(h|cc|\*|\{)|`)", "daemon")]
SKIP = {"docs/testing.md", "tools/move_server_into_rooms.py", "tools/rename_server_modules.py"}


def main():
    rewrite_only = "--rewrite-only" in sys.argv[1:]
    if not rewrite_only:
        require_clean_tree()
    for old, new in ([] if rewrite_only else MOVES):
        git("mv", old, new)
    def rewrite(_, text):
        for pattern, replacement in WORDS:
            text = re.sub(pattern, replacement, text)
        return text

    rewrite_tracked_files(rewrite, SKIP)


if __name__ == "__main__":
    main()
