"""``agentcollapse train --help``: every config group, its options and each field's one-line help,
generated from the schema (``config.schema``) and the files under ``conf/``, so it cannot go stale."""

from __future__ import annotations

import dataclasses
import typing

from agentcollapse.config import RunConfig, field_help, group_options
from agentcollapse.config.env_kwargs import ENV_KWARGS

USAGE = """usage: agentcollapse train [group=option ...] [key=value ...]
       agentcollapse train -m [sweep overrides]      (Hydra multirun)
       agentcollapse sweep --name grid --jobs 2      (a sweep file from sweeps/ with 2 workers: make sweep)
       agentcollapse train --cfg job                 (print the composed config, run nothing)
       agentcollapse train --hydra-help              (Hydra's own flags)

examples:
  agentcollapse train env=sokoban algorithm=ppo filter=rv_top_p trainer.max_steps=100
  agentcollapse train callbacks=with_grad_buckets diagnostics.grad_buckets_every=5
  agentcollapse train resume=true run_dir=runs/frozenlake/grpo/<time>
"""


def _section_help(prefix: str, schema: type, lines: list[str], indent: str = "  ") -> None:
    hints = typing.get_type_hints(schema)
    for name, default, text in field_help(schema):
        if dataclasses.is_dataclass(hints[name]):
            _section_help(f"{prefix}{name}.", hints[name], lines, indent)
            continue
        lines.append(f"{indent}{prefix + name:<{36 - len(indent)}} {text} [default {default}]")


def _env_kwargs_help(lines: list[str]) -> None:
    """Each built-in env's keywords (config/env_kwargs.py), as env.kwargs.<key>=<value> sets them."""
    for env, schema in ENV_KWARGS.items():
        lines.append(f"  env={env}:")
        _section_help("env.kwargs.", schema, lines, indent="    ")


def train_help() -> str:
    lines = [USAGE]
    hints = typing.get_type_hints(RunConfig)
    sections = [(name, default, text) for name, default, text in field_help(RunConfig)]
    lines.append("config groups and keys (a group's options are files under conf/<group>/):")
    for name, _, text in sections:
        if not dataclasses.is_dataclass(hints[name]):
            continue
        options = group_options(name)
        lines.append(f"\n{name}: {text}" + (f"  (options: {', '.join(options)})" if options else ""))
        _section_help(f"{name}.", hints[name], lines)
        if name == "env":
            _env_kwargs_help(lines)
    lines.append(f"\ncallbacks: what watches and what intervenes  (options: {', '.join(group_options('callbacks'))})")
    lines.append(f"\nexperiment: a full setting  (options: {', '.join(group_options('experiment')) or 'none'}; e.g. +experiment=<name>)")
    lines.append("\ntop-level keys:")
    for name, default, text in sections:
        if not dataclasses.is_dataclass(hints[name]) and name != "callbacks":
            lines.append(f"  {name:<34} {text} [default {default}]")
    return "\n".join(lines)
