"""``agentrl.ranks``: the one answer to "which rank is this process?", before and after a process
group exists, without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrl import ranks


@pytest.mark.parametrize(
    ("env", "world", "main"),
    [
        (None, "4", True),
        ("0", "4", True),
        ("1", "4", False),
        ("3", "4", False),
        ("1", None, True),
        ("2", "1", True),
    ],
)
def test_before_a_process_group_rank_zero_is_read_from_the_environment(monkeypatch, env, world, main):
    """Under ``torchrun`` (``$WORLD_SIZE`` > 1) ``$RANK`` says; a single process is rank 0 even
    with a stray ``$RANK``."""
    for name, value in (("RANK", env), ("WORLD_SIZE", world)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert ranks.is_main() is main
    # sharding the work needs a joined group: without one this process does all of it
    assert (ranks.rank(), ranks.world_size()) == (0, 1)
    assert ranks.all_gather_objects({"a": 1}) == [{"a": 1}]
    ranks.barrier()


def test_the_preflight_and_the_trainer_ask_the_same_function():
    from agentrl.train import distributed, preflight

    assert preflight.is_main is ranks.is_main and distributed.is_main is ranks.is_main
    assert distributed.rank is ranks.rank and distributed.all_gather_objects is ranks.all_gather_objects


def test_asking_imports_no_torch():
    code = (
        "import sys; from agentrl import ranks; ranks.is_main(); ranks.rank(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_in_a_process_group_the_groups_rank_decides(monkeypatch):
    """A gloo group of one: rank 0 of the group is main whatever ``$RANK`` says."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists here")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "0")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert ranks.is_main() and (ranks.rank(), ranks.world_size()) == (0, 1)
        assert ranks.all_gather_objects(7) == [7]
    finally:
        dist.destroy_process_group()
