"""``tools/gpu/prepare``: what it keeps in the wheel folder and how it counts what travels to the GPU
machine (no download here: the tests build the folders they count)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():  # type: ignore[no-untyped-def]
    path = ROOT / "tools" / "gpu" / "prepare"
    loader = importlib.machinery.SourceFileLoader("gpu_prepare", str(path))
    spec = importlib.util.spec_from_loader("gpu_prepare", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


prepare = _load()


def test_the_list_pins_one_version_of_each_and_nothing_the_image_has():
    pins = prepare.read_list()
    assert {"pydantic", "pydantic_core", "gymnasium", "bm25s"} <= set(pins)
    assert all(v and v[0].isdigit() for v in pins.values())
    # Installed by the GPU image (docs/gpu.md): carrying them would only add weight.
    assert not {"torch", "transformers", "numpy", "tokenizers", "safetensors", "accelerate"} & set(pins)
    text = (ROOT / "tools" / "gpu" / "wheels.txt").read_text()
    assert "litellm" not in text  # the LLM judge is not on the kit's paths (imported lazily)


def test_a_bad_line_names_its_file_and_line(tmp_path):
    bad = tmp_path / "w.txt"
    bad.write_text("# ok\npydantic==2.0\nbm25s>=1\n")
    with pytest.raises(SystemExit, match=r"w.txt:3: expected NAME==VERSION"):
        prepare.read_list(bad)


def test_prune_keeps_the_pinned_wheels_and_the_stamp_only(tmp_path):
    names = [
        "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl",
        "pydantic_core-2.41.0-cp312-cp312-manylinux2014_x86_64.whl",  # another version: two stop pip
        "Farama_Notifications-0.0.6-py3-none-any.whl",
        "selectolax-1.0.2-cp312-cp312-manylinux2014_x86_64.whl",  # not listed
        "kit.json",
        "notes.txt",
    ]
    for n in names:
        (tmp_path / n).write_text("x")
    gone = prepare.prune(tmp_path, {"pydantic_core": "2.50.5", "farama_notifications": "0.0.6"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[0], names[2], "kit.json"])
    assert sorted(gone) == sorted([names[1], names[3], "notes.txt"])


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/.whl/\n/runs/\n")
    (repo / "code.py").write_bytes(b"x" * 2**20)  # 1 MiB, untracked but not ignored: it travels
    (repo / "runs").mkdir()
    (repo / "runs" / "big.bin").write_bytes(b"x" * 3 * 2**20)  # ignored: it stays
    (repo / ".whl").mkdir()
    (repo / ".whl" / "a-1.0-py3-none-any.whl").write_bytes(b"x" * 2 * 2**20)  # carried
    return repo


def test_the_size_counts_the_tree_and_the_carried_wheels_not_ignored_files(tmp_path):
    repo = _repo(tmp_path)
    total, text = prepare.check_size(repo, [repo / ".whl"], limit_mib=64)
    assert total == pytest.approx(3.0, abs=0.01)
    assert "3.0 MiB of 64 (2.0 MiB of wheels" in text


def test_over_the_limit_it_fails_naming_the_largest(tmp_path):
    repo = _repo(tmp_path)
    with pytest.raises(
        SystemExit, match=r"over the limit; largest: \.whl/a-1\.0-py3-none-any\.whl \(2\.0 MiB\)"
    ):
        prepare.check_size(repo, [repo / ".whl"], limit_mib=2.5)


def test_this_checkout_travels_well_under_the_limit():
    """What the repository alone sends leaves room for the wheels (3.2 MiB on 2026-11-26)."""
    total, _ = prepare.check_size(ROOT, [], limit_mib=64)
    assert total < 32
