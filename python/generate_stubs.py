"""Generates the Python protobuf and gRPC stubs of shardcast.proto (build time only).

The one place the stubs are made: setup.py calls it while building the package, and
tools/python-stubs.sh runs it for the PYTHONPATH route. The stubs import each other as
`shardcast.v1.*` (protoc names modules after the proto's path), so they are written to
OUT/shardcast/v1/ and become the `shardcast.v1` subpackage of the `shardcast` package.

    generate_stubs.py OUT_DIR [--proto-dir DIR]

Tools: `protoc` (Debian: protobuf-compiler) and `grpc_python_plugin` (Debian:
protobuf-compiler-grpc), found on PATH or named by $PROTOC and $GRPC_PYTHON_PLUGIN.
"""

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

# The proto folder of the source tree this file lives in (python/../proto).
DEFAULT_PROTO_DIR = Path(__file__).resolve().parent.parent / "proto"
PROTO_FILE = "shardcast/v1/shardcast.proto"

_INIT = '"""Generated from proto/shardcast/v1/shardcast.proto; do not edit."""\n'


def _tool(env_var: str, name: str, package: str) -> str:
    path = os.environ.get(env_var) or shutil.which(name)
    if not path:
        raise RuntimeError(
            f"{name} not found on PATH (Debian package {package}; or set ${env_var})"
        )
    return path


def generate(out_dir: Path, proto_dir: Path = DEFAULT_PROTO_DIR) -> Path:
    """Writes the stubs under out_dir/shardcast/v1/ and returns that folder."""
    proto = proto_dir / PROTO_FILE
    if not proto.is_file():
        raise RuntimeError(
            f"{proto} not found: the package is built from the shardcast source tree "
            "(python/ next to proto/), or pass --proto-dir / $SHARDCAST_PROTO_DIR"
        )
    protoc = _tool("PROTOC", "protoc", "protobuf-compiler")
    plugin = _tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin", "protobuf-compiler-grpc")
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            protoc,
            f"-I{proto_dir}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            f"--plugin=protoc-gen-grpc_python={plugin}",
            str(proto),
        ],
        check=True,
    )
    package = out_dir / "shardcast" / "v1"
    (package / "__init__.py").write_text(_INIT)
    return package


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--proto-dir",
        type=Path,
        default=Path(os.environ.get("SHARDCAST_PROTO_DIR", DEFAULT_PROTO_DIR)),
    )
    args = parser.parse_args()
    try:
        package = generate(args.out_dir, args.proto_dir)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"generate_stubs: {e}", file=sys.stderr)
        return 1
    print(f"generate_stubs: wrote {package}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
