"""Generate Python code for proto/muster/v1 into services/muster/contracts/v1 (`make proto`).

protoc names generated imports after the proto path (`from muster.v1 import events_pb2`); they are
rewritten to the package that holds them (`from muster.contracts.v1 import events_pb2`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "services" / "muster" / "contracts"


def _plugin(name: str) -> str:
    found = shutil.which(
        name, path=os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    )
    if found is None:
        raise SystemExit(f"{name} not found: pip install mypy-protobuf")
    return found


def main() -> int:
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "muster" / "v1").glob("*.proto")
    )
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{Path(protoc.__file__).parent / '_proto'}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            # typed stubs for the generated gRPC code (mypy-protobuf's plugin)
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--mypy_grpc_out={tmp}",
            *protos,
        ]
        if protoc.main(args) != 0:
            return 1
        shutil.rmtree(OUT, ignore_errors=True)
        (OUT / "v1").mkdir(parents=True)
        (OUT / "__init__.py").write_text(
            '"""Generated from proto/ by `make proto`; never edit."""\n'
        )
        (OUT / "v1" / "__init__.py").write_text("")
        for path in sorted((Path(tmp) / "muster" / "v1").iterdir()):
            text = re.sub(
                r"\bfrom muster\.v1 import\b", "from muster.contracts.v1 import", path.read_text()
            )
            (OUT / "v1" / path.name).write_text(text)
    print(f"generated {len(protos)} protos into {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
