"""When a KV cache on disk is worth loading: the rule on given figures, the moving averages,
the defaults before prefill was measured, and the disk probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni.runtime.chat.kv_rates import Rates


def measured(gpu: bool = True) -> Rates:
    rates = Rates(gpu=gpu)
    rates.read(1_000_000_000, 1.0)  # 1 GB/s
    rates.prefilled(1000, 1.0)  # 1,000 tokens/s
    return rates


@pytest.mark.parametrize(
    ("tokens", "nbytes", "worth"),
    [
        (1000, 100_000_000, True),  # 0.1 s to load against 1 s to prefill
        (1000, 499_000_000, True),
        (1000, 500_000_000, False),  # half the prefill: not clearly faster
        (1000, 900_000_000, False),  # faster, but not by enough
        (10, 100_000_000, False),
    ],
)
def test_a_load_is_worth_it_under_half_the_prefill_time(
    tokens: int, nbytes: int, worth: bool
) -> None:
    assert measured().worth(tokens, nbytes) is worth
    assert measured(gpu=False).worth(tokens, nbytes) is worth  # figures decide, not the device


def test_without_a_prefill_figure_a_cpu_loads_and_a_gpu_does_not() -> None:
    for gpu in (True, False):
        rates = Rates(gpu=gpu)
        rates.read(1_000_000_000, 1.0)
        assert rates.worth(1000, 1000) is not gpu


def test_figures_are_moving_averages() -> None:
    rates = Rates(gpu=True, weight=0.5)
    rates.prefilled(100, 1.0)
    rates.prefilled(300, 1.0)
    assert rates.prefill_rate == 200.0
    rates.prefilled(0, 1.0)  # nothing measured: no change
    rates.prefilled(10, 0.0)
    assert rates.prefill_rate == 200.0
    rates.read(4096, 2.0)
    assert rates.read_rate == 2048.0


def test_the_probe_seeds_the_read_rate_and_leaves_no_file(tmp_path: Path) -> None:
    rates = Rates(gpu=False)
    rate = rates.probe(tmp_path)
    assert rate > 0 and rates.read_rate == rate
    assert list(tmp_path.iterdir()) == []
