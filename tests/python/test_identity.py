"""Tenants from identity through the Python client (issue 17).

On the unix socket a session left without a tenant is the caller's own; over TCP a token
(``token=`` or ``$GPUKIT_TOKEN``) is the caller's identity, and a wrong or missing one opens
nothing. This module starts its own gpukitd that also listens on loopback TCP without TLS
(``--insecure-tcp``) with one token configured; TLS itself is tested from C++
(tests/integration/tcp_security_test.cc).
"""

import hashlib
import os
import re
import time
from typing import Iterator, Tuple

import pytest

import gpukit
from conftest import Daemon, _binary, running_gpukitd

TOKEN = "python-test-token"


@pytest.fixture(scope="module")
def tcp_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Daemon, str]]:
    """(it on its unix socket, "127.0.0.1:<port>") of a gpukitd that knows TOKEN as tenant
    "py-team"."""
    directory = tmp_path_factory.mktemp("gpukitd-tcp")
    config = {
        "jit": {"cacheDir": "none"},
        "access": {
            "tokens": [{"sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "tenant": "py-team"}]
        },
    }
    flags = ("--listen", "127.0.0.1:0", "--insecure-tcp")
    with running_gpukitd(directory, config, *flags) as (unix, log_path):
        # The bound TCP port is logged once the server runs, which can be after the unix
        # socket (listening since before that) accepts.
        deadline = time.monotonic() + 15
        while not (found := re.search(r"listening on 127\.0\.0\.1:(\d+)", log_path.read_text())):
            if time.monotonic() > deadline:
                pytest.fail(f"gpukitd did not log its TCP port:\n{log_path.read_text()}")
            time.sleep(0.02)
        gpukitctl = _binary("GPUKITCTL", "client/cpp/gpukitctl")
        yield Daemon(unix, log_path, gpukitctl), f"127.0.0.1:{found.group(1)}"


def _tenants(daemon: Daemon) -> list:
    return sorted(s["tenant"] for s in daemon.ctl("sessions").get("sessions", []))


def test_a_token_is_the_tenant_over_tcp(tcp_daemon, monkeypatch):
    daemon, tcp = tcp_daemon
    monkeypatch.delenv("GPUKIT_TOKEN", raising=False)
    with gpukit.connect(tcp, token=TOKEN) as gk:
        assert gk.array([1.0, 2.0, 3.0]).numpy().tolist() == [1.0, 2.0, 3.0]
        assert _tenants(daemon) == ["py-team"]
        # Another tenant's name is refused.
        with pytest.raises(gpukit.PermissionDenied, match='acts as tenant "py-team"'):
            gpukit.connect(tcp, token=TOKEN, tenant="someone-else")
    # $GPUKIT_TOKEN when token= is not given.
    monkeypatch.setenv("GPUKIT_TOKEN", TOKEN)
    with gpukit.connect(tcp) as gk:
        assert gk.array([4.0]).numpy().tolist() == [4.0]


def test_a_wrong_or_missing_token_opens_nothing(tcp_daemon, monkeypatch):
    _, tcp = tcp_daemon
    monkeypatch.delenv("GPUKIT_TOKEN", raising=False)
    for token in ["not-the-token", None]:
        with pytest.raises(gpukit.Unauthenticated, match="valid bearer token") as error:
            gpukit.connect(tcp, token=token)
        assert error.value.code == "UNAUTHENTICATED"
        assert isinstance(error.value, gpukit.Error)


def test_on_the_unix_socket_an_empty_tenant_is_the_callers_own(tcp_daemon, monkeypatch):
    daemon, _ = tcp_daemon
    monkeypatch.delenv("GPUKIT_TOKEN", raising=False)
    with gpukit.connect(daemon.address):
        assert _tenants(daemon) == [f"uid-{os.getuid()}"]


def test_tls_files_reach_the_client(tcp_daemon, tmp_path):
    # The TLS handshake itself is tested from C++; here, that the arguments arrive.
    _, tcp = tcp_daemon
    missing = str(tmp_path / "missing-ca.pem")
    with pytest.raises(gpukit.InvalidArgument, match="cannot read the TLS file .*missing-ca.pem"):
        gpukit.connect(tcp, token=TOKEN, tls_ca=missing)
    with pytest.raises(gpukit.InvalidArgument, match="needs its key"):
        gpukit.connect(tcp, token=TOKEN, tls_ca=missing, tls_cert=missing)
