"""A running batch's progress on disk: the lines its runners recorded, in its work directory
(``<files directory>/batches/<batch id>/``), and the output and error files made of them at the end.

Each runner that runs the batch -- one at a time, but a batch taken over after a replica died has
had two -- appends to files of its own: ``output.<runner>.jsonl`` and ``errors.<runner>.jsonl``
(:func:`own`; ``<runner>``, a digest of its name). No two processes ever append to one file, which
a shared volume (NFS) would not make safe; ``output.jsonl`` and ``errors.jsonl``, written by servers
before these, are read as one more runner's.

:func:`recorded` tells which ``custom_id`` are done: every complete line of every runner's files (a
last line a crash cut short is cut from this runner's own files, so that it appends after a whole
line, and skipped in another's). :func:`merge` makes the final files: every runner's lines of a
kind in one file, each ``custom_id`` once -- the first met (the runners' files in name order, each
in order; the output's before the errors') -- so a line a stalled runner wrote after its batch was
taken over (its lease's fence and its write are two steps) is not in the output twice. Blocking:
run them on a worker thread.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ovserve.dialects.openai.batches.lines import recorded_ids

OUTPUT, ERRORS = "output", "errors"


def own(work: Path, kind: str, runner: str) -> Path:
    """The file of ``kind`` (:data:`OUTPUT` or :data:`ERRORS`) that ``runner`` appends to."""
    return work / f"{kind}.{hashlib.sha256(runner.encode()).hexdigest()[:12]}.jsonl"


def final(work: Path, kind: str) -> Path:
    """The merged file of ``kind``, which becomes the batch's output or error file."""
    return work / f"{kind}.final"


def _files(work: Path, kind: str) -> list[Path]:
    return sorted(work.glob(f"{kind}*.jsonl"))


def recorded(work: Path, kind: str, runner: str) -> set[str]:
    """The ``custom_id`` of every complete line of ``kind`` any runner recorded."""
    mine = own(work, kind, runner)
    done: set[str] = set()
    for path in _files(work, kind):
        done |= recorded_ids(path, cut=path == mine)
    return done


def merge(work: Path, kind: str, seen: set[str]) -> int:
    """Write :func:`final` of ``kind``: each complete line whose ``custom_id`` is not in ``seen``
    (which gets it), in the order recorded; the number of lines written."""
    written = 0
    work.mkdir(parents=True, exist_ok=True)  # a batch cancelled before any line ran has none yet
    with final(work, kind).open("wb") as out:
        for path in _files(work, kind):
            with path.open("rb") as lines:
                for text in lines:
                    try:
                        custom_id = json.loads(text)["custom_id"] if text.endswith(b"\n") else None
                    except (ValueError, KeyError, TypeError):
                        custom_id = None  # a line a crash cut short
                    if isinstance(custom_id, str) and custom_id not in seen:
                        seen.add(custom_id)
                        out.write(text)
                        written += 1
    return written
