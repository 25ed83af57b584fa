"""models.cache.cached_build: the one way a cache entry (tiny policy, warm start, converted SmolLM2) is
built: once, under a lock, and never left half-built."""

from __future__ import annotations

import threading
import time

import pytest

from agentcollapse.models.cache import cached_build


def _writer(calls: list[int], pause: float = 0.0):
    def build(tmp):
        calls.append(1)
        (tmp / "weights.bin").write_bytes(b"w" * 10)
        time.sleep(pause)
        (tmp / "meta.json").write_text("{}")

    return build


def test_built_once_then_found(tmp_path):
    calls: list[int] = []
    target = tmp_path / "entry"
    assert cached_build(target, _writer(calls), marker="meta.json") == target
    assert cached_build(target, _writer(calls), marker="meta.json") == target
    assert calls == [1] and (target / "weights.bin").read_bytes() == b"w" * 10
    assert sorted(p.name for p in tmp_path.iterdir()) == [".entry.lock", "entry"]  # no temporary dir left


def test_force_builds_again_over_the_old_entry(tmp_path):
    calls: list[int] = []
    target = tmp_path / "entry"
    cached_build(target, _writer(calls), marker="meta.json")
    (target / "stale").write_text("x")
    cached_build(target, _writer(calls), marker="meta.json", force=True)
    assert calls == [1, 1] and not (target / "stale").exists()


def test_a_failed_build_leaves_no_entry_and_no_temporary_dir(tmp_path):
    def broken(tmp):
        (tmp / "weights.bin").write_bytes(b"half")
        raise RuntimeError("out of memory")

    target = tmp_path / "entry"
    with pytest.raises(RuntimeError, match="out of memory"):
        cached_build(target, broken, marker="meta.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".entry.lock"]
    calls: list[int] = []
    cached_build(target, _writer(calls), marker="meta.json")  # the next try builds it whole
    assert calls == [1] and (target / "meta.json").exists()


def test_concurrent_builders_build_once(tmp_path):
    calls: list[int] = []
    target = tmp_path / "entry"
    threads = [threading.Thread(target=cached_build, args=(target, _writer(calls, 0.2)), kwargs={"marker": "meta.json"}) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and (target / "meta.json").exists()
