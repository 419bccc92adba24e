"""Hostile but realistic input, through the real command line: every mistake is one line on stderr,
``harness: error: ...``, naming the field and the file (and line) where known, and a non-zero exit;
never a traceback, never a started Ray or a trained step.

One table: each row writes its files under the test's directory and gives the command line and
what the error line must name. The commands run in this process (``harness.cli.main``), where Ray
and training are fenced off (``_no_ray_no_training``): every row must be refused before either.
Then the input that must be accepted (byte-order marks) and the warnings that are not errors.
A study run from a directory whose name is no URI is tests/study/test_resume_trust.py (it needs Ray).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.driver import _orchestrate
from harness.training.loop import Trainer

# The study every row varies. Line numbers: name 1, model 2, data 3, train 4, seeds 5, storage_path 6.
STUDY = """\
name: {name}
model: {{name: tiny, max_length: 32}}
data: {{conversations: 30, max_dev_queries: 8, max_test_queries: 8}}
train: {{steps: 4, batch_size: 8, eval_every: 2, device: cpu}}
seeds: {seeds}
storage_path: {storage}
"""


def study(tmp: Path, *, name: str = "s", seeds: str = "[1, 2]", storage: str = "runs", extra: str = "",
          text: str | None = None) -> Path:
    path = tmp / "study.yaml"
    path.write_text(text if text is not None else STUDY.format(name=name, seeds=seeds, storage=storage) + extra,
                    encoding="utf-8")
    return path


def config_file(tmp: Path, text: str | bytes) -> Path:
    path = tmp / "cfg.yaml"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)  # type: ignore[operator]
    return path


# A small TREC-style data set (harness.data._readers): one query per split, every file given.
TREC = {
    "docs.tsv": "d1\tthe cat sat\nd2\ta dog ran\nd3\tbirds fly\nd4\tfish swim\n",
    "train.queries.tsv": "q1\tcats\n", "train.qrels": "q1 0 d1 1\n",
    "train.run": "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 3 t\n",
    "dev.queries.tsv": "q3\tbirds\n", "dev.qrels": "q3 0 d3 1\n", "dev.run": "q3 Q0 d3 1 2 t\nq3 Q0 d4 2 1 t\n",
    "test.queries.tsv": "q4\tfish\n", "test.qrels": "q4 0 d4 1\n", "test.run": "q4 Q0 d4 1 9 t\nq4 Q0 d1 2 1 t\n",
}


def trec(tmp: Path, encoding: str = "utf-8", **files: str) -> Path:
    d = tmp / "trec"
    d.mkdir(exist_ok=True)
    for name, text in {**TREC, **files}.items():
        (d / name).write_text(text, encoding=encoding)
    return d


def trec_study(tmp: Path, **files: str) -> Path:
    data = trec(tmp, **files)
    return study(tmp, text=STUDY.format(name="t", seeds="[1]", storage="runs").replace(
        "data: {conversations: 30, max_dev_queries: 8, max_test_queries: 8}", f"data: {{source: trec, path: '{data}'}}"))


def unwritable(tmp: Path) -> Path:
    """A directory no one here can make anything in: a read-only one, or for root (whom file
    modes do not stop) sysfs."""
    if os.geteuid() == 0:
        if not Path("/sys/kernel").is_dir():
            pytest.skip("running as root without /sys: no directory here is unwritable")
        return Path("/sys")
    d = tmp / "read-only"
    d.mkdir()
    d.chmod(0o555)
    return d


def a_file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("not a directory\n")
    return path


class _RunsCode:
    """Unpickling this runs a shell command: a checkpoint someone else wrote."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch '{self.marker}'",)


@dataclass(frozen=True)
class Row:
    """``make(tmp)`` writes the row's files and returns (argv, fragments the error line names).
    ``alone``: the error is all of stderr (no progress line may come before it)."""

    id: str
    make: Callable[[Path], tuple[list[str], list[str]]]
    alone: bool = True


