"""HTTPS for the server: one SSLContext whose certificate, key and client CA are reloaded from
their files when they change, so a rotated certificate (cert-manager renews before expiry) is
served to new connections without a restart. An unreadable or mismatched file keeps the previous
ones serving and is logged."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

log = logging.getLogger("rlscore.tls")


class ReloadingTLS:
    def __init__(self, cert_file: Path, key_file: Path, client_ca_file: Path | None = None):
        self.cert_file, self.key_file, self.client_ca_file = Path(cert_file), Path(key_file), client_ca_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple = ()
        self.load()  # the first load fails loudly: a server that cannot serve TLS must not start

    def _files(self) -> list[Path]:
        return [self.cert_file, self.key_file] + ([Path(self.client_ca_file)] if self.client_ca_file else [])

    def _current_stamp(self) -> tuple:
        return tuple((f.stat().st_mtime_ns, f.stat().st_size) for f in self._files())

    def load(self) -> None:
        stamp = self._current_stamp()
        # Load into a fresh context first: a bad pair must not reach the serving one.
        trial = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        trial.load_cert_chain(self.cert_file, self.key_file)
        self.context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            self.context.load_verify_locations(cafile=str(self.client_ca_file))
            self.context.verify_mode = ssl.CERT_REQUIRED
        self._stamp = stamp

    def reload_if_changed(self) -> bool:
        try:
            if self._current_stamp() == self._stamp:
                return False
            self.load()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error("TLS files not reloaded, the previous certificate stays in use: %s", exc)
            return False
        log.info("reloaded TLS certificate %s", self.cert_file)
        return True

    async def watch(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self.reload_if_changed()


# The serving process's context, found by the app's lifespan to start the reload loop.
ACTIVE: ReloadingTLS | None = None


def context_factory(_config, _default_factory) -> ssl.SSLContext:
    """uvicorn's ssl_context_factory (run in every worker): the context from RLSCORE_TLS_*."""
    global ACTIVE
    from suggestion_server.config import Settings

    settings = Settings()
    ACTIVE = ReloadingTLS(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
    return ACTIVE.context
