"""A stream copy's epoch history (``cluster.epochs``): where a returning copy is cut back."""

from __future__ import annotations

from pathlib import Path

from sievemq.cluster.epochs import (
    FIRST,
    common_end,
    history_of,
    last_epoch,
    read_history,
    write_history,
)


def test_the_file_round_trips_and_a_copy_without_one_is_epoch_1(tmp_path: Path) -> None:
    assert read_history(tmp_path) == FIRST
    write_history(tmp_path, [(1, 0), (2, 900), (3, 800)])
    assert read_history(tmp_path) == [(1, 0), (2, 900), (3, 800)]
    assert (tmp_path / "epochs").read_text() == "1 0\n2 900\n3 800\n"
    assert history_of([[2, 900], [1, 0]]) == [(1, 0), (2, 900)]
    assert history_of(None) == FIRST


def test_the_epoch_of_the_last_chunk() -> None:
    assert last_epoch(FIRST, 0) == 0  # empty
    assert last_epoch([(1, 0), (2, 900)], 900) == 1  # epoch 2 wrote nothing yet
    assert last_epoch([(1, 0), (2, 900)], 950) == 2


def test_an_old_leader_keeps_what_the_new_leader_started_from() -> None:
    # a led epoch 1 to offset 1000; b won epoch 2 holding 900
    cluster = [(1, 0), (2, 900)]
    assert common_end(FIRST, cluster, 1000) == 900
    # a replica that lagged behind keeps all it has
    assert common_end(FIRST, cluster, 800) == 800
    # b, the leader of epoch 2, then replaced by c at 800 (c had not taken 800-950 from b)
    later = [(1, 0), (2, 900), (3, 800)]
    assert common_end([(1, 0), (2, 900)], later, 950) == 800
    assert common_end(FIRST, later, 1000) == 800
    # a copy that followed epoch 3's leader shares all of it
    assert common_end(later, later, 1200) == 1200


def test_a_copy_an_epoch_passed_by_offers_only_what_it_shares() -> None:
    # b led epoch 2 to 1000; c took epoch 3 at 950 and died; b, back, never followed c:
    # before it offers its tail it is cut to 950, whose last chunk epoch 2 wrote
    b_history, cluster = [(1, 0), (2, 900)], [(1, 0), (2, 900), (3, 950)]
    cut = common_end(b_history, cluster, 1000)
    assert cut == 950
    assert last_epoch(cluster, cut) == 2
    # if b then wins epoch 4 at 950, c's copy (epoch 3 to 1100) is cut back to 950 too
    assert common_end(cluster, [*cluster, (4, 950)], 1100) == 950
