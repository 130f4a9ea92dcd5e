"""Faults, second round (7): the MLflow parent run belongs to the folder's ledger and recipe. On a shared
MLFLOW_TRACKING_URI, following a refusal's advice (`rm -rf OUT`, run the changed recipe) or simply starting over
gives the new ledger its own parent: no runs of two recipes under one parent, no `#2` names for first attempts."""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict

from mlflow.tracking import MlflowClient

from normbench.cli import main
from tests.conftest import TINY
from tests.faults.helpers import trials

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def test_a_new_ledger_on_a_shared_tracking_store_gets_a_parent_of_its_own(write_suite, tmp_path, capsys, monkeypatch,
                                                                          one_torch_thread):
    shared = f"sqlite:///{tmp_path / 'server.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", shared)
    out, path = tmp_path / "out", write_suite()
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    changed = write_suite(model={**TINY["model"], "embed_dim": 32})
    assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 2
    assert "delete the old results" in capsys.readouterr().err
    for _ in range(2):  # the advice followed, then the same recipe started over once more
        shutil.rmtree(out)
        assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 0

    client = MlflowClient(shared)
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], max_results=1000)
    parents = sorted((r for r in runs if r.data.tags.get("kind") == "leaderboard"), key=lambda r: r.info.start_time)
    assert len(parents) == 3
    assert [p.data.tags["recipe"] == parents[0].data.tags["recipe"] for p in parents] == [True, False, False]
    assert len({p.data.tags["ledger"] for p in parents}) == 3
    children = defaultdict(list)
    for r in runs:
        if r.data.tags.get("kind") != "leaderboard":
            children[r.data.tags["mlflow.parentRunId"]].append(r)
    assert set(children) == {p.info.run_id for p in parents}
    for p in parents:  # each parent: its ledger's cells, once each, finished, first attempts
        mine = children[p.info.run_id]
        assert Counter(r.data.tags["cell_id"] for r in mine) == Counter(CELLS)
        assert all(r.info.status == "FINISHED" and r.data.tags["attempt"] == "1" for r in mine)
        assert not [r.info.run_name for r in mine if "#" in r.info.run_name]
    embed = {p.info.run_id: {r.data.params["model.embed_dim"] for r in children[p.info.run_id]} for p in parents}
    assert [embed[p.info.run_id] for p in parents] == [{"16"}, {"32"}, {"32"}]  # no recipes mixed under one parent
    newest = {(r.data.tags["study"], int(r.data.tags["trial"])) for r in children[parents[-1].info.run_id]}
    assert {("run:tiny", t.number) for t in trials(out, "tiny")} == newest  # each run is its trial's (by its key)
    assert main(["sync", str(out)]) == 0  # and a sync of the newest folder adds nothing, leaves the others alone
    assert len(client.search_runs([client.get_experiment_by_name("tiny").experiment_id], max_results=1000)) == len(runs)
