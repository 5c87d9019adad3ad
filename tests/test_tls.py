"""TLS: ``rediss://`` URLs with a client certificate, against a redis-server that requires one.

The CA, the server's and the client's certificates are made for the test with the openssl
command-line tool (a second CA, which signed nothing the server has, stands for a wrong
one). The server keeps its plain port too: only the tests' own inspecting client uses it;
everything under test connects to the TLS port.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from conftest import wait_for
from runtime_support import cogworker_env, started_workers

import cogworker
from cogworker import connection
from cogworker.local.server import RedisServer, free_port

pytestmark = pytest.mark.slow

JOBS_MODULE = textwrap.dedent(
    """
    import cogworker


    class TlsJob(cogworker.Job):
        name = "TlsJob"

        def perform(self, marker):
            cogworker.default_config().redis().set(f"test:ran:{marker}", self.jid)
    """
)


def make_certificates(directory: Path) -> dict[str, Path]:
    """A throw-away CA, a server certificate for 127.0.0.1 / localhost and a client
    certificate, both signed by the CA, and a second CA that signed neither."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN=cogworker test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
        )  # fmt: skip
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=cogworker test {name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr",
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        )  # fmt: skip
    for key in directory.glob("*.key"):
        os.chmod(key, 0o600)
    names = ("ca.crt", "other-ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    return {name: directory / name for name in names}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


class TlsServer:
    def __init__(self, server: RedisServer, tls_port: int, certs: dict[str, Path]) -> None:
        self.server = server
        self.tls_port = tls_port
        self.certs = certs
        self.admin = redis.Redis(port=server.port, decode_responses=True)  # the plain port

    def url(self, *, ca: str = "ca.crt", client_cert: bool = True) -> str:
        """The rediss:// URL a user writes: the CA to trust, and the client's certificate."""
        options = {"ssl_ca_certs": self.certs[ca]}
        if client_cert:
            options |= {
                "ssl_certfile": self.certs["client.crt"],
                "ssl_keyfile": self.certs["client.key"],
            }
        query = "&".join(f"{name}={quote(str(path))}" for name, path in options.items())
        return f"rediss://127.0.0.1:{self.tls_port}/0?{query}"

    def local_ports(self) -> dict[int, int]:
        """client id -> the server port it connected to, for every client but ``admin``."""
        mine = self.admin.client_id()
        return {
            int(entry["id"]): int(entry["laddr"].rpartition(":")[2])
            for entry in self.admin.client_list()
            if int(entry["id"]) != mine
        }


@pytest.fixture
def tls(certs: dict[str, Path], redis_server_factory: Any) -> Iterator[TlsServer]:
    tls_port = free_port()
    server = redis_server_factory(
        config_lines=[
            f"tls-port {tls_port}",
            f"tls-cert-file {certs['server.crt']}",
            f"tls-key-file {certs['server.key']}",
            f"tls-ca-cert-file {certs['ca.crt']}",
            "tls-auth-clients yes",
        ]
    )
    wrapped = TlsServer(server, tls_port, certs)
    try:
        yield wrapped
    finally:
        wrapped.admin.close()


@pytest.mark.needs_tls
def test_a_rediss_url_with_the_ca_and_a_client_certificate_connects(tls: TlsServer) -> None:
    config = cogworker.Config(redis_url=tls.url())  # validated: every option is taken
    client = config.redis()
    try:
        client.set("over", "tls")
        assert tls.admin.get("over") == "tls"
        held = client.connection_pool.get_connection()
        try:
            assert isinstance(held, connection.SSLConnection)  # cogworker's: no command retry
            assert isinstance(held._sock, ssl.SSLSocket)
            assert held._sock.getpeercert()["subject"] == (
                (("commonName", "cogworker test server"),),
            )
        finally:
            client.connection_pool.release(held)
        assert set(tls.local_ports().values()) == {tls.tls_port}
        assert connection.redacted_url(tls.url()) == f"rediss://127.0.0.1:{tls.tls_port}/0"
    finally:
        config.close()


@pytest.mark.needs_tls
def test_without_a_client_certificate_the_server_refuses_the_connection(tls: TlsServer) -> None:
    client = connection.connect(tls.url(client_cert=False))
    try:
        # the server's alert, or (when it comes before the client reads) its closing
        with pytest.raises(redis.ConnectionError, match=r"certificate required|EOF occurred"):
            client.ping()
    finally:
        client.close()


@pytest.mark.needs_tls
def test_a_server_certificate_from_another_ca_is_refused(tls: TlsServer) -> None:
    client = connection.connect(tls.url(ca="other-ca.crt"))
    try:
        with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
            client.ping()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h/0?ssl_ca_certs=ca.crt", "URL option 'ssl_ca_certs' needs a rediss:// URL"),
        ("rediss://h/0?ssl_ca_cert=ca.crt", "unknown URL option 'ssl_ca_cert' (allowed: "),
        ("rediss://h/0?ssl_cert_reqs=always", "ssl_cert_reqs='always': use none, optional"),
        ("rediss://:pw@h/0?socket_timeout=1", "set the redis_socket_timeout option instead"),
        ("redis://h/0?retry_on_timeout=yes", "cogworker never re-sends a command"),
        ("rediss://h?ssl_password=secret&db=x", "Invalid value for 'db' in connection URL"),
        # what redis-py would read otherwise than written: the first of two, an empty value
        ("redis://:pw@h?db=1&db=2", "URL option 'db' is given twice"),
        (
            "rediss://h/0?ssl_password=secret&ssl_cert_reqs=bogus&ssl_cert_reqs=required",
            "URL option 'ssl_cert_reqs' is given twice",
        ),
        ("rediss://h/0?ssl_password=secret&ssl_ca_certs=", "URL option 'ssl_ca_certs' is empty"),
        ("redis://:pw@h/0?client_name", "URL option 'client_name' is empty"),
        ("rediss://h/0?ssl_check_hostname=flase", "ssl_check_hostname='flase': use true or"),
        # the database: the query's would win over the path's; /1/2 would be 12, /x ignored
        ("redis://:pw@h/1?db=2", "the database is given both in the path ('/1') and as ?db="),
        ("redis://:pw@h/0?db=0", "the database is given both in the path"),
        ("redis://:pw@h/1/2", "the path must be /<database number>, got '/1/2'"),
        ("redis://:pw@h/x", "the path must be /<database number>, got '/x'"),
    ],
)
def test_a_url_option_that_would_not_be_applied_is_refused(url: str, problem: str) -> None:
    with pytest.raises(cogworker.ConfigError) as raised:
        cogworker.Config(redis_url=url)
    message = str(raised.value)
    assert problem in message and "\n" not in message
    assert "secret" not in message and "pw" not in message


