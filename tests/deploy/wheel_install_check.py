#!/usr/bin/env python3
"""Checks an installed gpukit wheel from inside the environment it was installed into (run by
tests/deploy/wheel_test.sh with the venv's python, LD_LIBRARY_PATH empty):

- `import gpukit` resolves to this environment's site-packages, not a source tree or build;
- the distribution's version, gpukit.__version__ (the compiled module's) and the expected
  project version agree;
- the module's shared libraries (gRPC, protobuf, abseil, ...) load from the wheel's own
  gpukit.libs/ under renamed sonames, none from the system's gRPC, and none is libcuda,
  NVRTC or cuBLASLt (gpukit opens those at run time from the host);
- gpukit and grpcio work in one process, in both import orders: a gpukit session computes,
  and grpcio calls gpukitd's AdminService.Status on the same socket.

Usage: python wheel_install_check.py VERSION ADDRESS   (ADDRESS: unix:///path.sock)
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import sysconfig
import unittest
from pathlib import Path

VERSION = ""
ADDRESS = ""

# Both orders run in a fresh interpreter: the first import decides which copy of a library
# a process holds. gpukit computes; grpcio sends AdminService.Status (an empty request) and
# reads the version out of the answer's bytes.
PROCESS_SCRIPT = """
import sys
address, first = sys.argv[1], sys.argv[2]
if first == "grpc":
    import grpc
    import gpukit
else:
    import gpukit
    import grpc
with gpukit.connect(address=address) as gk:
    total = (gk.array([1.0, 2.0, 3.0]) * 2).numpy().sum()
with grpc.insecure_channel(address) as channel:
    status = channel.unary_unary("/gpukit.v1.AdminService/Status")(b"", timeout=30)
print(total, gpukit.__version__ in status.decode(errors="replace"))
"""


class InstalledWheelTest(unittest.TestCase):
    def test_imports_from_this_environments_site_packages(self) -> None:
        import gpukit

        site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
        self.assertTrue(Path(sys.prefix).resolve() != Path(sys.base_prefix).resolve(),
                        "not run from a virtual environment")
        self.assertEqual(Path(gpukit.__file__).resolve().parent, site_packages / "gpukit")

    def test_versions_agree(self) -> None:
        import gpukit

        self.assertEqual(importlib.metadata.version("gpukit"), VERSION)
        self.assertEqual(gpukit.__version__, VERSION)

    def test_module_libraries_come_from_the_wheel(self) -> None:
        import gpukit._gpukit as module

        site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
        ldd = subprocess.run(["ldd", module.__file__], capture_output=True, text=True,
                             check=True).stdout
        self.assertNotIn("not found", ldd)
        resolved = {}
        for line in ldd.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "=>":
                resolved[parts[0]] = parts[2]
        vendored = [name for name, path in resolved.items()
                    if Path(path).resolve().is_relative_to(site_packages / "gpukit.libs")]
        # auditwheel's renamed sonames: libgrpc++-<hash>.so.1.51.1, ...
        for prefix in ("libgrpc++-", "libprotobuf-", "libabsl_status-"):
            with self.subTest(library=prefix):
                self.assertTrue(any(name.startswith(prefix) for name in vendored),
                                f"no vendored {prefix}*: {sorted(vendored)}")
        for name, path in resolved.items():
            with self.subTest(library=name):
                self.assertFalse(name.startswith(("libgrpc", "libprotobuf", "libabsl"))
                                 and name not in vendored, f"{name} from the system: {path}")
                self.assertFalse(name.startswith(("libcuda", "libnvrtc", "libcublas")),
                                 f"{name} is linked (it must be opened at run time)")
        libs = list((site_packages / "gpukit.libs").iterdir())
        self.assertFalse([p for p in libs if p.name.startswith(("libcuda", "libnvrtc",
                                                                 "libcublas"))])

    def test_gpukit_and_grpcio_share_a_process(self) -> None:
        for first in ("gpukit", "grpc"):
            with self.subTest(first=first):
                result = subprocess.run([sys.executable, "-c", PROCESS_SCRIPT, ADDRESS, first],
                                        capture_output=True, text=True, timeout=120)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout.split(), ["12.0", "True"])


if __name__ == "__main__":
    VERSION, ADDRESS = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    unittest.main(verbosity=2)
