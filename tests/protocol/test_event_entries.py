"""The pure splitting of an events entry that names several jobs (protocol §11)."""

from conveyor.protocol.events import entry_job_ids, job_attempts


def test_entry_job_ids_reads_ids_else_id() -> None:
    assert entry_job_ids({b"event": b"completed", b"ids": b"a b c"}) == [b"a", b"b", b"c"]
    assert entry_job_ids({b"event": b"completed", b"id": b"a"}) == [b"a"]
    assert entry_job_ids({b"event": b"paused"}) == []


def test_job_attempts_pairs_in_order_and_drops_what_does_not_pair() -> None:
    assert job_attempts("a b", "1 2") == [("a", "1"), ("b", "2")]
    assert job_attempts(b"a b", None) == [(b"a", None), (b"b", None)]
    assert job_attempts("a b", "1") == [("a", None), ("b", None)]
