"""``agentcollapse <command> [hydra overrides]``: one entry point for every job.

Commands:
  train       train one run, or a sweep with -m (Hydra multirun)
  sweep       a sweep file from sweeps/ with JOBS workers on one study (make sweep; --help)
  base-model  (re)build the tiny warm-started policy for env=... and print its held-out success
  mi-check    roll out one batch and print Std(RV)/Mean(RV) with a reading (docs/method.md section 5)
  doctor      check the environment: versions, cache dir, tiny model build, wandb mode, disk
  export-checkpoint RUN_DIR
              turn a trainer=fsdp run's sharded checkpoint into one file (resumable in one process)

Overrides are Hydra's: ``agentcollapse train env=sokoban algorithm=ppo filter=rv_top_p``.
Print the composed config without running: ``agentcollapse train --cfg job``.
"""

from __future__ import annotations

import os
import sys

from agentcollapse.errors import UserError

COMMANDS = ("train", "sweep", "base-model", "mi-check", "doctor", "export-checkpoint")
# The commands that run a model: from the command line each starts again under tcmalloc where the
# machine has it (run.allocator: the same numbers, ~5% faster and ~10% smaller SmolLM2 runs).
MODEL_COMMANDS = ("train", "sweep", "base-model", "mi-check")
PRINT_ONLY = {"-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "--version"}  # Hydra's flags that run nothing


def main(argv: list[str] | None = None) -> None:
    from_command_line = argv is None  # a caller in this process (a test) keeps the process it has
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return
    command, rest = argv[0], argv[1:]
    if from_command_line and command in MODEL_COMMANDS and not PRINT_ONLY.intersection(rest):
        from agentcollapse.run.allocator import restart_under_tcmalloc

        restart_under_tcmalloc("agentcollapse.cli.main", argv)
    try:
        if command == "train":
            from agentcollapse.cli.train import main as train_main

            train_main(rest)
        elif command == "sweep":
            from agentcollapse.cli.sweep import sweep

            sweep(rest)
        elif command == "base-model":
            from agentcollapse.cli.tools import base_model

            base_model(rest)
        elif command == "mi-check":
            from agentcollapse.cli.tools import mi_check

            mi_check(rest)
        elif command == "export-checkpoint":
            from agentcollapse.cli.tools import export_checkpoint

            export_checkpoint(rest)
        elif command == "doctor":
            from agentcollapse.run.doctor import doctor

            sys.exit(doctor(rest))
        elif os.environ.get("LOCAL_RANK", "0") != "0":
            # A DDP rank that Lightning relaunched from `python -m agentcollapse.cli.main train ...`
            # with the train command's arguments only.
            from agentcollapse.cli.train import main as train_main

            train_main(argv)
        else:
            raise UserError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)} (see agentcollapse --help)")
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl+C outside a run or a sweep's loop (each records itself and exits 130)
        print("interrupted by SIGINT", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
