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


def test_coordinator_surface() -> None:
    """``hop.coordinator`` is a package of one module per concern (``hop.coordinator.host``): the names the rest of
    the project imports from it resolve there, and the combined :class:`Coordinator` handles every message type it
    did as one module (a mixin left out of its bases would drop a concern's handlers without an import error)."""
    import hop.coordinator

    assert sorted(hop.coordinator.__all__) == sorted(set(hop.coordinator.__all__)), "no duplicates"
    for name in hop.coordinator.__all__:
        assert getattr(hop.coordinator, name) is not None, name
    handlers = {name for name in dir(hop.coordinator.Coordinator) if name.startswith("on_")}
    assert handlers == {
        *("on_cluster", "on_first_run", "on_heartbeat", "on_job", "on_jobs", "on_leaving", "on_map_checkpoint"),
        *("on_map_done", "on_map_split", "on_pipe_ready", "on_reduce_done", "on_reducer_ready", "on_register"),
        *("on_samples_at", "on_shutdown", "on_slot_free", "on_snapshot", "on_snapshot_done", "on_snapshots"),
        *("on_source_listening", "on_status", "on_stop_job", "on_stream_checkpoint", "on_stream_pause", "on_submit"),
        *("on_task_failed", "on_task_progress", "on_task_started", "on_task_status", "on_window_done"),
        *("on_windows", "on_windows_skipped", "on_workers"),
    }


def test_job_services_for_user_code() -> None:
    """What a job's own code may call on ``self`` besides the methods it defines (README, "What a job can define"):
    a service added or removed is a change of the public API."""
    from hop import Job

    assert {"increment_counter", "set_status"} <= {name for name in vars(Job) if not name.startswith("_")}
    job = Job()
    job.increment_counter("group", "name")
    assert callable(job.set_status)
