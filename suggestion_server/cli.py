"""Console scripts: `rlscore-server` (and `python -m suggestion_server`)."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys


def main(argv: list[str] | None = None) -> int:
    from suggestion_server.config import Settings

    try:
        settings = Settings()
    except Exception as exc:  # pydantic's message names the variable
        print(f"rlscore-server: invalid configuration: {exc}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="rlscore-server", description="rlscore suggestion server. "
                                     "Everything else is configured by RLSCORE_* environment variables.")
    parser.add_argument("--host", default=settings.host)
    parser.add_argument("--port", type=int, default=settings.port)
    parser.add_argument("--workers", type=int, default=settings.workers)
    parser.add_argument("--log-level", default=settings.log_level)
    args = parser.parse_args(argv)
    if args.workers < 1 or not 0 < args.port < 65536:
        parser.error("--workers must be >= 1 and --port in 1..65535")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import uvicorn

    # Workers re-create the app (and the HTTP protocol its limits) from the same RLSCORE_* environment.
    os.environ.setdefault("RLSCORE_LOG_LEVEL", args.log_level)
    os.environ.setdefault("RLSCORE_HEADER_TIMEOUT_S", str(settings.header_timeout_s))
    os.environ.setdefault("RLSCORE_MAX_HEADER_BYTES", str(settings.max_header_bytes))
    from suggestion_server.http.http_protocol import BoundedHTTPProtocol

    if settings.prometheus_url and settings.prometheus_ca_file is not None:
        from suggestion_server.node_state.prometheus_source import certificate_check

        try:  # the reason now, not a traceback from every worker
            certificate_check(settings.prometheus_ca_file)
        except (OSError, ssl.SSLError) as exc:
            print(f"rlscore-server: RLSCORE_PROMETHEUS_CA_FILE {settings.prometheus_ca_file}: {exc}", file=sys.stderr)
            return 2
    tls = {}
    if settings.tls_cert_file is not None:
        from suggestion_server.http.tls import ReloadingTLS, context_factory

        try:  # fail here, with the reason, rather than in every worker
            ReloadingTLS(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
        except (OSError, ValueError) as exc:
            print(f"rlscore-server: cannot serve TLS: {exc}", file=sys.stderr)
            return 2
        tls = {"ssl_context_factory": context_factory}
    uvicorn.run("suggestion_server.app:create_app", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=args.log_level.lower(), access_log=False,
                http=BoundedHTTPProtocol, **tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
