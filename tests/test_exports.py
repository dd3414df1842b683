"""The public surface: what users and other packages may import, pinned so that changes are deliberate."""

import hop
import hop.aggregates
import shuffle


def test_hop_public_api() -> None:
    assert sorted(hop.__all__) == ["Job", "Step"]
    assert sorted(hop.aggregates.__all__) == [
        "Aggregate",
        "Count",
        "CountDistinct",
        "Max",
        "Mean",
        "Min",
        "Sum",
        "TopK",
        "as_aggregate",
    ]


def test_shuffle_exports_resolve() -> None:
    assert sorted(shuffle.__all__) == sorted(set(shuffle.__all__)), "no duplicates"
    for name in shuffle.__all__:
        assert getattr(shuffle, name) is not None, name
    assert {"MapOutputBuffer", "RunStore", "FoldingRunStore", "SpillPusher", "FlowController"} <= set(shuffle.__all__)
