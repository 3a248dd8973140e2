"""A real Synapse homeserver for the Matrix tests: SQLite, loopback, its own virtualenv.

Synapse comes from ``.ci/synapse.py`` (pinned, cached by version); nothing here skips: a
missing install fails with the command that makes it. Synapse cannot listen on port 0, so a
free loopback port is picked first. The config is written by hand (no ``--generate-config``
run): SQLite, no federation, no presence, no registration but the shared secret, and message
rate limits low enough for a test to hit (every account but the bot's is exempt through the
admin API; :meth:`Synapse.limit` and :meth:`Synapse.unlimit` switch the bot's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.luna_process import REPO

INSTALL = f"{sys.executable} {REPO / '.ci' / 'synapse.py'}"
SERVER_NAME = "luna.test"
START_TIMEOUT_S = 90.0
# rc_message: the bot, when limited, may send BURST events at once, then one every 1/PER_SECOND s.
PER_SECOND = 0.5
BURST = 3


@dataclass(frozen=True)
class Account:
    user_id: str
    password: str
    access_token: str
    device_id: str


def synapse_python() -> Path:
    out = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "synapse.py"), "--print"],
        capture_output=True,
        text=True,
        check=True,
    )
    python = Path(out.stdout.strip()) / "bin" / "python"
    if not python.exists():
        raise AssertionError(f"Synapse is not installed; run: {INSTALL}")
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _signing_key() -> str:
    seed = base64.b64encode(os.urandom(32)).decode().rstrip("=")
    return f"ed25519 a_test {seed}\n"


def _config(folder: Path, port: int, secret: str) -> str:
    return f"""
server_name: "{SERVER_NAME}"
pid_file: "{folder}/homeserver.pid"
public_baseurl: "http://127.0.0.1:{port}/"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{folder}/homeserver.db"
log_config: "{folder}/log.yaml"
media_store_path: "{folder}/media"
signing_key_path: "{folder}/signing.key"
registration_shared_secret: "{secret}"
enable_registration: false
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence:
  enabled: false
url_preview_enabled: false
max_upload_size: 10M
rc_message:
  per_second: {PER_SECOND}
  burst_count: {BURST}
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
rc_joins:
  local: {{per_second: 1000, burst_count: 1000}}
rc_invites:
  per_room: {{per_second: 1000, burst_count: 1000}}
  per_user: {{per_second: 1000, burst_count: 1000}}
rc_key_requests: {{per_second: 1000, burst_count: 1000}}
rc_delayed_event_mgmt: {{per_second: 1000, burst_count: 1000}}
"""


_LOG_CONFIG = """
version: 1
formatters:
  plain: {format: "%(asctime)s %(name)s %(levelname)s %(message)s"}
handlers:
  file: {class: logging.FileHandler, filename: "LOG_FILE", formatter: plain}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


class Synapse:
    """One Synapse process; ``url``, ``register(...)``, ``limit(user)``, ``stop()``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.secret = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        self.admin: Account | None = None

    def start(self) -> Synapse:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "homeserver.yaml").write_text(_config(self.folder, self.port, self.secret))
        log_file = str(self.folder / "homeserver.log")
        (self.folder / "log.yaml").write_text(_LOG_CONFIG.replace("LOG_FILE", log_file))
        (self.folder / "signing.key").write_text(_signing_key())
        out = (self.folder / "stdout.log").open("wb")
        self.proc = subprocess.Popen(
            [str(synapse_python()), "-m", "synapse.app.homeserver", "-c", "homeserver.yaml"],
            cwd=self.folder,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        self._wait_healthy()
        self.admin = self.register("admin", admin=True)
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"Synapse exited at start:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Synapse did not answer in {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        text = ""
        for name in ("stdout.log", "homeserver.log"):
            path = self.folder / name
            if path.exists():
                text += "".join(path.read_text(errors="replace").splitlines(True)[-lines:])
        return text

    def register(self, name: str, *, admin: bool = False, limited: bool = False) -> Account:
        """A new account through the shared-secret admin API; exempt from rc_message unless
        ``limited``."""
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint, timeout=10).json()["nonce"]
        password = secrets.token_hex(8)
        signed = "\x00".join((nonce, name, password, "admin" if admin else "notadmin"))
        mac = hmac.new(self.secret.encode(), signed.encode(), hashlib.sha1)
        body = {
            "nonce": nonce,
            "username": name,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        resp = httpx.post(endpoint, json=body, timeout=30)
        resp.raise_for_status()
        data = resp.json()
        account = Account(data["user_id"], password, data["access_token"], data["device_id"])
        if not limited:
            self.unlimit(account.user_id, admin_token=account.access_token if admin else None)
        return account

    def _override(self, method: str, user_id: str, admin_token: str | None = None) -> None:
        token = admin_token or (self.admin.access_token if self.admin else "")
        url = f"{self.url}/_synapse/admin/v1/users/{user_id}/override_ratelimit"
        body = {"messages_per_second": 0, "burst_count": 0} if method == "POST" else None
        resp = httpx.request(
            method, url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        resp.raise_for_status()

    def unlimit(self, user_id: str, *, admin_token: str | None = None) -> None:
        """Exempt ``user_id`` from the message rate limit."""
        self._override("POST", user_id, admin_token)

    def limit(self, user_id: str) -> None:
        """Put ``user_id`` back under the config's low rc_message."""
        self._override("DELETE", user_id)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
