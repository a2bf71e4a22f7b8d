"""The memory budget's arithmetic: what a model counts (its report, else its folder's size,
else the catalogue's) and whether one more would pass the bounds."""

from __future__ import annotations

from pathlib import Path

from omni.catalogue import GB
from omni.service.budget import Budget, footprint, on_disk, reported


class Reporting:
    path = ""  # nothing on disk to measure

    def __init__(self, memory_bytes: int | None) -> None:
        self.memory_bytes = memory_bytes


class FromFolder:
    memory_bytes = None  # it reports nothing

    def __init__(self, path: str) -> None:
        self.path = path


def test_a_model_counts_its_report_else_its_folder_else_the_catalogue() -> None:
    assert footprint(Reporting(5 * GB), 3 * GB, 2 * GB) == 5 * GB
    assert footprint(Reporting(None), 3 * GB, 2 * GB) == 3 * GB  # weights not loaded yet
    assert footprint(FromFolder("/m/w"), None, 2 * GB) == 2 * GB
    assert footprint(None, None, None) == 0  # a default not fetched yet, not loaded
    assert reported(Reporting(7)) == 7 and reported(FromFolder("/m/w")) is None


def test_the_folder_a_model_was_loaded_from_is_measured(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "config.json").write_text("{}")
    assert on_disk(FromFolder(str(tmp_path))) == 1002
    assert on_disk(FromFolder(str(tmp_path / "config.json"))) == 2  # a .gguf: one file
    assert on_disk(FromFolder(str(tmp_path / "gone"))) is None  # a repo id: nothing here
    assert on_disk(FromFolder("")) is None  # never the working directory
    assert on_disk(Reporting(7)) is None  # it names no folder


def test_one_more_model_passes_the_memory_or_the_count() -> None:
    budget = Budget(memory=6 * GB)
    assert not budget.over([2 * GB, 2 * GB], 2 * GB)  # 6 of 6: it fits
    assert budget.over([2 * GB, 2 * GB], 2 * GB + 1)
    assert not budget.over([], 9 * GB)  # larger than the budget: alone, it loads
    counted = Budget(memory=64 * GB, count=2)
    assert counted.over([1, 1], 1) and not counted.over([1], 1)
    assert not Budget().over([9 * GB] * 9, 9 * GB)  # no bound at all


def test_what_is_taken_reads_in_gb() -> None:
    assert Budget(8 * GB).describe([2 * GB, GB // 2]) == "2 loaded, 2.5 of 8.0 GB"
    assert Budget(count=2).describe([GB]) == "1 loaded, 1.0 GB"
