"""`omni serve`'s access and default settings as a user gives them: keys from flags, the
environment and a key file; the refusal to expose a keyless server; a keyed server end to end
through the OpenAI SDK; the sampling defaults and chat-template arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import AuthenticationError, OpenAI

from omni.cli.access import access, image_hosts, is_loopback
from omni.cli.program import parser
from tests.test_cli import assert_one_line_error, omni, serving


def args_of(*argv: str) -> object:
    return parser().parse_args(["serve", *argv])


def test_keys_from_flags_environment_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nci:sk-ci-1\n\nsk-bare-2\nk3y=:with-colon\nops:sk-ops  admin\n")
    monkeypatch.setenv("OMNI_API_KEY", "sk-env-1, sk-env-2")
    gate = access(args_of("--api-key", "sk-flag", "--api-key-file", str(keys)))  # type: ignore[arg-type]
    for secret in ("sk-env-1", "sk-env-2", "sk-flag", "sk-ci-1", "sk-bare-2", "k3y=:with-colon"):
        assert gate.keys.owner(f"Bearer {secret}")
    assert gate.keys.owner("Bearer sk-ci-1") == "ci"
    assert gate.keys.owner("Bearer sk-bare-2").startswith("key-")
    assert gate.keys.owner("Bearer sk-ops") == "ops" and gate.keys.admins == {"ops"}
    assert len(gate.keys.keys) == 7


def test_an_unknown_key_flag_is_one_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("ci:sk-ci-1\nops:sk-ops root\n")
    result = omni("serve", "--api-key-file", str(keys), "--db", str(tmp_path / "x.db"))
    assert_one_line_error(result, "line 2: unknown flag 'root' (known: admin)")


def test_empty_key_in_a_file_is_one_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("ci:\n")
    result = omni("serve", "--api-key-file", str(keys), "--db", str(tmp_path / "x.db"))
    assert_one_line_error(result, "line 1: the key is empty")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1"])
def test_no_key_on_a_public_address_refuses_to_start(tmp_path: Path, host: str) -> None:
    db = tmp_path / "omni.db"
    result = omni("serve", "--host", host, "--db", str(db))
    assert_one_line_error(result, "--allow-no-auth")
    assert not db.exists()


def test_allow_no_auth_or_a_key_lets_it_start() -> None:
    assert access(args_of("--host", "0.0.0.0", "--allow-no-auth")).keys.keys == ()  # type: ignore[arg-type]
    assert access(args_of("--host", "0.0.0.0", "--api-key", "sk-1")).keys  # type: ignore[arg-type]


def test_bad_template_args_in_the_environment_are_a_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_CHAT_TEMPLATE_ARGS", "[1]")
    result = omni("serve", "--db", str(tmp_path / "x.db"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--chat-template-args" in result.stderr
    assert omni("db", "check", "--help").returncode == 0  # other commands unaffected


def test_image_hosts_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert image_hosts(args_of()).names == image_hosts(args_of()).networks == ()  # type: ignore[arg-type]
    monkeypatch.setenv("OMNI_ALLOW_IMAGE_HOSTS", "images.lan, 10.1.0.0/16")
    flags = ("--allow-image-hosts", "*.corp.test,[::1]", "--allow-image-hosts", "192.168.7.7")
    hosts = image_hosts(args_of(*flags))  # type: ignore[arg-type]
    assert hosts.names == ("images.lan", "*.corp.test")
    assert [str(n) for n in hosts.networks] == ["10.1.0.0/16", "::1/128", "192.168.7.7/32"]


def test_image_fetch_timeout_from_flag_and_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert args_of().image_fetch_timeout == 30  # type: ignore[attr-defined]
    monkeypatch.setenv("OMNI_IMAGE_FETCH_TIMEOUT", "12.5")
    assert args_of().image_fetch_timeout == 12.5  # type: ignore[attr-defined]
    assert args_of("--image-fetch-timeout", "3").image_fetch_timeout == 3  # type: ignore[attr-defined]
    result = omni("serve", "--image-fetch-timeout", "0", "--db", str(tmp_path / "x.db"))
    assert result.returncode == 2 and "--image-fetch-timeout" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_image_host_is_one_line(tmp_path: Path) -> None:
    result = omni("serve", "--allow-image-hosts", "10.0.0.0/33", "--db", str(tmp_path / "x.db"))
    assert_one_line_error(result, "--allow-image-hosts: '10.0.0.0/33' is neither")
    assert not (tmp_path / "x.db").exists()


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.2"))


def test_bad_chat_template_args_are_a_usage_error(tmp_path: Path) -> None:
    for bad in ("{nope", "[1]", '{"tools": []}'):
        result = omni("serve", "--chat-template-args", bad, "--db", str(tmp_path / "x.db"))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "--chat-template-args" in result.stderr
    assert not (tmp_path / "x.db").exists()


def test_a_keyed_server_end_to_end(tmp_path: Path, tiny_model_dir: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice:sk-alice-secret\n")
    flags = ("--api-key-file", str(keys), "--max-tokens", "3")
    with serving(tiny_model_dir, tmp_path / "omni.db", "warning", None, *flags) as (base, proc):
        with OpenAI(base_url=f"{base}/v1", api_key="sk-nope", max_retries=0) as nope:
            with pytest.raises(AuthenticationError):
                nope.models.list()
        with OpenAI(base_url=f"{base}/v1", api_key="sk-alice-secret", max_retries=0) as ok:
            r = ok.responses.create(input="hi")  # no cap asked: the server's --max-tokens
            assert r.usage is not None and r.usage.output_tokens == 3
            assert r.status == "incomplete"
        assert b"sk-alice-secret" not in (tmp_path / "omni.db").read_bytes()
    assert proc.returncode == 0
