#!/usr/bin/env python3
"""One version everywhere: the top-level project(gpukit VERSION x.y.z) is the only place it is
written, and each part of gpukit that carries a version says that one.

Run by CTest (version_test) as
    python3 tests/deploy/version_test.py BUILD_DIR
with BUILD_DIR a build tree of this source (CMakeCache.txt there names the source). It checks
`--version` of gpukitd, gpukitctl and gpukit-device-plugin, libgpukit's file name and soname,
gpukit.pc, the .deb's version (CPackConfig.cmake), the Python package's metadata (the
version pyproject.toml reads from CMakeLists.txt) and, where the build made the module,
gpukit.__version__. (The Status RPC's version is checked by the integration tests.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

BUILD_DIR = Path(sys.argv.pop(1) if len(sys.argv) > 1 else "build").resolve()
SOURCE_DIR = Path(__file__).resolve().parents[2]


def cache_value(name: str) -> str:
    text = (BUILD_DIR / "CMakeCache.txt").read_text()
    match = re.search(rf"^{name}:[A-Z]+=(.*)$", text, re.MULTILINE)
    if not match:
        raise AssertionError(f"{name} is not in {BUILD_DIR}/CMakeCache.txt")
    return match.group(1)


def project_version() -> str:
    """The version as the top-level CMakeLists.txt writes it."""
    text = (SOURCE_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"^project\(gpukit VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text, re.MULTILINE)
    if not match:
        raise AssertionError("no project(gpukit VERSION x.y.z) in CMakeLists.txt")
    return match.group(1)


VERSION = project_version()


class OneVersionTest(unittest.TestCase):
    def test_build_was_configured_with_the_project_version(self) -> None:
        self.assertEqual(cache_value("CMAKE_PROJECT_VERSION"), VERSION)

    def test_programs_print_the_project_version(self) -> None:
        for program, path in [
            ("gpukitd", "daemon/gpukitd"),
            ("gpukitctl", "client/cpp/gpukitctl"),
            ("gpukit-device-plugin", "daemon/device_plugin/gpukit-device-plugin"),
        ]:
            with self.subTest(program=program):
                result = subprocess.run(
                    [str(BUILD_DIR / path), "--version"], capture_output=True, text=True,
                    timeout=30, check=True)
                self.assertEqual(result.stdout.split(), [program, VERSION])

    def test_libgpukit_is_versioned_by_the_project(self) -> None:
        major, minor, _ = VERSION.split(".")
        library = BUILD_DIR / "client/cpp" / f"libgpukit.so.{VERSION}"
        self.assertTrue(library.is_file(), f"{library} not built")
        dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True,
                                 text=True, check=True).stdout
        self.assertIn(f"[libgpukit.so.{major}.{minor}]", dynamic)

    def test_pkg_config_file_has_the_project_version(self) -> None:
        self.assertIn(f"\nVersion: {VERSION}\n", (BUILD_DIR / "gpukit.pc").read_text())

    def test_debian_package_has_the_project_version(self) -> None:
        config = (BUILD_DIR / "CPackConfig.cmake").read_text()
        self.assertIn(f'set(CPACK_PACKAGE_VERSION "{VERSION}")', config)

    def test_python_package_reads_the_version_from_cmake(self) -> None:
        try:
            import tomllib
        except ImportError:  # Python < 3.11
            self.skipTest(f"{sys.executable} has no tomllib")
        pyproject = tomllib.loads((SOURCE_DIR / "client/python/pyproject.toml").read_text())
        self.assertNotIn("version", pyproject["project"], "a second copy of the version")
        self.assertIn("version", pyproject["project"]["dynamic"])
        provider = pyproject["tool"]["scikit-build"]["metadata"]["version"]
        self.assertEqual(provider["provider"], "scikit_build_core.metadata.regex")
        source = (SOURCE_DIR / "client/python" / provider["input"]).resolve()
        self.assertEqual(source, SOURCE_DIR / "CMakeLists.txt")
        match = re.search(provider["regex"], source.read_text())
        self.assertIsNotNone(match, "pyproject's version regex finds nothing")
        self.assertEqual(match.group("value"), VERSION)

    def test_python_module_has_the_project_version(self) -> None:
        package_dir = BUILD_DIR / "python"
        if not list((package_dir / "gpukit").glob("_gpukit*.so")):
            self.skipTest(f"{BUILD_DIR} has no Python module")
        if not any(path.name.startswith(f"_gpukit.cpython-{sys.version_info.major}"
                                        f"{sys.version_info.minor}-")
                   for path in (package_dir / "gpukit").glob("_gpukit*.so")):
            self.skipTest(f"{BUILD_DIR}'s module is not for this Python ({sys.executable})")
        result = subprocess.run(
            [sys.executable, "-c", "import gpukit; print(gpukit.__version__)"],
            capture_output=True, text=True, timeout=60, check=True,
            env={**os.environ, "PYTHONPATH": str(package_dir)})
        self.assertEqual(result.stdout.strip(), VERSION)


if __name__ == "__main__":
    unittest.main(verbosity=2)
