"""A batch's progress on disk across runners: each appends to files of its own; what is done is
every runner's complete lines; the final files hold each custom_id once, even when a runner that
lost the batch wrote one more line after another took it over."""

from __future__ import annotations

import json
from pathlib import Path

from ovserve.dialects.openai.batches.lines import error_line, output_line
from ovserve.dialects.openai.batches.progress import ERRORS, OUTPUT, final, merge, own, recorded


def _write(path: Path, *lines: str) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write("".join(lines))


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["custom_id"] for line in path.read_text().splitlines()]


def test_what_is_done_is_every_runners_complete_lines_and_only_its_own_cut_line_is_removed(tmp_path: Path) -> None:
    _write(tmp_path / "output.jsonl", output_line("old", 200, {}))  # a server from before runner files
    _write(own(tmp_path, OUTPUT, "a"), output_line("a1", 200, {}), '{"id": "batch_req_x", "custom_')  # a died here
    b1 = output_line("b1", 200, {})
    _write(own(tmp_path, OUTPUT, "b"), b1, '{"id": "batch_req_y"')  # b's own, cut
    _write(own(tmp_path, ERRORS, "b"), output_line("b2", 400, {}))
    before = own(tmp_path, OUTPUT, "a").read_bytes()
    assert recorded(tmp_path, OUTPUT, "b") == {"old", "a1", "b1"}
    assert recorded(tmp_path, ERRORS, "b") == {"b2"}
    assert own(tmp_path, OUTPUT, "a").read_bytes() == before  # another runner's file is only read
    assert own(tmp_path, OUTPUT, "b").read_text() == b1  # b appends after a whole line
    assert own(tmp_path, OUTPUT, "a") != own(tmp_path, OUTPUT, "b")


def test_the_final_files_hold_each_custom_id_once(tmp_path: Path) -> None:
    _write(own(tmp_path, OUTPUT, "a"), output_line("x", 200, {"by": "a"}), output_line("y", 200, {"by": "a"}))
    # b took the batch over and answered y and z; a, stalled, still wrote z after (the fence's window).
    _write(own(tmp_path, OUTPUT, "b"), output_line("y", 200, {"by": "b"}), output_line("z", 200, {"by": "b"}))
    _write(own(tmp_path, OUTPUT, "a"), output_line("z", 200, {"by": "a"}), '{"cut')
    _write(own(tmp_path, ERRORS, "b"), output_line("x", 500, {}), error_line("w", "batch_expired", "late"))
    seen: set[str] = set()
    assert (merge(tmp_path, OUTPUT, seen), merge(tmp_path, ERRORS, seen)) == (3, 1)
    output = [json.loads(line) for line in final(tmp_path, OUTPUT).read_text().splitlines()]
    assert sorted(line["custom_id"] for line in output) == ["x", "y", "z"]
    assert _ids(final(tmp_path, ERRORS)) == ["w"]  # x answered already: its error is not a second answer
