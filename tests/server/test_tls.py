"""HTTPS and mutual TLS on a real socket, with certificates generated here, and rotation without a
restart."""

import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.certs import CA
from tests.helpers.processes import free_port, wait_for
from tests.server.conftest import MODELS

BIN = Path(sys.executable).parent
BODY = b'{"pod":{"name":"p"},"policy":"EE"}\nnode-a\nnode-b'
HEADERS = {"content-type": "application/x-rlscore-names"}


def start(tmp_path, **env_tls):
    port = free_port()
    env = {**os.environ, "RLSCORE_MODEL_DIR": str(MODELS), "RLSCORE_KUBERNETES": "off",
           "RLSCORE_TLS_RELOAD_INTERVAL_S": "0.5", **{k: str(v) for k, v in env_tls.items()}}
    log = open(tmp_path / f"server-{port}.log", "wb")
    proc = subprocess.Popen([str(BIN / "rlscore-server"), "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, port, log


def stop(proc, log):
    proc.terminate()
    proc.wait(10)
    log.close()


def client_context(ca: Path, cert=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return context


@pytest.fixture
def pki(tmp_path):
    ca = CA(tmp_path / "ca")
    return ca, ca.issue("server", "rlscore-suggestion-server"), ca.issue("client", "rl-scheduler", server=False)


def test_https_with_the_right_ca_and_not_otherwise(tmp_path, pki):
    ca, server, _ = pki
    proc, port, log = start(tmp_path, RLSCORE_TLS_CERT_FILE=server.cert, RLSCORE_TLS_KEY_FILE=server.key)
    url = f"https://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/readyz", verify=client_context(ca.files.cert), timeout=1).status_code
                 == 200, 60, "TLS server ready")
        r = httpx.post(f"{url}/v1/scores", content=BODY, headers=HEADERS, verify=client_context(ca.files.cert))
        assert r.status_code == 200 and len(r.content) == 2
        other = CA(tmp_path / "other", "another CA")
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/healthz", verify=client_context(other.files.cert))
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        stop(proc, log)


def test_mutual_tls_requires_a_client_certificate(tmp_path, pki):
    ca, server, client_cert = pki
    proc, port, log = start(tmp_path, RLSCORE_TLS_CERT_FILE=server.cert, RLSCORE_TLS_KEY_FILE=server.key,
                            RLSCORE_TLS_CLIENT_CA_FILE=ca.files.cert)
    url = f"https://127.0.0.1:{port}"
    try:
        with_cert = client_context(ca.files.cert, client_cert)
        wait_for(lambda: httpx.get(f"{url}/readyz", verify=with_cert, timeout=1).status_code == 200, 60,
                 "mTLS server ready")
        assert httpx.post(f"{url}/v1/scores", content=BODY, headers=HEADERS, verify=with_cert).status_code == 200
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.post(f"{url}/v1/scores", content=BODY, headers=HEADERS, verify=client_context(ca.files.cert))
        stranger = CA(tmp_path / "stranger", "stranger CA").issue("client", "intruder", server=False)
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.post(f"{url}/v1/scores", content=BODY, headers=HEADERS,
                       verify=client_context(ca.files.cert, stranger))
    finally:
        stop(proc, log)


def test_a_rotated_certificate_is_served_without_a_restart(tmp_path, pki):
    ca, server, _ = pki
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(server.cert, live / "tls.crt")
    shutil.copy(server.key, live / "tls.key")
    proc, port, log = start(tmp_path, RLSCORE_TLS_CERT_FILE=live / "tls.crt", RLSCORE_TLS_KEY_FILE=live / "tls.key")
    url = f"https://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/readyz", verify=client_context(ca.files.cert), timeout=1).status_code
                 == 200, 60, "TLS server ready")
        # a half-written rotation (new certificate, old key) is refused; the old pair keeps serving
        renewed_ca = CA(tmp_path / "renewed", "renewed CA")
        renewed = renewed_ca.issue("server", "rlscore-suggestion-server")
        shutil.copy(renewed.cert, live / "tls.crt")
        time.sleep(1.5)
        assert httpx.get(f"{url}/healthz", verify=client_context(ca.files.cert)).status_code == 200
        shutil.copy(renewed.key, live / "tls.key")
        wait_for(lambda: _verifies(f"{url}/healthz", renewed_ca.files.cert), 10, "renewed certificate served")
        assert not _verifies(f"{url}/healthz", ca.files.cert)
        assert proc.poll() is None
    finally:
        stop(proc, log)
    assert "TLS files not reloaded" in (tmp_path / f"server-{port}.log").read_text()


def _verifies(url: str, ca: Path) -> bool:
    try:
        return httpx.get(url, verify=client_context(ca), timeout=2).status_code == 200
    except httpx.ConnectError:
        return False


def test_bad_tls_configuration_is_a_clear_error(tmp_path, pki):
    _, server, _ = pki
    env = {**os.environ, "RLSCORE_TLS_CERT_FILE": str(server.cert)}
    r = subprocess.run([str(BIN / "rlscore-server")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "must be set together" in r.stderr
    env["RLSCORE_TLS_KEY_FILE"] = str(tmp_path / "missing.key")
    r = subprocess.run([str(BIN / "rlscore-server")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot serve TLS" in r.stderr
