"""SIGINT/SIGTERM handlers for a block: the one way a run, the sweep loop and ``agentcollapse sweep``
install theirs. Real signals sent to this process (a handler that raises: tests/sweep/test_runner.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from agentcollapse.run.interrupts import INTERRUPTS, handling_interrupts, ignore_interrupts


def _handlers() -> dict:
    return {sig: signal.getsignal(sig) for sig in INTERRUPTS}


@pytest.mark.parametrize("signum", INTERRUPTS)
def test_the_handler_gets_the_signal_inside_the_block_and_the_old_handlers_come_back(signum):
    before = _handlers()
    received = []
    with handling_interrupts(lambda sig, frame: received.append(sig)):
        os.kill(os.getpid(), signum)
        time.sleep(0.05)  # Python runs the handler between bytecodes of the main thread
    assert received == [signum]
    assert _handlers() == before


def test_ignoring_inside_the_block_lasts_until_the_block_ends():
    before = _handlers()
    received = []
    with handling_interrupts(lambda sig, frame: received.append(sig)):
        ignore_interrupts()
        os.kill(os.getpid(), signal.SIGINT)  # ignored: an interruption being recorded is not cut short
        time.sleep(0.05)
        assert _handlers() == {sig: signal.SIG_IGN for sig in INTERRUPTS}
    assert received == []
    assert _handlers() == before


def test_off_the_main_thread_nothing_is_installed():
    """signal.signal refuses any thread but the main one: the block runs with the handlers as they are."""
    before = _handlers()
    seen = {}

    def body():
        with handling_interrupts(lambda sig, frame: None):
            seen["inside"] = _handlers()
            ignore_interrupts()
            seen["ignored"] = _handlers()

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert seen == {"inside": before, "ignored": before}
    assert _handlers() == before
