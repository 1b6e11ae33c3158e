"""All parity-fixture components. Importing this module fills common.REGISTRY (file name -> builder).

Groups: layers.py (dense layers), moe.py (MoE-LayerNorm, routers, aux losses, capacity, MoE FFN, LoRA),
ttmm.py (sparse merging weights, LoRA merge, bisecting k-means), optim.py (SGD / Adam / AdamW)."""
import layers  # noqa: F401
import moe  # noqa: F401
import optim  # noqa: F401
import ttmm  # noqa: F401
from common import REGISTRY, build, evaluate, gradcheck_case  # noqa: F401

__all__ = ["REGISTRY", "build", "evaluate", "gradcheck_case", "layers", "moe", "optim", "ttmm"]
