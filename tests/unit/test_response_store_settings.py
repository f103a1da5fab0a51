"""The Responses store's settings on the command line: ``--responses_store_max_age`` in seconds or
with a unit, and the settings that cannot work (a password file that cannot be read, a URL libpq
cannot parse) stopping ``ovserve serve`` before any model loads, with a message and no secret."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from ovserve.__main__ import build_parser, flag_values, main, settings_from_flags
from ovserve.settings.schema import ServerSettings


def settings_with(tiny_llm: Path, *argv: str) -> ServerSettings:
    args = build_parser().parse_args(["serve", "--model_path", str(tiny_llm), "--model_name", "m", *argv])
    return settings_from_flags(flag_values(args, environ={}))


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("3600", 3600.0), ("90m", 5400.0), ("12h", 43200.0), ("30d", 2592000.0), ("1.5d", 129600.0), ("0", None)],
)
def test_max_age_is_seconds_or_a_number_with_a_unit_and_0_is_no_limit(
    tiny_llm: Path, given: str, seconds: float | None
) -> None:
    assert settings_with(tiny_llm, "--responses_store_max_age", given).responses_store_max_age_s == seconds


def test_max_age_defaults_to_openais_30_days_and_none_turns_it_off(tiny_llm: Path) -> None:
    assert settings_with(tiny_llm).responses_store_max_age_s == 30 * 24 * 3600
    assert settings_with(tiny_llm, "--responses_store_max_age", "none").responses_store_max_age_s is None
    with pytest.raises(ValidationError, match="is not a duration"):
        settings_with(tiny_llm, "--responses_store_max_age", "a month")
    with pytest.raises(ValidationError):
        settings_with(tiny_llm, "--responses_store_max_age", "-5")


def serve_refused(
    tiny_llm: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *argv: str
) -> str:
    """What ``ovserve serve`` says on stderr when it refuses to start (exit status 2, no traceback)."""
    with caplog.at_level(logging.DEBUG):
        assert main(["serve", "--model_path", str(tiny_llm), "--model_name", "m", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Traceback" not in caplog.text
    return err + caplog.text


def test_a_password_file_that_cannot_be_read_stops_the_start_with_a_message(
    tiny_llm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    url = "postgresql://ovserve@db.example/chat"
    missing = tmp_path / "secret" / "password"
    said = serve_refused(
        tiny_llm, capsys, caplog, "--responses_store", url, "--responses_store_password_file", str(missing)
    )
    assert f"--responses_store_password_file: cannot read {missing}: No such file or directory" in said


def test_a_url_libpq_cannot_parse_stops_the_start_without_showing_its_password(
    tiny_llm: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    said = serve_refused(tiny_llm, capsys, caplog, "--responses_store", "postgresql://ovserve:pw-83f1c2@[::1/chat")
    assert "--responses_store: not a PostgreSQL URL libpq can read" in said and "pw-83f1c2" not in said
