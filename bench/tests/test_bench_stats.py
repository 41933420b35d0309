"""The benchmarks' schedule and statistics (bench/common.py): what every recorded ratio rests on."""

import math

from bench.common import abba, bootstrap_ratio_ci, ratio_spread


def test_abba_mirrors_each_repeat_in_the_next():
    assert abba(["a", "b"], 4) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (3, "b"), (3, "a")]
    # Over two repeats every variant sits at every distance from the pair's middle alike.
    order = [v for _r, v in abba(["a", "b", "c"], 2)]
    assert order == ["a", "b", "c", "c", "b", "a"]


def test_the_bootstrap_interval_holds_the_median_and_narrows_with_more_pairs():
    few_num, few_den = [1.0, 1.3, 0.9, 1.1, 1.2], [1.0] * 5
    lo, hi = bootstrap_ratio_ci(few_num, few_den)
    assert lo <= 1.1 <= hi and lo >= 0.9 and hi <= 1.3
    many_num = few_num * 8
    lo2, hi2 = bootstrap_ratio_ci(many_num, [1.0] * len(many_num))
    assert hi2 - lo2 < hi - lo


def test_too_few_pairs_give_no_interval_and_the_spread_carries_it():
    lo, hi = bootstrap_ratio_ci([1.0, 2.0], [1.0, 1.0])
    assert math.isnan(lo) and math.isnan(hi)
    spread = ratio_spread([2.0, 2.2, 1.8, 2.1], [1.0, 1.0, 1.0, 1.0])
    assert spread["ci_lo"] <= spread["paired"] <= spread["ci_hi"] and spread["n"] == 4
