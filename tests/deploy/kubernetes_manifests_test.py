#!/usr/bin/env python3
"""deploy/kubernetes/ hangs together: every manifest parses, names what it uses, and agrees
with gpukitd's configuration and gpukit-device-plugin's flags, so that a typo fails CI.

Run by CTest (kubernetes_manifests_test) as
    python3 tests/deploy/kubernetes_manifests_test.py [deploy/kubernetes]
It needs PyYAML (deploy/requirements-dev.txt), nothing else: no cluster.
"""

from __future__ import annotations

import json
import sys
import unittest
from pathlib import Path

import yaml

MANIFEST_DIR = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
# The programs a bundle's bin/ holds (deploy/bundle.sh) that the manifests may run.
BUNDLE_PROGRAMS = {"gpukitd", "gpukitctl", "gpukit-device-plugin"}
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def load_all() -> list[dict]:
    docs = []
    for path in sorted(MANIFEST_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                doc["__file__"] = path.name
                docs.append(doc)
    return docs


def flag(command: list[str], name: str) -> str:
    """The value of `--name value` or `--name=value` in a command line."""
    for i, arg in enumerate(command):
        if arg == name:
            return command[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    raise AssertionError(f"{name} not in {command}")


class KubernetesManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.docs = load_all()
        cls.by_kind: dict[tuple[str, str], dict] = {}
        for doc in cls.docs:
            key = (doc.get("kind"), doc.get("metadata", {}).get("name"))
            assert key not in cls.by_kind, f"{key} defined twice"
            cls.by_kind[key] = doc

    def get(self, kind: str, name: str) -> dict:
        self.assertIn((kind, name), self.by_kind, f"no {kind} {name} in {MANIFEST_DIR}")
        return self.by_kind[(kind, name)]

    def daemonset(self) -> dict:
        return self.get("DaemonSet", "gpukit")

    def container(self, name: str) -> dict:
        containers = self.daemonset()["spec"]["template"]["spec"]["containers"]
        matches = [c for c in containers if c["name"] == name]
        self.assertEqual(len(matches), 1, f"container {name}")
        return matches[0]

    def mount_path(self, container: dict, volume: str) -> str:
        paths = [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] == volume]
        self.assertEqual(len(paths), 1, f"{container['name']} mounts {volume}")
        return paths[0]

    def volume(self, name: str) -> dict:
        volumes = self.daemonset()["spec"]["template"]["spec"]["volumes"]
        matches = [v for v in volumes if v["name"] == name]
        self.assertEqual(len(matches), 1, f"volume {name}")
        return matches[0]

    def gpukitd_config(self) -> dict:
        return json.loads(self.get("ConfigMap", "gpukitd-config")["data"]["gpukitd.json"])

    def test_every_document_has_api_version_kind_and_name(self):
        self.assertGreaterEqual(len(self.docs), 4)
        for doc in self.docs:
            with self.subTest(file=doc["__file__"], kind=doc.get("kind")):
                self.assertIsInstance(doc.get("apiVersion"), str)
                self.assertIsInstance(doc.get("kind"), str)
                self.assertIsInstance(doc.get("metadata", {}).get("name"), str)

    def test_namespaced_objects_live_in_the_gpukit_namespace(self):
        self.get("Namespace", "gpukit")
        for kind, name in [("ConfigMap", "gpukitd-config"), ("DaemonSet", "gpukit")]:
            self.assertEqual(self.get(kind, name)["metadata"]["namespace"], "gpukit")

    def test_daemonset_selector_matches_its_pods(self):
        spec = self.daemonset()["spec"]
        labels = spec["template"]["metadata"]["labels"]
        for key, value in spec["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(key), value, key)

    def test_every_volume_is_mounted_and_every_mount_names_a_volume(self):
        pod = self.daemonset()["spec"]["template"]["spec"]
        volumes = {v["name"] for v in pod["volumes"]}
        self.assertEqual(len(volumes), len(pod["volumes"]), "volume names repeat")
        mounted = set()
        for container in pod["containers"]:
            for mount in container.get("volumeMounts", []):
                with self.subTest(container=container["name"], mount=mount["name"]):
                    self.assertIn(mount["name"], volumes)
                mounted.add(mount["name"])
        self.assertEqual(mounted, volumes, "volumes that no container mounts")
        for volume in pod["volumes"]:
            if "configMap" in volume:
                self.get("ConfigMap", volume["configMap"]["name"])

    def test_containers_run_programs_of_the_bundle(self):
        pod = self.daemonset()["spec"]["template"]["spec"]
        for container in pod["containers"]:
            words = " ".join(container.get("command", []) + container.get("args", [])).split()
            for probe in ("readinessProbe", "livenessProbe"):
                words += container.get(probe, {}).get("exec", {}).get("command", [])
            programs = {w.split("/")[-1] for w in words if w.startswith("/opt/gpukit/bin/")}
            with self.subTest(container=container["name"]):
                self.assertTrue(programs, "runs no program of /opt/gpukit/bin")
                self.assertLessEqual(programs, BUNDLE_PROGRAMS)

    def test_gpukitd_serves_where_the_plugin_and_the_pods_look(self):
        config = self.gpukitd_config()
        listen = config["listen"][0]
        self.assertTrue(listen.startswith("unix:///"), listen)
        socket_dir = listen[len("unix://") :].rsplit("/", 1)[0]
        gpukitd = self.container("gpukitd")
        plugin = self.container("device-plugin")
        self.assertEqual(self.mount_path(gpukitd, "socket-dir"), socket_dir)
        self.assertEqual(self.mount_path(gpukitd, "config"), "/etc/gpukit")
        self.assertIn("/etc/gpukit/gpukitd.json", " ".join(gpukitd["args"]))
        self.assertIn("gpukitd.json", self.get("ConfigMap", "gpukitd-config")["data"])
        # The plugin dials gpukitd's socket, and sees its directory at the host's path, which
        # its Allocate mounts into pods (--host-socket-dir's default).
        self.assertEqual(flag(plugin["command"], "--gpukit-addr"), listen)
        self.assertEqual(self.mount_path(plugin, "socket-dir"), socket_dir)
        self.assertEqual(self.volume("socket-dir")["hostPath"]["path"], socket_dir)

    def test_plugin_shares_the_kubelets_plugin_directory(self):
        plugin = self.container("device-plugin")
        self.assertEqual(flag(plugin["command"], "--plugin-dir"), PLUGIN_DIR)
        self.assertEqual(self.mount_path(plugin, "device-plugins"), PLUGIN_DIR)
        self.assertEqual(self.volume("device-plugins")["hostPath"]["path"], PLUGIN_DIR)

    def test_configmap_carries_the_example_configuration(self):
        # deploy/gpukitd.json is what config_test checks against gpukitd's own parser; the
        # ConfigMap ships the same settings, so it is checked with them.
        example = json.loads((MANIFEST_DIR.parents[0] / "gpukitd.json").read_text())
        self.assertEqual(self.gpukitd_config(), example)

    def test_gpukitd_gets_the_gpus(self):
        pod = self.daemonset()["spec"]["template"]["spec"]
        self.assertEqual(pod.get("runtimeClassName"), "nvidia")
        env = {e["name"]: e["value"] for e in self.container("gpukitd").get("env", [])}
        self.assertEqual(env.get("NVIDIA_VISIBLE_DEVICES"), "all")

    def test_example_pod_requests_a_slot_of_the_default_partition(self):
        pod = self.get("Pod", "gpukit-example")
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        self.assertEqual(limits.get("gpukit.io/default"), 1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        MANIFEST_DIR = Path(sys.argv.pop(1)).resolve()
    unittest.main(verbosity=2)
