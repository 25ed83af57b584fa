"""What a config's model section is checked against before anything heavy loads: the preset names, the
dtype names, and the one-line advice for bringing weights to a machine with no network. No torch or
transformers here, so a bad ``model=`` or ``model.path=`` is answered at once."""

from __future__ import annotations

import os
import re
from pathlib import Path

MODEL_NAMES = ("tiny", "smollm2-135m", "hf")
DTYPE_NAMES = ("float32", "bfloat16", "float16")  # model.dtype; the policy maps each to torch's dtype

__all__ = ["DTYPE_NAMES", "MODEL_NAMES", "download_steps", "hf_path_message", "looks_like_hub_id", "weights_advice"]


def download_steps(hub_id: str | None, target: str | os.PathLike | None = None) -> str:
    if not hub_id:
        return "on a machine with network run `hf download <repo id> --local-dir <dir>`, copy <dir> here, then pass model.path=<dir>"
    target = target or f"/models/{hub_id.split('/')[-1]}"
    return f"on a machine with network run `hf download {hub_id} --local-dir {target}`, copy that directory here, then pass model.path={target}"


def weights_advice(hub_id: str | None, target: str | os.PathLike | None = None) -> str:
    """How to bring a model's weights to a machine that may have no network (a cluster node often has
    none): download them elsewhere, copy the directory over, point ``model.path`` at it."""
    return f"nothing downloads at run time: {download_steps(hub_id, target)}"


def looks_like_hub_id(text: str, hub_id: str | None) -> bool:
    """``model.path=Qwen/Qwen2.5-3B-Instruct``: a Hub id given where a local directory belongs."""
    return text == hub_id or (re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) is not None and not Path(text.split("/")[0]).exists())


def hf_path_message(path: str | os.PathLike | None, hub_id: str | None = None) -> str:
    """The one line for a missing model directory: what is wrong, then how to bring the weights (with a
    preset's ``hub_id``, its own download command; run by the user: nothing downloads at run time)."""
    if path is None:
        if hub_id:
            return f"this model preset needs its weights in a local directory, model.path=<dir>; {weights_advice(hub_id)}"
        return f"model=hf needs model.path=<local Hugging Face model directory>; {weights_advice(None)}"
    if looks_like_hub_id(str(path), hub_id):
        return f"model.path={path} does not exist (a Hub id is not downloaded: model.path is a local directory); {weights_advice(hub_id or str(path))}"
    return f"model.path={path} does not exist; {weights_advice(hub_id, path if hub_id else None)}"
