"""Lightning glue: the RL module (``module``), the rollout-hook contract (``hooks``), the callbacks that
watch (``CollapseDiagnostics``, ``GradBucketAnalysis``) and intervene (``SNRFilter``,
``CollapseEarlyStopping``), and the infrastructure callbacks of every run (``callbacks``). The math they call lives in ``algorithms``,
``filtering`` and ``diagnostics``, free of Lightning."""

from agentcollapse.lightning.callbacks import IterationCheckpoint, LineProgress, RunRecordCallback, StopTogether
from agentcollapse.lightning.diagnostics import CollapseDiagnostics
from agentcollapse.lightning.early_stopping import CollapseEarlyStopping
from agentcollapse.lightning.grad_buckets import GradBucketAnalysis
from agentcollapse.lightning.hooks import HookResult, RolloutHook, Selection
from agentcollapse.lightning.module import AgentRLModule
from agentcollapse.lightning.snr_filter import SNRFilter

__all__ = [
    "AgentRLModule",
    "CollapseDiagnostics",
    "CollapseEarlyStopping",
    "GradBucketAnalysis",
    "HookResult",
    "IterationCheckpoint",
    "LineProgress",
    "RolloutHook",
    "RunRecordCallback",
    "SNRFilter",
    "Selection",
    "StopTogether",
]
