"""``agentcollapse sweep``: run a sweep file with JOBS worker processes on one study.

Each worker is ``agentcollapse train -m --config-dir sweeps --config-name <name>`` on the same
``hydra.sweep.dir``, so they share its ``study.db`` (or the PostgreSQL storage in ``AGENTCOLLAPSE_STORAGE``):
each asks for the next trial, runs it, and tells its outcome. The machine's cores are split evenly:
every worker's runs get ``trainer.num_threads = cores // JOBS`` (at least 1; an explicit
``trainer.num_threads=N`` override wins) and ``OMP_NUM_THREADS`` to match. With JOBS > 1 the tiny base model is built (or found in the cache) once before the workers
start, so they do not build it side by side, and every output line is prefixed with its worker.
On a GPU machine each worker with JOBS > 1 gets one visible GPU (``CUDA_VISIBLE_DEVICES``, in turn): a
trial trains on one device, so JOBS = the number of GPUs runs one trial per GPU; with more workers than
GPUs, runs with a vLLM engine would share a card, and the launcher says so in one line.
SIGINT and SIGTERM are passed on to every worker, whose running trial is then recorded as interrupted.
Giving an existing sweep directory resumes it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from agentcollapse.errors import UserError
from agentcollapse.run.interrupts import handling_interrupts
from agentcollapse.sweep.storage import STORAGE_ENV, refuse_password

__all__ = [
    "available_cores",
    "default_sweep_dir",
    "gpu_sharing_warning",
    "keep_nice_in_new_session",
    "run_workers",
    "visible_gpus",
    "worker_command",
]

WORKER_ENV = "AGENTCOLLAPSE_SWEEP_WORKER"


def keep_nice_in_new_session(pid: int) -> None:
    """Give the scheduler group of ``pid``, a process started in its own session, our nice value.

    On Linux with autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``, on in most
    distributions) the CPU is shared between sessions first and by nice only inside one, and a new
    session's group starts at nice 0: without this, ``nice -n 19 make sweep`` would leave its trials an
    equal share against a terminal's work (measured: a one-thread busy loop took half of a 2-core trial's
    CPU). Where the file is missing (no autogroup, not Linux) nice already holds and nothing is done; where
    the task is in no autogroup (the file reads empty: autogroup off, or a container's cgroup), the write is
    harmless and nice holds too.
    """
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice <= 0:
        return
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        pass


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_sweep_dir(name: str, overrides: list[str]) -> str:
    env = next((o.split("=", 1)[1] for o in overrides if o.startswith("env=")), "frozenlake")
    return f"multirun/{env}/{name}-{time.strftime('%Y-%m-%d_%H-%M-%S')}"


def worker_command(name: str, overrides: list[str], sweep_dir: str, threads: int, config_dir: str = "sweeps") -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentcollapse.cli.main",
        "train",
        "-m",
        "--config-dir",
        config_dir,
        "--config-name",
        name,
        f"hydra.sweep.dir={sweep_dir}",
        f"trainer.num_threads={threads}",
        *overrides,
    ]


def _check_sweep_file(name: str, config_dir: str) -> None:
    if not (Path(config_dir) / f"{name}.yaml").exists():
        found = sorted(p.stem for p in Path(config_dir).glob("*.yaml"))
        raise UserError(f"no sweep {name!r} in {config_dir}/; sweeps: {', '.join(found) or 'none'} (make sweep SWEEP=<name>)")


def _build_base_model(overrides: list[str]) -> None:
    """Build the tiny policy for these overrides once (cached), before workers would race to build it."""
    from agentcollapse.models.policy import load_policy
    from agentcollapse.run.checks import compose_run
    from agentcollapse.run.quiet import silence_library_noise

    silence_library_noise()

    plain = [
        o for o in overrides if o.split("=", 1)[0].lstrip("+") in ("env", "cache_dir", "seed") or o.startswith(("model.", "model=", "env."))
    ]
    plain = [o for o in plain if "," not in o.split("=", 1)[-1]]  # a swept value is each trial's own
    cfg = compose_run(plain)
    if cfg.model.name == "tiny" and not cfg.model.path:
        load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=cfg.seed)


def visible_gpus() -> list[str]:
    """The CUDA devices this process sees, as ``CUDA_VISIBLE_DEVICES`` entries (none without CUDA)."""
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # a broken driver: no GPU to hand out
        return []
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if "CUDA_VISIBLE_DEVICES" in os.environ else [str(i) for i in range(count)]


def _swept(value: str) -> bool:
    return "," in value or value.startswith(("range(", "choice(", "interval(", "glob(", "tag("))


def gpu_sharing_warning(name: str, overrides: list[str], jobs: int, gpus: list[str], config_dir: str = "sweeps") -> str | None:
    """One line when ``jobs`` workers on ``gpus`` would put two vLLM engines (and their trainers) on one
    card: each engine takes ``rollout.vllm.gpu_memory_utilization`` of it, and the sweep's budget assumes
    one run per GPU. None when they would not, or when the sweep's config cannot be composed here (the
    workers then report it themselves)."""
    if jobs <= len(gpus) or not gpus:
        return None
    from agentcollapse.config.conf_files import CONF_DIR
    from agentcollapse.run.checks import compose_run

    plain = [o for o in overrides if not o.lstrip("+~").startswith("hydra.") and not _swept(o.partition("=")[2])]
    try:
        cfg = compose_run([*plain, f"hydra.searchpath=[file://{CONF_DIR}]"], config_dir=str(Path(config_dir).resolve()), config_name=name)
    except Exception:
        return None
    if cfg.rollout.engine != "vllm":
        return None
    return (
        f"warning: JOBS={jobs} workers on {len(gpus)} visible GPU(s) put two runs with their own vLLM engine "
        f"(rollout.vllm.gpu_memory_utilization={cfg.rollout.vllm.gpu_memory_utilization} each) and trainer on one card; "
        f"the budget assumes one run per GPU: use JOBS={len(gpus)} (each worker gets its own GPU)"
    )


def _pump(stream, prefix: str) -> None:
    for line in iter(stream.readline, ""):
        sys.stderr.write(prefix + line)
        sys.stderr.flush()
    stream.close()


def run_workers(
    name: str,
    overrides: list[str],
    jobs: int = 1,
    sweep_dir: str | None = None,
    config_dir: str = "sweeps",
    cores: int | None = None,
) -> int:
    """Run the sweep with ``jobs`` workers and return the exit status (the worst worker's)."""
    if jobs < 1:
        raise UserError(f"JOBS={jobs} must be >= 1")
    _check_sweep_file(name, config_dir)
    for override in overrides:  # before the resume command below prints it
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "hydra.sweeper.storage" and value not in ("", "null"):
            refuse_password(value, key.lstrip("+~"))
    cores = cores or available_cores()
    explicit = [o.split("=", 1)[1] for o in overrides if o.startswith("trainer.num_threads=")]
    threads = int(explicit[-1]) if explicit and explicit[-1].isdigit() else max(1, cores // jobs)
    sweep_dir = sweep_dir or default_sweep_dir(name, overrides)
    resuming = (Path(sweep_dir) / "study.db").exists() or (Path(sweep_dir) / "trials.csv").exists()
    print(
        f"sweep {name}: {sweep_dir} ({'resuming' if resuming else 'new'}), {jobs} worker(s) x {threads} thread(s) on {cores} core(s); "
        # the exact command: a resume needs the same overrides (env= included), or the study refuses it
        f"resume with: agentcollapse sweep --name {name} --jobs {jobs} --dir {sweep_dir} {shlex.join(overrides)}".rstrip()
        + (f" (and the same {STORAGE_ENV})" if os.environ.get(STORAGE_ENV) else ""),
        file=sys.stderr,
        flush=True,
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = worker_command(name, overrides, sweep_dir, threads, config_dir)
    gpus = visible_gpus() if jobs > 1 else []  # one worker sees every GPU and its runs take the first
    if jobs > 1:
        warning = gpu_sharing_warning(name, overrides, jobs, gpus, config_dir)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        _build_base_model(overrides)
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []

    def forward(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    with handling_interrupts(forward):
        for i in range(jobs):
            piped = jobs > 1  # one worker writes straight to our stdout/stderr (a live bar stays live)
            proc = subprocess.Popen(
                cmd,
                env={**env, WORKER_ENV: f"w{i + 1}", **({"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} if gpus else {})},
                stdout=subprocess.PIPE if piped else None,
                stderr=subprocess.STDOUT if piped else None,
                text=True,
                bufsize=1,
                start_new_session=True,  # a terminal's Ctrl+C reaches them through us, once
            )
            keep_nice_in_new_session(proc.pid)
            procs.append(proc)
            if piped:
                pump = threading.Thread(target=_pump, args=(proc.stdout, f"[w{i + 1}] "), daemon=True)
                pump.start()
                pumps.append(pump)
        codes = [p.wait() for p in procs]
        for pump in pumps:
            pump.join(timeout=5)
    code = max(codes, key=lambda c: (c != 0, abs(c)))
    return 128 - code if code < 0 else code  # a worker a signal ended: the shell's 128 + N, not 256 - N
