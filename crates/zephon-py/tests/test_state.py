"""State that reshards: a state_dict taken at one dp size continues the run exactly at another,
in rank processes launched as torchrun launches them, and equals the `zephon` command's steps."""

from __future__ import annotations

import copy

import pytest

import zephon_rs
from conftest import cli_fingerprints, combine_hash_logs, fingerprints, run_ranks, text_spec


def merged(states: list[dict]) -> dict:
    """What a checkpoint store holds after every rank saved: the replicated entry once, every
    rank's lanes."""
    assert all(s["zephon"] == states[0]["zephon"] for s in states), "the replicated entry differs between ranks"
    lanes = {}
    for s in states:
        assert not set(s["lanes"]) & set(lanes), "two ranks saved one lane"
        lanes.update(s["lanes"])
    return {"zephon": states[0]["zephon"], "lanes": lanes}


def test_the_state_dict_is_one_replicated_entry_and_one_per_lane(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=1, dp_world_size=4)
    sd = loader.state_dict()
    assert set(sd) == {"zephon", "lanes"}
    assert set(sd["zephon"]) == {"format", "step", "lanes", "run"}
    assert sd["zephon"]["format"] == zephon_rs.CHECKPOINT_FORMAT and sd["zephon"]["step"] == 0
    assert sorted(sd["lanes"]) == ["lane_000002", "lane_000003"]
    assert all(isinstance(v, bytes) and v.startswith(b"ZEPHON-LANE\n") for v in sd["lanes"].values())
    assert sd["zephon"]["run"].startswith(b"ZEPHON-RUN\n")
    next(loader), next(loader)
    assert loader.state_dict()["zephon"]["step"] == 2


@pytest.mark.parametrize("w1,w2", [(4, 2), (2, 8), (1, 4), (8, 1)])
def test_a_state_dict_resumes_exactly_at_another_dp_size(spec_file, w1, w2):
    reference = fingerprints(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1), 7)
    first = [zephon_rs.Loader(spec_file, dp_rank=r, dp_world_size=w1) for r in range(w1)]
    for _ in range(4):
        for l in first:
            next(l)
    sd = merged([l.state_dict() for l in first])
    second = [zephon_rs.Loader(spec_file, dp_rank=r, dp_world_size=w2) for r in range(w2)]
    for l in second:
        # As a store hands a rank the keys of its own template: the replicated entry, its lanes.
        template = l.state_dict()
        l.load_state_dict({"zephon": sd["zephon"], "lanes": {k: sd["lanes"][k] for k in template["lanes"]}})
        assert l.position == 4
    got = []
    for _ in range(3):
        got.append(zephon_rs.step_fingerprint([d for l in second for d in next(l).lane_digests()]))
    assert got == reference[4:]


def test_a_state_dict_that_does_not_fit_is_a_checkpoint_error(tmp_path, data, spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    next(loader), next(loader)
    sd = loader.state_dict()

    def refused(state, match):
        with pytest.raises(zephon_rs.CheckpointError, match=match):
            zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1).load_state_dict(state)

    missing = copy.deepcopy(sd)
    del missing["lanes"]["lane_000005"]
    refused(missing, "lane\\(s\\) 5")
    empty = copy.deepcopy(sd)
    empty["lanes"]["lane_000003"] = b""
    refused(empty, "lanes.lane_000003 is empty")
    damaged = copy.deepcopy(sd)
    raw = bytearray(damaged["lanes"]["lane_000001"])
    raw[-1] ^= 1
    damaged["lanes"]["lane_000001"] = bytes(raw)
    refused(damaged, "lane_000001: checksum mismatch")
    newer = copy.deepcopy(sd)
    newer["zephon"]["format"] = 99
    refused(newer, "format 99")
    refused({"model": {}}, "no \"zephon\" entry")
    # Another run's state: another seed.
    other = tmp_path / "other.toml"
    other.write_text(text_spec(data, seed=8))
    foreign = zephon_rs.Loader(other, dp_rank=0, dp_world_size=1)
    next(foreign)
    refused(foreign.state_dict(), "different run.*seed")
    # Another lane count.
    wide = tmp_path / "wide.toml"
    wide.write_text(text_spec(data, lanes=16))
    with pytest.raises(zephon_rs.CheckpointError, match="8 lanes, this loader.s spec has 16"):
        zephon_rs.Loader(wide, dp_rank=0, dp_world_size=1).load_state_dict(sd)


def test_rank_processes_match_the_cli_and_resume_through_state_at_another_size(tmp_path, spec_file):
    """Each rank its own process with torchrun's variables: W = 1, 2, 4 give the `zephon`
    command's steps; W = 4 saves its state after 3 steps and W = 2 continues from it."""
    cli = cli_fingerprints(spec_file, 6, tmp_path)
    for w in [1, 2, 4]:
        logs = run_ranks(w, {"spec": str(spec_file), "steps": 6}, tmp_path, f"w{w}")
        assert combine_hash_logs(logs) == cli, w
    saved = tmp_path / "state"
    first = run_ranks(4, {"spec": str(spec_file), "steps": 3, "save": str(saved)}, tmp_path, "save")
    then = run_ranks(2, {"spec": str(spec_file), "steps": 3, "load": str(saved)}, tmp_path, "load")
    assert combine_hash_logs(first) + combine_hash_logs(then) == cli


def test_snapshot_every_keeps_checkpointable_states_only_where_asked(spec_file):
    reference = fingerprints(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1), 6)
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1, snapshot_every=2)
    next(loader), next(loader)
    sd = loader.state_dict()
    next(loader)
    with pytest.raises(zephon_rs.Error, match="snapshots every 2 steps"):
        loader.state_dict()
    resumed = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    resumed.load_state_dict(sd)
    assert fingerprints(resumed, 4) == reference[2:]
    with pytest.raises(ValueError, match="at least 1"):
        zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1, snapshot_every=0)
