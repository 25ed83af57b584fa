"""A sweep worker without training, for the shared-storage tests: ``python -m tests.sweep.fake_worker
<storage url|-> <sweep dir> <worker name>`` serves the study until the grid is done; each "run" writes
a record whose value is its seed."""

from __future__ import annotations

import sys
import time

from agentcollapse.records import RunRecorder
from agentcollapse.sweep.outcome import Outcome
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.space import parse_space
from agentcollapse.sweep.study import SweepStudy

SPACE = {"algorithm.kl_coef": "0.0,0.01,0.02", "seed": "0,1,2,3"}


def main(storage: str, sweep_dir: str, worker: str) -> None:
    settings = SweepSettings(storage=None if storage == "-" else storage)
    study = SweepStudy(settings, sweep_dir, parse_space(SPACE, []), worker=worker).open()
    while (got := study.ask()) is not None:
        trial, params = got
        rec = RunRecorder(study.trial_dir(trial.number))
        rec.log(0, {"val/success_rate": 0.0})
        rec.log(1, {"val/success_rate": float(params["seed"])})
        time.sleep(0.1)
        rec.write_summary("finished", reason="done")
        study.tell(trial, Outcome.from_run(study.trial_dir(trial.number), settings))
        study.report.write_csv()
    study.report.write_csv()


if __name__ == "__main__":
    main(*sys.argv[1:4])
