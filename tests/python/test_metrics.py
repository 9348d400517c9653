"""gpukitd's Prometheus metrics, parsed with Prometheus' own Python parser
(prometheus_client.parser), so a malformed exposition fails here: a gpukitd of its own with
--metrics-address 127.0.0.1:0 (the port comes from its log), sessions of two tenants, ops and
failing calls, then a scrape whose figures are checked against `gpukitctl -o json`.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import gpukit
from conftest import BACKEND, _accepts, _binary

Labels = Tuple[Tuple[str, str], ...]


class MetricsDaemon:
    def __init__(self, address: str, url: str, log_path: Path, gpukitctl: Path) -> None:
        self.address = address
        self.url = url
        self.log_path = log_path
        self.gpukitctl = gpukitctl

    def ctl(self, command: str) -> dict:
        out = subprocess.run(
            [str(self.gpukitctl), "--addr", self.address, "-o", "json", command],
            check=True, capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout)

    def scrape(self) -> Tuple[str, str]:
        """The text of /metrics and its Content-Type."""
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return response.read().decode("utf-8"), response.headers["Content-Type"]


@pytest.fixture(scope="module")
def metrics_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsDaemon]:
    directory = tmp_path_factory.mktemp("gpukitd-metrics")
    sock = directory / "gpukitd.sock"
    config = directory / "gpukitd.json"
    config.write_text(json.dumps({
        "jit": {"cacheDir": "none"},
        "partitions": [{"name": "small", "memory": "8MiB", "compute": 0.25}],
    }))
    log_path = directory / "gpukitd.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(_binary("GPUKITD", "daemon/gpukitd")), "--listen", f"unix://{sock}",
             "--backend", BACKEND, "--config", str(config),
             "--metrics-address", "127.0.0.1:0"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while not (sock.exists() and _accepts(sock)):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gpukitd did not start:\n{log_path.read_text()}")
            time.sleep(0.02)
        # Logged before the gRPC socket accepts.
        match = re.search(r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", log_path.read_text())
        assert match, f"no metrics line in the log:\n{log_path.read_text()}"
        yield MetricsDaemon(f"unix://{sock}", match.group(1), log_path,
                            _binary("GPUKITCTL", "client/cpp/gpukitctl"))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0, f"gpukitd exited with {process.returncode}:\n{log_path.read_text()}"


def parse(text: str) -> Tuple[Dict[str, str], Dict[Tuple[str, Labels], float]]:
    """(type by family, value by (sample name, labels)) as Prometheus' parser reads the text;
    the parser raises on anything malformed."""
    types: Dict[str, str] = {}
    samples: Dict[Tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in types, f"family {family.name} twice"
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, f"sample {key} twice"
            samples[key] = sample.value
    return types, samples


def value(samples: Dict[Tuple[str, Labels], float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"no sample {key}"
    return samples[key]


def test_exposition_parses_and_agrees_with_gpukitctl(metrics_daemon: MetricsDaemon) -> None:
    d = metrics_daemon
    with gpukit.connect(d.address, tenant="team-a") as a, \
            gpukit.connect(d.address, tenant="team-b", partition="small") as b:
        x = a.array(np.ones((64, 64), dtype=np.float32))
        np.testing.assert_allclose(((x + x) @ x).numpy(), np.full((64, 64), 128, np.float32))
        b.array(np.ones(1024, dtype=np.float32)).numpy()
        with pytest.raises(gpukit.ResourceExhausted):  # above the partition's 8 MiB
            b.zeros((4 << 20,), dtype="float32").numpy()
        with pytest.raises(gpukit.NotFound):  # SessionService/Open, NOT_FOUND
            gpukit.connect(d.address, partition="no-such-partition")

        partitions = d.ctl("partitions")["partitions"]
        tenants = d.ctl("tenants")["tenants"]
        status = d.ctl("status")
        text, content_type = d.scrape()

    assert content_type.startswith("text/plain; version=0.0.4")
    types, s = parse(text)

    # Types as Prometheus reads them (the parser drops a counter's _total from the family).
    assert types["gpukit_partition_gpu_seconds"] == "counter"
    assert types["gpukit_partition_memory_used_bytes"] == "gauge"
    assert types["gpukit_rpc_duration_seconds"] == "histogram"
    assert types["gpukit_device_busy_seconds"] == "counter"

    assert value(s, "gpukit_sessions") == status.get("sessions", 0)
    for p in partitions:
        name = p["partition"]["name"]
        labels = {"partition": name, "device": str(p["partition"].get("deviceIndex", 0))}
        assert value(s, "gpukit_partition_memory_quota_bytes", **labels) == \
            int(p["partition"]["memoryQuotaBytes"])
        assert value(s, "gpukit_partition_memory_used_bytes", **labels) == \
            int(p.get("memoryUsedBytes", 0))
        assert value(s, "gpukit_partition_admissions_total", result="admitted", **labels) == \
            int(p.get("admittedTotal", 0))
        for reason, count in p.get("rejected", {}).items():
            assert value(s, "gpukit_partition_admissions_total", result="rejected",
                         reason=reason, **labels) == int(count)
        by_qos = p.get("deviceTimeByQos", {})
        for qos, field in [("Guaranteed", "guaranteedNs"), ("Burstable", "burstableNs"),
                           ("BestEffort", "bestEffortNs")]:
            assert value(s, "gpukit_partition_gpu_seconds_total", qos=qos, **labels) == \
                pytest.approx(int(by_qos.get(field, 0)) / 1e9, abs=1e-9)
    small = next(p for p in partitions if p["partition"]["name"] == "small")
    assert int(small["rejected"]["REASON_PARTITION_QUOTA_EXCEEDED"]) >= 1

    for t in tenants:
        name = t.get("tenant", "")
        assert value(s, "gpukit_tenant_gpu_seconds_total", tenant=name, qos="BestEffort") == \
            pytest.approx(int(t.get("deviceTimeByQos", {}).get("bestEffortNs", 0)) / 1e9, abs=1e-9)
        assert value(s, "gpukit_tenant_tasks_completed_total", tenant=name, result="failed") == \
            int(t.get("tasksFailed", 0))
    assert value(s, "gpukit_tenant_gpu_seconds_total", tenant="team-a", qos="BestEffort") > 0

    assert value(s, "gpukit_rpc_requests_total", method="gpukit.v1.SessionService/Open",
                 code="NOT_FOUND") == 1
    assert value(s, "gpukit_rpc_requests_total", method="gpukit.v1.SessionService/Open",
                 code="OK") == 2


def test_histograms_are_cumulative_and_end_at_their_count(metrics_daemon: MetricsDaemon) -> None:
    with gpukit.connect(metrics_daemon.address, tenant="hist") as gk:
        gk.ones(16).numpy()
    text, _ = metrics_daemon.scrape()
    histograms = [f for f in text_string_to_metric_families(text) if f.type == "histogram"]
    assert histograms, "gpukit_rpc_duration_seconds has series once a call was made"
    for family in histograms:
        series: Dict[Labels, List[Tuple[float, float]]] = {}
        counts: Dict[Labels, float] = {}
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if sample.name.endswith("_bucket"):
                series.setdefault(labels, []).append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                counts[labels] = sample.value
        for labels, buckets in series.items():
            bounds = [le for le, _ in buckets]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf"), labels
            cumulative = [n for _, n in buckets]
            assert cumulative == sorted(cumulative), f"{labels}: not cumulative"
            assert cumulative[-1] == counts[labels], labels


def test_other_paths_are_not_found(metrics_daemon: MetricsDaemon) -> None:
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(metrics_daemon.url.replace("/metrics", "/"), timeout=10)
    assert error.value.code == 404
