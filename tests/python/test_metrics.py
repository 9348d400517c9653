"""gpukitd's Prometheus metrics, parsed with Prometheus' own Python parser
(prometheus_client.parser), so a malformed exposition fails here: a gpukitd of its own with
--metrics-address 127.0.0.1:0 (the port comes from its log), sessions of two tenants, ops and
failing calls, then a scrape whose figures are checked against `gpukitctl -o json`. Where a
Prometheus server is at hand (Debian's 2.42, which deploy/install-deps.sh unpacks into
.deps/prometheus; or $GPUKIT_PROMETHEUS, or `prometheus` on PATH), one scrapes the daemon and
its query API is asked for the figures.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import gpukit
from conftest import BACKEND, ROOT, Daemon, _binary, gpukitd_with_metrics

Labels = Tuple[Tuple[str, str], ...]


@dataclass
class MetricsDaemon(Daemon):
    url: str  # its /metrics

    def scrape(self) -> Tuple[str, str]:
        """The text of /metrics and its Content-Type."""
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return response.read().decode("utf-8"), response.headers["Content-Type"]


@pytest.fixture(scope="module")
def metrics_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsDaemon]:
    directory = tmp_path_factory.mktemp("gpukitd-metrics")
    config = {
        "jit": {"cacheDir": "none"},
        "partitions": [{"name": "small", "memory": "8MiB", "compute": 0.25}],
    }
    with gpukitd_with_metrics(directory, config) as (address, url, log_path):
        gpukitctl = _binary("GPUKITCTL", "client/cpp/gpukitctl")
        yield MetricsDaemon(address, log_path, gpukitctl, url=url)


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(api: str, promql: str) -> list:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_a_prometheus_server_scrapes_and_queries_it(metrics_daemon: MetricsDaemon,
                                                     tmp_path: Path) -> None:
    unpacked = ROOT / ".deps" / "prometheus" / "usr" / "bin" / "prometheus"  # install-deps.sh's
    binary = (os.environ.get("GPUKIT_PROMETHEUS") or shutil.which("prometheus")
              or (str(unpacked) if unpacked.exists() else None))
    if not binary:
        pytest.skip("no Prometheus server: deploy/install-deps.sh unpacks Debian's into "
                    ".deps/prometheus; or set GPUKIT_PROMETHEUS, or put `prometheus` on PATH")
    target = urllib.parse.urlparse(metrics_daemon.url).netloc
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpukitd\n    static_configs:\n"
        f"      - targets: ['{target}']\n")
    port = _free_port()
    api = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        # Until its first scrape of gpukitd is stored (a scrape a second).
        deadline = time.monotonic() + 60
        result: list = []
        while not result:
            assert server.poll() is None, f"prometheus exited:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"no scrape within 60 s:\n{log_path.read_text()}"
            try:
                result = _query(api, 'up{job="gpukitd"} == 1')
            except (urllib.error.URLError, ConnectionError):
                pass
            if not result:
                time.sleep(0.1)
        quota = _query(api, 'gpukit_partition_memory_quota_bytes{partition="small"}')
        assert [float(r["value"][1]) for r in quota] == [8 << 20]
        info = _query(api, "gpukit_build_info")
        assert info and info[0]["metric"]["backend"] == BACKEND
        histogram = _query(api, "sum(gpukit_rpc_duration_seconds_count)")
        assert float(histogram[0]["value"][1]) > 0
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
