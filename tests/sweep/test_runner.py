"""The sweep loop's own code (between trials) is stopped by SIGINT/SIGTERM as a trial is: a SystemExit
with 128 + the signal number, which the loop records, instead of a traceback or an unrecorded death."""

from __future__ import annotations

import os
import signal
import time

import pytest

from agentcollapse.run.interrupts import INTERRUPTS, handling_interrupts
from agentcollapse.sweep.runner import _stop_the_sweep


@pytest.mark.parametrize("signum", INTERRUPTS)
def test_a_signal_between_trials_is_a_system_exit_and_the_handlers_come_back(signum):
    before = {sig: signal.getsignal(sig) for sig in INTERRUPTS}
    with pytest.raises(SystemExit) as info, handling_interrupts(_stop_the_sweep):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises before this returns
    assert info.value.code == 128 + signum
    assert {sig: signal.getsignal(sig) for sig in before} == before
