"""`harness ui --host`: an address that is neither an IP address nor a host name is refused in one
line naming --host, before anything starts. `--host 999.1.1.1 --allow-remote` printed the UI's
addresses, started MLflow's server and ended 15 s later on its own ERROR lines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli import study as commands
from harness.errors import ConfigError, shown


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store the UI would serve: the host is what is refused, not a missing store."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("ui") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.mark.parametrize("host, why", [
    ("999.1.1.1", "it reads as an IPv4 address and is none (octet 999 (> 255) not permitted)"),
    ("1.2.3.4.5", "it reads as an IPv4 address and is none (expected 4 octets)"),
    ("bad host", "a name is dot-separated labels of at most 63 letters, digits, hyphens and underscores"),
    ("node.-lead.example", "a name is dot-separated labels of at most 63 letters, digits, hyphens and underscores"),
    ("a..b", "a name is dot-separated labels of at most 63 letters, digits, hyphens and underscores"),
    ("x" * 64, "a name is dot-separated labels of at most 63 letters, digits, hyphens and underscores"),
    ("x." * 2500, "a name is dot-separated labels of at most 63 letters, digits, hyphens and underscores"),
])
def test_a_bad_host_is_refused_before_anything_starts(store: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, host: str, why: str) -> None:
    def started(*_args: object, **_kwargs: object) -> int:
        raise AssertionError("the server was started")

    monkeypatch.setattr(commands, "run_forwarding_signals", started)
    uri = f"sqlite:///{store}"
    start = time.monotonic()
    assert main(["ui", "--tracking-uri", uri, "--host", host, "--allow-remote", "--port", "5999"]) == 2
    assert time.monotonic() - start < 5
    out, err = capsys.readouterr()
    assert out == ""  # no address printed for a server that never serves
    expected = f"harness: error: --host must be an IP address or a host name, got {shown(host)}; {why}"
    assert err.strip().splitlines() == [expected] and len(expected) < 250


def test_brackets_hold_an_ipv6_address_only() -> None:
    assert commands.listen_host("[::1]") == "::1"  # as the server binds it
    for host in ("[127.0.0.1]", "[localhost]"):
        with pytest.raises(ConfigError, match=r"^--host must be an IPv6 address inside \[brackets\], got "):
            commands.listen_host(host)


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1", "::", "localhost", "localhost.",
                                  "gpu-node-3.cluster.example.org", "db_1", "fe80::1%eth0",
                                  "0", "127.1", "1.2.3"])  # inet_aton's shorthands, which the server binds
def test_addresses_and_names_pass_as_given(host: str) -> None:
    assert commands.listen_host(host) == host