def _trec_dir_study(tmp: Path, cmd: str, **files: str) -> tuple[list[str], list[str]]:
    p = trec_study(tmp, **files)
    return [cmd, str(p)] + (["--no-model"] if cmd == "validate" else []), []


def _rows() -> list[Row]:
    rows: list[Row] = []

    def add(id_: str, alone: bool = True) -> Callable[[Callable[[Path], tuple[list[str], list[str]]]], None]:
        def deco(make: Callable[[Path], tuple[list[str], list[str]]]) -> None:
            rows.append(Row(id_, make, alone))
        return deco

    # 1. Paths and URIs built from user input: a URI that is no URI is refused at load; a SQLite
    # store path that SQLAlchemy and MLflow would read differently is refused before it is used.
    for cmd in ("validate", "run"):
        @add(f"storage-uri-with-a-space-{cmd}")
        def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str]]:
            p = study(tmp, storage="'s3://bucket/my runs'")
            return [cmd, str(p)], [f"{p}:6:", "storage_path", "%20"]

    @add("sqlite-store-under-a-directory-with-a-question-mark")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        odd = tmp / "why?" / "sub"
        odd.mkdir(parents=True)
        os.chdir(odd)  # the default store, ./mlruns, is under it (the fixture restores the directory)
        return ["validate", str(study(tmp)), "--no-model"], ["tracking URI", "'?'"]

    # 2. Names are names, never paths.
    for cmd in ("validate", "run", "submit"):
        @add(f"study-name-that-is-a-path-{cmd}")
        def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str]]:
            p = study(tmp, name="../../escape")
            extra = ["--address", "http://127.0.0.1:9", "--tracking-uri", "http://127.0.0.1:9",
                     "--skip-tracking-check"] if cmd == "submit" else []
            return [cmd, str(p), *extra], [f"{p}:1:", "name", "'../../escape'", "letters, digits"]

    # --driver-gpus went to the job server as JSON: nan and inf are no JSON numbers.
    for gpus in ("nan", "inf", "-inf", "-1"):
        @add(f"submit-driver-gpus-{gpus}")
        def _(tmp: Path, gpus: str = gpus) -> tuple[list[str], list[str]]:
            return ["submit", str(study(tmp)), "--address", "http://127.0.0.1:9", "--tracking-uri",
                    "http://127.0.0.1:9", "--skip-tracking-check", f"--driver-gpus={gpus}"], [
                        "--driver-gpus must be a finite number >= 0", gpus]

    @add("config-name-that-is-a-path")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        p = study(tmp, extra="configs:\n  - name: ls/../../x\n    set: {smoothing.method: LS}\n")
        return ["validate", str(p), "--no-model"], [f"{p}:8:", "configs[0].name", "'ls/../../x'"]

    @add("train-experiment-name-that-is-a-path")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        return ["train", "--set", "model.name=tiny", "--experiment", "../elsewhere"], [
            "experiment name", "'../elsewhere'"]

    # 3. Seeds are numpy's: integers in [0, 2**32).
    for seeds, line_of in (("[1, -1]", "-1"), ("[4294967296]", "4294967296")):
        @add(f"study-seed-{line_of}")
        def _(tmp: Path, seeds: str = seeds, bad: str = line_of) -> tuple[list[str], list[str]]:
            p = study(tmp, seeds=seeds)
            return ["validate", str(p), "--no-model"], [f"{p}:5:", "seeds", bad, "4294967295"]

    @add("study-teacher-seed-negative")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        p = study(tmp, extra="curriculum: {teacher_seed: -3}\n")
        return ["validate", str(p), "--no-model"], [f"{p}:7:", "curriculum.teacher_seed", "-3"]

    @add("train-seed-flag-negative")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        return ["train", "--no-mlflow", "--set", "model.name=tiny", "--seed", "-1"], ["--seed", "-1"]

    @add("train-config-seed-over-2-32")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        cfg = config_file(tmp, "model: {name: tiny}\ntrain:\n  steps: 4\n  seed: 4294967296\n")
        return ["train", "--no-mlflow", "--config", str(cfg)], [f"{cfg}:4:", "train.seed"]

    # 4. Tracebacks before: files that are not UTF-8, malformed --set values, unwritable places.
    latin1 = "name: s\ndescription: caf\u00e9 cr\u00e8me\nseeds: [1]\n".encode("latin-1")
    for cmd in ("validate", "run"):
        @add(f"study-file-not-utf8-{cmd}")
        def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str]]:
            p = tmp / "study.yaml"
            p.write_bytes(latin1)
            return [cmd, str(p)], [f"{p}:2:", "not UTF-8"]

    @add("train-config-not-utf8")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        cfg = config_file(tmp, b"model: {name: tiny}\n# r\xe9sum\xe9\n")
        return ["train", "--no-mlflow", "--config", str(cfg)], [f"{cfg}:2:", "not UTF-8"]

    @add("jobs-env-file-not-utf8")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        env = tmp / "cluster.env"
        env.write_bytes("HARNESS_CACHE=/data\n# caf\u00e9\n".encode("latin-1"))
        return ["jobs", "list", "--address", "http://127.0.0.1:9", "--env-file", str(env)], [
            f"{env}:2:", "env file", "not UTF-8"]

    @add("jobs-token-file-not-utf8")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        tok, env = tmp / "token", tmp / "cluster.env"
        tok.write_bytes(b"abc\n\xff\xfe\n")
        env.write_text(f"RAY_AUTH_TOKEN_PATH={tok}\n")
        return ["jobs", "list", "--address", "http://127.0.0.1:9", "--env-file", str(env)], [
            f"RAY_AUTH_TOKEN_PATH={tok}", "line 2", "not UTF-8"]

    for cmd in ("run", "train"):
        @add(f"set-value-malformed-yaml-{cmd}")
        def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str]]:
            argv = ["run", str(study(tmp))] if cmd == "run" else ["train", "--no-mlflow"]
            return [*argv, "--set", "cascade.exits=[2, 4"], ["--set cascade.exits=[2, 4", "malformed YAML"]

    @add("table-from-csv-not-utf8")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        csv = tmp / "results.csv"
        csv.write_bytes("config,seed,metric,value\nbase,1,map,0.5\nr\u00e9sum\u00e9,1,map,0.6\n".encode("latin-1"))
        return ["table", "--from", str(csv)], [f"{csv}:3:", "not UTF-8"]

    for cmd in ("validate", "run"):
        @add(f"storage-path-unwritable-{cmd}")
        def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str]]:
            p = study(tmp, storage=f"'{unwritable(tmp) / 'runs'}'")
            return [cmd, str(p)], [f"{p}:6:", "storage_path", "not writable"]

        @add(f"storage-path-under-a-file-{cmd}")
        def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str]]:
            f = a_file(tmp)
            p = study(tmp, storage=f"'{f / 'runs'}'")
            return [cmd, str(p)], [f"{p}:6:", "storage_path", f"{f} is a file"]

    @add("tracking-store-under-a-file")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        f = a_file(tmp)
        return ["validate", str(study(tmp)), "--no-model", "--tracking-uri", f"sqlite:///{f}/mlflow.db"], [
            "tracking URI", str(f), "is a file"]

    # 5. Keys given twice: YAML keeps the last without a word.
    @add("study-key-twice")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        p = study(tmp, extra="seeds: [3]\n")
        return ["validate", str(p), "--no-model"], [f"{p}:7:", "'seeds'", "first at line 5"]

    @add("study-nested-key-twice")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        p = study(tmp, extra="curriculum:\n  pacing: root_n\n  delta: 0.3\n  pacing: linear\n")
        return ["run", str(p)], [f"{p}:10:", "'curriculum.pacing'", "first at line 8"]

    @add("train-config-key-twice")
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        cfg = config_file(tmp, "model.name: tiny\ntrain.steps: 4\ntrain.steps: 40\n")
        return ["train", "--no-mlflow", "--config", str(cfg)], [f"{cfg}:3:", "'train.steps'", "first at line 2"]

    # 6. Data checked before Ray starts: an empty dev or test split is refused naming its file.
    @add("trec-dev-split-empty-run", alone=False)  # run reports the study's start before the data
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        p = trec_study(tmp, **{"dev.queries.tsv": "", "dev.qrels": "", "dev.run": ""})
        return ["run", str(p)], [str(tmp / "trec" / "dev.queries.tsv"), "no queries", "dev split"]

    @add("trec-test-split-without-run-lines", alone=False)  # data stats reports what it reads
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        d = trec(tmp, **{"test.run": "\n"})
        return ["data", "stats", "--source", "trec", "--path", str(d)], [str(d / "test.run"), "no run lines"]

    # 7. A checkpoint is plain data: one that would run code as it loads is refused, unrun.
    @add("train-resume-from-a-checkpoint-that-runs-code", alone=False)  # train reports the data it loads
    def _(tmp: Path) -> tuple[list[str], list[str]]:
        d = tmp / "ckpt"
        d.mkdir()
        torch.save({"step": 1, "payload": _RunsCode(tmp / "ran")}, d / "trainer.pt")
        return ["train", "--no-mlflow", "--set", "model.name=tiny", "--set", "model.max_length=32",
                "--set", "data.conversations=30", "--resume", "--checkpoint-dir", str(d)], [
                    str(d / "trainer.pt"), "refused", "run code"]

    return rows


