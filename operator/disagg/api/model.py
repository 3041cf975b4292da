"""`spec.model`: which model is served and where its weights come from."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .cel import CelRule, at_most_one_of, with_cel
from .types import ObjectName, Quantity, SecretKeyRef

ModelFamily = Literal["auto", "dense", "moe", "mla", "hybrid-ssm"]


class PersistentVolumeClaimSource(ApiModel):
    claim_name: ObjectName = Field(description="Name of an existing PersistentVolumeClaim holding the model.")
    sub_path: Annotated[str, Field(max_length=1024)] | None = Field(
        default=None, description="Path inside the volume to mount instead of its root."
    )


class HostPathSource(ApiModel):
    path: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^/")] = Field(
        description="Absolute directory on every GPU node that holds the model (for pre-staged weights)."
    )


class HuggingFaceSource(ApiModel):
    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token (exposed to engines as HF_TOKEN). Needed for gated "
        "models.",
    )
    cache_size: Quantity | None = Field(
        default=None,
        description="Size limit of the per-pod download cache (an emptyDir). Unset means no limit.",
    )


class ModelStorage(ApiModel):
    """Where engines find the weights. Set at most one source; with none, weights download from Hugging Face."""

    model_config = with_cel(
        CelRule(
            rule=at_most_one_of("persistentVolumeClaim", "hostPath", "huggingFace"),
            message="spec.model.storage: set only one of persistentVolumeClaim, hostPath or huggingFace",
        )
    )

    persistent_volume_claim: PersistentVolumeClaimSource | None = Field(
        default=None,
        description="Mount an existing PVC (read-only) shared by every pool. It may hold a Hugging Face cache "
        "(model.name is then a repository id) or plain directories (model.name is then an absolute path under "
        "mountPath).",
    )
    host_path: HostPathSource | None = Field(
        default=None, description="Mount a directory of the node (read-only), for weights staged on every node."
    )
    hugging_face: HuggingFaceSource | None = Field(
        default=None, description="Download from Hugging Face into a per-pod cache (the default)."
    )
    mount_path: Annotated[str, Field(min_length=2, max_length=256, pattern=r"^/")] = Field(
        default="/models",
        description="Where the storage is mounted in engine containers. HF_HOME points here, so a Hugging Face "
        "cache on the volume is used without downloading.",
    )
    offline: bool = Field(
        default=False,
        description="Set HF_HUB_OFFLINE=1 so engines never contact the Hugging Face Hub (for pre-staged weights).",
    )


class ModelSpec(ApiModel):
    """The served model: its name, revision, storage and family."""

    name: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^\S+$")] = Field(
        description="Hugging Face repository id (e.g. Qwen/Qwen3-32B) or an absolute path inside the model "
        "storage mount."
    )
    served_name: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^\S+$")] | None = Field(
        default=None,
        description="Name clients use in the OpenAI API `model` field. Defaults to model.name.",
    )
    revision: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^\S+$")] | None = Field(
        default=None, description="Model revision (branch, tag or commit) to load."
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow custom model code from the repository (vLLM --trust-remote-code)."
    )
    family: ModelFamily = Field(
        default="auto",
        description="Architecture family; selects presets and compatibility rules. hybrid-ssm sets "
        "VLLM_SSM_CONV_STATE_LAYOUT=DS and keeps the hybrid KV cache manager on; mla allows heterogeneous TP "
        "freely; moe allows expert parallelism. auto infers the family from well-known model names and "
        "otherwise applies no preset.",
    )
    storage: ModelStorage = Field(
        default_factory=ModelStorage, description="Where engines find the weights (shared by every pool)."
    )