@pytest.mark.parametrize(
    ("url", "db"),
    [
        ("redis://h", 0),
        ("redis://h/", 0),
        ("redis://h/3", 3),
        ("redis://h/?db=4", 4),
        ("redis://h?db=5&socket_keepalive=yes", 5),
        ("unix:///run/redis.sock?db=6", 6),  # a unix:// path is the socket's, not a database
        ("rediss://h/7?ssl_check_hostname=false&ssl_cert_reqs=none", 7),
    ],
)
def test_a_url_that_says_its_database_once_is_taken(url: str, db: int) -> None:
    assert cogworker.Config(redis_url=url).redis_url == url
    client = connection.connect(url)
    try:
        assert client.connection_pool.connection_kwargs.get("db", 0) == db
    finally:
        client.close()


@pytest.mark.needs_tls
def test_a_worker_runs_a_job_over_tls(tls: TlsServer, tmp_path: Path) -> None:
    (tmp_path / "tls_jobs.py").write_text(JOBS_MODULE)
    (tmp_path / "worker.yml").write_text("heartbeat_interval: 0.2\npoll_interval: 0.2\n")
    url = tls.url()
    with started_workers(tmp_path) as workers:
        worker = workers.start(
            ["run", "-r", "tls_jobs", "-C", "worker.yml", "--redis-url", url], cogworker_env(url)
        )
        with cogworker.Client(cogworker.Config(redis_url=url)) as producer:
            jid = producer.push({"class": "TlsJob", "args": ["one"], "queue": "default"})
        wait_for(lambda: tls.admin.get("test:ran:one") == jid, timeout=15)
        assert worker.alive()
        # every connection the worker holds (pool, subscription, blocking fetch) is on TLS
        ports = tls.local_ports()
        assert len(ports) >= 3 and set(ports.values()) == {tls.tls_port}
        assert f"redis=rediss://127.0.0.1:{tls.tls_port}/0\n" in worker.output()
