"""Early stopping over configurations of different lengths, on real Ray Tune and MLflow, and a
damaged state file on ``--resume``.

One seed, one trial at a time in grid order (baseline, longer, diverging-lr), rung 0.5:
the baseline (10 steps) reads it at step 5, ``longer`` (``train.steps: 20``) at step 10, the
diverging configuration at step 5, by which time all three have a value at the rung, and it ranks
last: stopped. (Keyed by step, ``longer``'s value sat apart at step 10, the rung never had the
three fixed configurations, and early stopping silently stopped nothing.)

The finished study is then resumed over a truncated and a structurally wrong
``early_stopping.json``: each is refused in one line naming the file and the field, exit 2, no
traceback, with the state file and every configuration and seed run as they were (the study run
ends as after any refused resume, e.g. of a planted tuner.pkl); with the file restored, the resume
finishes, the stopped configuration still stopped."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.tracking import conventions as C
from tests.study.conftest import write_study


def _runs(client: MlflowClient, name: str) -> dict[str, tuple[str, str, int | None]]:
    exp = client.get_experiment_by_name(name)
    return {r.info.run_id: (r.data.tags.get(C.TAG_KIND, ""), r.info.status, r.info.end_time)
            for r in client.search_runs([exp.experiment_id], max_results=1000)}


def test_a_configuration_of_another_length_is_compared_and_a_damaged_state_is_refused(ray_root, capsys):
    path = write_study(ray_root, "es-lengths", data={"max_dev_queries": 16},
                       train={"steps": 10, "eval_every": 5, "lr": 3.0e-3}, seeds=[1], concurrency=1,
                       configs={"longer": {"train.steps": 20}, "diverging-lr": {"train.lr": 0.5}},
                       early_stopping={"rungs": [0.5], "reduction_factor": 2})
    uri = f"sqlite:///{ray_root / 'es-lengths.db'}"
    capsys.readouterr()
    assert main(["run", str(path), "--tracking-uri", uri]) == 0
    err = capsys.readouterr().err
    assert ("early stopping: 1 of 3 configuration(s) stopped (1 of 3 trials): diverging-lr (step 5); "
            "5 trial-steps saved of 40 (12%), 35 run") in err, err
    assert "ranks 3 of 3 configurations at rung 0.5 (step 5 of 10)" in err
    state = ray_root / "runs" / "es-lengths-fixed" / "early_stopping.json"
    good = state.read_text()
    saved = json.loads(good)
    # each configuration's value at rung 0.5, whatever step it read it at (longer: step 10)
    assert sorted((g["name"], list(g["values"])) for g in saved["groups"].values()) == [
        ("baseline", ["0.5"]), ("diverging-lr", ["0.5"]), ("longer", ["0.5"])]
    assert [s["name"] for s in saved["stopped"].values()] == ["diverging-lr"]

    client = MlflowClient(uri)
    before = _runs(client, "es-lengths")
    for body, field in (('{"version": 2, "settings": ', "not JSON (Expecting value"),
                        (json.dumps({**saved, "groups": {"x": {"bogus": 1}}}), "groups.x: missing key 'baseline'")):
        state.write_text(body)
        assert main(["run", str(path), "--tracking-uri", uri, "--resume"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.endswith("\n"), err
        assert err.splitlines()[-1].startswith(f"harness: error: early stopping state {state}: {field}"), err
        assert state.read_text() == body
        after = _runs(client, "es-lengths")
        # every configuration and seed run as it was; the study run as after any refused resume
        assert {k: v for k, v in after.items() if v[0] != C.KIND_STUDY} == {
            k: v for k, v in before.items() if v[0] != C.KIND_STUDY}
    state.write_text(good)
    assert main(["run", str(path), "--tracking-uri", uri, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "early stopping: 1 of 3 configuration(s) stopped (1 of 3 trials): diverging-lr (step 5)" in err
    assert {v[1] for v in _runs(client, "es-lengths").values() if v[0] == C.KIND_STUDY} == {"FINISHED"}