ROWS = _rows()


@pytest.fixture(autouse=True)
def _no_ray_no_training(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every row must be refused before Ray starts or a step is trained; the default MLflow store
    and Tune storage go under the test's directory."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input reached Ray or training")

    monkeypatch.setattr(_orchestrate, "init_ray", refuse)
    monkeypatch.setattr(Trainer, "run", refuse)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_refused_in_one_line(row: Row, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, fragments = row.make(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    errors = [ln for ln in lines if ln.startswith("harness: error:")]
    assert rc != 0 and len(errors) == 1 and lines[-1] == errors[0], err
    if row.alone:
        assert lines == errors, err
    missing = [f for f in fragments if f not in errors[0]]
    assert not missing, f"{missing} not in {errors[0]!r}"
    assert not (tmp_path / "ran").exists()  # the checkpoint's command never ran


# --- accepted: byte-order marks, as spreadsheet programs write them --------------------------


def test_a_results_csv_with_a_byte_order_mark_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "results.csv"
    csv.write_text("config,seed,metric,value\nbase,1,map,0.5\nbase,2,map,0.52\nls,1,map,0.6\nls,2,map,0.61\n",
                   encoding="utf-8-sig")
    assert main(["table", "--from", str(csv), "--format", "csv"]) == 0, capsys.readouterr().err
    assert "ls" in capsys.readouterr().out


@pytest.mark.parametrize("source", ["trec", "msdialog"])
def test_data_files_with_a_byte_order_mark_are_read(source: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    if source == "trec":
        d = trec(tmp_path, encoding="utf-8-sig")
    else:
        d = tmp_path / "msd"
        d.mkdir()
        for name in ("train.tsv", "valid.tsv", "test.tsv"):
            (d / name).write_text("1\thow do I reset it\tsafe mode\n0\thow do I reset it\treboot\n",
                                  encoding="utf-8-sig")
    assert main(["data", "stats", "--source", source, "--path", str(d)]) == 0, capsys.readouterr().err
    assert "harness: error" not in capsys.readouterr().err


# --- warned, not refused: a split on which every ranking scores the same ---------------------


@pytest.mark.parametrize(("qrels", "says"), [
    ("q4 0 d4 1\nq4 0 d1 1\n", "every candidate of the test split is relevant"),
    ("q4 0 d4 0\n", "the test split has no relevant document"),
])
def test_a_test_split_that_cannot_rank_is_warned_in_one_line(qrels: str, says: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = trec(tmp_path, **{"test.qrels": qrels})
    assert main(["data", "stats", "--source", "trec", "--path", str(d)]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("harness: warning:")]
    assert len(warnings) == 1 and says in warnings[0] and str(d) in warnings[0]
