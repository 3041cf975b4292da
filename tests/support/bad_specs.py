"""One bad spec per validation rule: what each rule in `disagg.api.rules` (and each CEL rule of the CRD) must refuse,
with the field it must name and the fix it must give, and the nearest spec it must accept.

A case is a patch merged into a small valid DisaggDeployment. `cel` is the field path the API server names when
the CRD's CEL rules refuse the spec too (None: no CEL rule can see it; `schema_refusal` when the schema itself
does). `ok` is a neighbour of the bad spec on the
valid side of the same rule (usually the boundary), so a rule that refuses too much fails as surely as one that
refuses too little. tests/unit/api/test_rules.py holds the Python rules and the offline CEL evaluation to these
cases, e2e/test_cel_rules.py holds the real kube-apiserver to the CEL ones.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import celpy

BASE: dict[str, Any] = {
    "apiVersion": "disagg.dev/v1alpha1",
    "kind": "DisaggDeployment",
    "metadata": {"name": "bad"},
    "spec": {"model": {"name": "org/model"}},
}

HYBRID = {"model": {"name": "org/model", "family": "hybrid-ssm"}}
OPERATOR_SCALED = {"autoscaling": {"enabled": True, "maxReplicas": 4}}
SLOS = {"slo": {"ttftP90": "2s", "itlP90": "50ms"}}
CUSTOM = {"connector": "custom", "custom": {"connectorClass": "PluginConnector"}}
PEGAFLOW = {"type": "pegaflow", "pegaflow": {"server": {"image": "pegaflow:1"}}}
VLLM_ROUTER = {"frontend": {"router": {"implementation": "vllm-router"}}}


@dataclass(frozen=True)
class BadSpec:
    id: str
    spec: dict[str, Any]
    """Merged into BASE's spec: maps merge, anything else replaces."""
    path: str
    message: str
    """The start of the problem's message, specific to the rule."""
    fix: str
    """The start of the fix."""
    ok: dict[str, Any]
    """The nearest spec (also merged into BASE's spec) that passes this rule."""
    cel: str | None = None
    cel_message: str | None = None
    """A part of the CEL rule's message, when `cel` is set."""
    metadata: dict[str, Any] | None = None
    """Replaces BASE's metadata in the bad spec."""
    ok_metadata: dict[str, Any] | None = None
    """Replaces BASE's metadata in the valid neighbour."""
    schema_refusal: tuple[str, str] | None = None
    """(field path, message part) when the API server refuses the spec by its structural schema rather than CEL,
    e.g. a duplicate key of a list-map."""

    def document(self) -> dict[str, Any]:
        document = with_spec(self.spec)
        if self.metadata is not None:
            document["metadata"] = copy.deepcopy(self.metadata)
        return document

    def ok_document(self) -> dict[str, Any]:
        document = with_spec(self.ok)
        if self.ok_metadata is not None:
            document["metadata"] = copy.deepcopy(self.ok_metadata)
        return document


def merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(patch)


def with_spec(patch: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["spec"] = merge(document["spec"], patch)
    return document


def pools(prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if prefill is not None:
        found["prefill"] = prefill
    if decode is not None:
        found["decode"] = decode
    return found


CASES: list[BadSpec] = [
    BadSpec(
        "name-too-long",
        {},
        "metadata.name",
        "value is too long",
        "shorten it to at most 40 characters",
        ok={},
        metadata={"name": "n" * 41},
        ok_metadata={"name": "n" * 40},
        cel="",
        cel_message="metadata.name must be at most 40 characters",
    ),
    # -- storage, scheduling, resources ----------------------------------------------------------------------------
    BadSpec(
        "storage-two-sources",
        {"model": {"name": "org/model", "storage": {"hostPath": {"path": "/m"}, "huggingFace": {}}}},
        "spec.model.storage",
        "hostPath and huggingFace are set together",
        "keep exactly one storage source",
        ok={"model": {"name": "org/model", "storage": {"hostPath": {"path": "/m"}}}},
        cel="spec.model.storage",
        cel_message="set only one of persistentVolumeClaim, hostPath or huggingFace",
    ),
    BadSpec(
        "storage-all-three-sources",
        {
            "model": {
                "name": "org/model",
                "storage": {"persistentVolumeClaim": {"claimName": "m"}, "hostPath": {"path": "/m"}, "huggingFace": {}},
            }
        },
        "spec.model.storage",
        "persistentVolumeClaim and hostPath and huggingFace are set together",
        "keep exactly one storage source",
        ok={"model": {"name": "org/model", "storage": {"persistentVolumeClaim": {"claimName": "m"}}}},
        cel="spec.model.storage",
        cel_message="set only one of persistentVolumeClaim, hostPath or huggingFace",
    ),
    BadSpec(
        "topology-key-single-node",
        pools(decode={"scheduling": {"replicaTopologyKey": "zone"}}),
        "spec.decode.scheduling.replicaTopologyKey",
        "it keeps the pods of a multi-node replica together, and this pool has one node per replica",
        "set nodesPerReplica above 1",
        ok=pools(decode={"tensorParallel": 2, "nodesPerReplica": 2, "scheduling": {"replicaTopologyKey": "zone"}}),
        cel="spec.decode.scheduling.replicaTopologyKey",
        cel_message="it needs nodesPerReplica > 1",
    ),
    BadSpec(
        "claim-two-sources",
        pools(
            prefill={
                "resources": {"claims": [{"name": "c", "resourceClaimTemplateName": "t", "resourceClaimName": "n"}]}
            }
        ),
        "spec.prefill.resources.claims[0]",
        "a resource claim needs exactly one source",
        "set resourceClaimTemplateName",
        ok=pools(prefill={"resources": {"claims": [{"name": "c", "resourceClaimName": "n"}]}}),
        cel="spec.prefill.resources.claims[0]",
        cel_message="exactly one of resourceClaimTemplateName or resourceClaimName",
    ),
    BadSpec(
        "claim-no-source",
        pools(decode={"resources": {"claims": [{"name": "c"}]}}),
        "spec.decode.resources.claims[0]",
        "a resource claim needs exactly one source",
        "set resourceClaimTemplateName (a claim per pod) or resourceClaimName (one shared claim)",
        ok=pools(decode={"resources": {"claims": [{"name": "c", "resourceClaimTemplateName": "t"}]}}),
        cel="spec.decode.resources.claims[0]",
        cel_message="exactly one of resourceClaimTemplateName or resourceClaimName",
    ),
    BadSpec(
        "claim-name-twice",
        pools(
            decode={
                "resources": {
                    "claims": [{"name": "c", "resourceClaimName": "a"}, {"name": "c", "resourceClaimName": "b"}]
                }
            }
        ),
        "spec.decode.resources.claims[1].name",
        "claim name 'c' is used twice",
        "give every claim a name",
        schema_refusal=("spec.decode.resources.claims[1]", "Duplicate value"),
        ok=pools(
            decode={
                "resources": {
                    "claims": [{"name": "c", "resourceClaimName": "a"}, {"name": "d", "resourceClaimName": "b"}]
                }
            }
        ),
    ),
    # -- connector blocks ------------------------------------------------------------------------------------------
    *(
        BadSpec(
            f"{block}-block-with-{connector}",
            {"transfer": {"connector": connector, block: settings}},
            f"spec.transfer.{block}",
            f"set, but spec.transfer.connector is {connector}",
            f"remove spec.transfer.{block}, or set spec.transfer.connector to {wanted}",
            ok={"transfer": {"connector": wanted.split(" or ")[-1], block: settings}},
            cel=f"spec.transfer.{block}",
            cel_message=f"spec.transfer.{block} is set but the connector is not",
        )
        for block, settings, connector, wanted in (
            ("nixl", {"numThreads": 4}, "moriio", "nixl or nixl-push"),
            ("moriio", {"mode": "read"}, "nixl", "moriio"),
            ("mooncake", {"protocol": "tcp"}, "nixl-push", "mooncake"),
            ("lmcache", {"chunkSize": 256}, "mooncake", "lmcache"),
        )
    ),
    BadSpec(
        "custom-block-with-nixl",
        {"transfer": {"connector": "nixl", "custom": {"connectorClass": "PluginConnector"}}},
        "spec.transfer.custom",
        "set, but spec.transfer.connector is nixl",
        "remove spec.transfer.custom, or set spec.transfer.connector to custom",
        ok={"transfer": CUSTOM},
        cel="spec.transfer.custom",
        cel_message="spec.transfer.custom must be set exactly when spec.transfer.connector is custom",
    ),
    BadSpec(
        "custom-without-settings",
        {"transfer": {"connector": "custom"}},
        "spec.transfer.custom",
        "required when spec.transfer.connector is custom",
        "add spec.transfer.custom with connectorClass",
        ok={"transfer": CUSTOM},
        cel="spec.transfer.custom",
        cel_message="spec.transfer.custom must be set exactly when spec.transfer.connector is custom",
    ),
    BadSpec(
        "push-bidirectional",
        {"transfer": {"connector": "nixl-push", "nixl": {"bidirectional": {"enabled": True}}}},
        "spec.transfer.nixl.bidirectional.enabled",
        "bidirectional KV transfer works only in pull mode",
        "set spec.transfer.connector to nixl, or turn bidirectional off",
        ok={"transfer": {"connector": "nixl", "nixl": {"bidirectional": {"enabled": True}}}},
        cel="spec.transfer.nixl.bidirectional.enabled",
        cel_message="bidirectional transfer is pull-only",
    ),
    # -- parallelism -----------------------------------------------------------------------------------------------
    BadSpec(
        "push-decode-dcp",
        {"transfer": {"connector": "nixl-push"}, **pools(decode={"tensorParallel": 2, "decodeContextParallel": 2})},
        "spec.decode.decodeContextParallel",
        "connector nixl-push does not support decode context parallelism",
        "set it to 1, or use connector nixl",
        ok={"transfer": {"connector": "nixl"}, **pools(decode={"tensorParallel": 2, "decodeContextParallel": 2})},
        cel="spec.decode.decodeContextParallel",
        cel_message="connector nixl-push does not support decode context parallelism",
    ),
    BadSpec(
        "push-decode-pp",
        {"transfer": {"connector": "nixl-push"}, **pools(decode={"pipelineParallel": 2})},
        "spec.decode.pipelineParallel",
        "connector nixl-push does not support pipeline parallelism on the decode side",
        "set it to 1, or use connector nixl",
        ok={"transfer": {"connector": "nixl-push"}, **pools(prefill={"pipelineParallel": 2})},
        cel="spec.decode.pipelineParallel",
        cel_message="connector nixl-push does not support pipeline parallelism on decode",
    ),
    BadSpec(
        "hetero-tp-indivisible",
        pools(prefill={"tensorParallel": 4}, decode={"tensorParallel": 6}),
        "spec.decode.tensorParallel",
        "prefill TP 4 and decode TP 6 cannot exchange KV",
        "set decode tensorParallel to a multiple of 4, such as 4 or 8",
        ok=pools(prefill={"tensorParallel": 4}, decode={"tensorParallel": 8}),
        cel="spec.decode.tensorParallel",
        cel_message="heterogeneous TP needs the larger tensorParallel to be a multiple of the smaller one",
    ),
    BadSpec(
        "hetero-tp-indivisible-prefill-larger",
        pools(prefill={"tensorParallel": 6}, decode={"tensorParallel": 4}),
        "spec.decode.tensorParallel",
        "prefill TP 6 and decode TP 4 cannot exchange KV",
        "set prefill tensorParallel to a multiple of 4, such as 4 or 8",
        ok=pools(prefill={"tensorParallel": 8}, decode={"tensorParallel": 4}),
        cel="spec.decode.tensorParallel",
        cel_message="heterogeneous TP needs the larger tensorParallel to be a multiple of the smaller one",
    ),
    BadSpec(
        "gpus-not-splitting-over-nodes",
        pools(prefill={"tensorParallel": 4, "nodesPerReplica": 3}),
        "spec.prefill.nodesPerReplica",
        "4 GPUs per replica (tensorParallel 4 x pipelineParallel 1 x prefillContextParallel 1 x dataParallel 1 = 4) "
        "do not split evenly across 3 nodes",
        "choose nodesPerReplica that divides the GPUs per replica",
        ok=pools(prefill={"tensorParallel": 4, "nodesPerReplica": 2}),
        cel="spec.prefill.nodesPerReplica",
        cel_message="must split evenly across nodesPerReplica",
    ),
    BadSpec(
        "gpus-per-node-mismatch",
        pools(decode={"tensorParallel": 8, "nodesPerReplica": 2, "gpusPerNode": 8}),
        "spec.decode.gpusPerNode",
        "8 GPUs per node x 2 nodes != 8 GPUs per replica",
        "set gpusPerNode to 4, or remove it",
        ok=pools(decode={"tensorParallel": 8, "nodesPerReplica": 2, "gpusPerNode": 4}),
        cel="spec.decode.gpusPerNode",
        cel_message="must equal gpusPerNode x nodesPerReplica",
    ),
    BadSpec(
        "dp-not-spreading",
        pools(decode={"dataParallel": 6, "nodesPerReplica": 4, "tensorParallel": 2}),
        "spec.decode.dataParallel",
        "6 data-parallel ranks cannot be spread evenly over 4 nodes",
        "make dataParallel a multiple of nodesPerReplica",
        ok=pools(decode={"dataParallel": 8, "nodesPerReplica": 4, "tensorParallel": 2}),
        cel="spec.decode.dataParallel",
        cel_message="dataParallel must be a multiple of nodesPerReplica",
    ),
    BadSpec(
        "dcp-not-dividing-tp",
        pools(decode={"tensorParallel": 4, "decodeContextParallel": 3}),
        "spec.decode.decodeContextParallel",
        "3 does not divide tensorParallel 4",
        "choose a decodeContextParallel that divides tensorParallel",
        ok=pools(decode={"tensorParallel": 4, "decodeContextParallel": 4}),
        cel="spec.decode.decodeContextParallel",
        cel_message="decodeContextParallel must divide tensorParallel",
    ),
    BadSpec(
        "pcp-on-decode",
        pools(decode={"prefillContextParallel": 2}),
        "spec.decode.prefillContextParallel",
        "prefill context parallelism only applies to the prefill pool",
        "set it to 1",
        ok=pools(prefill={"prefillContextParallel": 2}),
        cel="spec.decode.prefillContextParallel",
        cel_message="prefill context parallelism only applies to the prefill pool",
    ),
    BadSpec(
        "expert-parallel-dense",
        {"model": {"name": "org/model", "family": "dense"}, **pools(decode={"expertParallel": True})},
        "spec.decode.expertParallel",
        "expert parallelism needs a mixture-of-experts model, but spec.model.family is dense",
        "turn expertParallel off, or set spec.model.family to moe",
        ok={"model": {"name": "org/model", "family": "moe"}, **pools(decode={"expertParallel": True})},
        cel="spec.model.family",
        cel_message="expertParallel needs a mixture-of-experts model",
    ),
    # -- custom containers and connectors --------------------------------------------------------------------------
    BadSpec(
        "custom-container-on-prefill",
        {"transfer": CUSTOM, **pools(prefill={"customContainer": {"image": "e:1"}})},
        "spec.prefill.customContainer",
        "the prefill pool always runs vLLM",
        "remove it; only the decode pool may run a non-vLLM engine",
        ok={"transfer": CUSTOM, **pools(decode={"customContainer": {"image": "e:1"}})},
        cel="spec.prefill.customContainer",
        cel_message="the prefill pool always runs vLLM",
    ),
    BadSpec(
        "custom-container-without-plugin",
        pools(decode={"customContainer": {"image": "e:1"}}),
        "spec.decode.customContainer",
        "a non-vLLM decode engine needs a plugin connector",
        "set spec.transfer.connector to custom",
        ok={"transfer": CUSTOM, **pools(decode={"customContainer": {"image": "e:1"}})},
        cel="spec.decode.customContainer",
        cel_message="spec.decode.customContainer needs a plugin connector",
    ),
    BadSpec(
        "render-tier-with-custom-decode",
        {
            "transfer": CUSTOM,
            "frontend": {"render": {"enabled": True}},
            **pools(decode={"customContainer": {"image": "e:1"}}),
        },
        "spec.frontend.render.enabled",
        "the render tier needs token-in/token-out vLLM engines",
        "turn the render tier off, or run vLLM on the decode pool",
        ok={"transfer": CUSTOM, "frontend": {"render": {"enabled": True}}},
    ),
    BadSpec(
        "custom-prefill-consumer",
        {"transfer": {**CUSTOM, "custom": {"connectorClass": "P", "prefill": {"role": "consumer"}}}},
        "spec.transfer.custom.prefill.role",
        "the prefill pool produces KV, so it cannot be a consumer only",
        "use producer or both",
        ok={"transfer": {**CUSTOM, "custom": {"connectorClass": "P", "prefill": {"role": "both"}}}},
    ),
    BadSpec(
        "custom-decode-producer",
        {"transfer": {**CUSTOM, "custom": {"connectorClass": "P", "decode": {"role": "producer"}}}},
        "spec.transfer.custom.decode.role",
        "the decode pool consumes KV, so it cannot be a producer only",
        "use consumer or both",
        ok={"transfer": {**CUSTOM, "custom": {"connectorClass": "P", "decode": {"role": "both"}}}},
    ),
    # -- hybrid SSM models -----------------------------------------------------------------------------------------
    BadSpec(
        "hybrid-lmcache-connector",
        {**HYBRID, "transfer": {"connector": "lmcache"}},
        "spec.transfer.connector",
        "hybrid SSM models need the hybrid KV cache manager, which the LMCache connector does not support",
        "use connector nixl, nixl-push, mooncake or moriio",
        ok={**HYBRID, "transfer": {"connector": "mooncake"}},
        cel="spec.transfer.connector",
        cel_message="hybrid SSM models need the hybrid KV cache manager",
    ),
    BadSpec(
        "hybrid-lmcache-store",
        {**HYBRID, "kvCache": {"store": {"type": "lmcache"}}},
        "spec.kvCache.store.type",
        "hybrid SSM models need the hybrid KV cache manager, which the LMCache connector does not support",
        "use a mooncake store, or no store",
        ok={**HYBRID, "kvCache": {"store": {"type": "mooncake"}}},
    ),
    BadSpec(
        "hybrid-block-sizes-differ",
        {**HYBRID, **pools(prefill={"engine": {"blockSize": 64}}, decode={"engine": {"blockSize": 128}})},
        "spec.decode.engine.blockSize",
        "hybrid SSM models need the same block size on both pools (prefill 64, decode 128)",
        "set spec.engine.blockSize once",
        ok={**HYBRID, **pools(prefill={"engine": {"blockSize": 128}}, decode={"engine": {"blockSize": 128}})},
    ),
    BadSpec(
        "hybrid-offload-without-prefix-caching",
        {
            **HYBRID,
            "kvCache": {"cpu": {"size": "8Gi", "pools": ["decode"]}},
            **pools(decode={"engine": {"prefixCaching": False}}),
        },
        "spec.decode.engine.prefixCaching",
        "KV offloading for hybrid models needs prefix caching so block sizes align",
        "remove prefixCaching: false, or drop the CPU tier for this pool",
        ok={
            **HYBRID,
            "kvCache": {"cpu": {"size": "8Gi", "pools": ["prefill"]}},
            **pools(decode={"engine": {"prefixCaching": False}}),
        },
    ),
    BadSpec(
        "hybrid-hma-disabled",
        {
            **HYBRID,
            **pools(prefill={"engine": {"extraArgs": ["--enforce-eager", "--disable-hybrid-kv-cache-manager"]}}),
        },
        "spec.prefill.engine.extraArgs[1]",
        "hybrid SSM models require the hybrid KV cache manager",
        "remove --disable-hybrid-kv-cache-manager",
        ok={**HYBRID, **pools(prefill={"engine": {"extraArgs": ["--enforce-eager"]}})},
    ),
    BadSpec(
        "hybrid-hma-disabled-with-a-value",
        {**HYBRID, **pools(decode={"engine": {"extraArgs": ["--disable-hybrid-kv-cache-manager=true"]}})},
        "spec.decode.engine.extraArgs[0]",
        "hybrid SSM models require the hybrid KV cache manager",
        "remove --disable-hybrid-kv-cache-manager",
        ok={**HYBRID, **pools(decode={"engine": {"extraArgs": ["--disable-hybrid-kv-cache-managers=true"]}})},
    ),
    BadSpec(
        # The general prefill <= decode rule stands aside for hybrid models: their own rule asks for equal sizes.
        "hybrid-prefill-block-larger",
        {**HYBRID, **pools(prefill={"engine": {"blockSize": 128}}, decode={"engine": {"blockSize": 64}})},
        "spec.decode.engine.blockSize",
        "hybrid SSM models need the same block size on both pools (prefill 128, decode 64)",
        "set spec.engine.blockSize once",
        ok={**HYBRID, **pools(prefill={"engine": {"blockSize": 64}}, decode={"engine": {"blockSize": 64}})},
    ),
    BadSpec(
        "hybrid-conv-state-layout",
        {**HYBRID, "engine": {"env": [{"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "SD"}]}},
        "spec.engine.env[0]",
        "VLLM_SSM_CONV_STATE_LAYOUT must be DS for hybrid SSM models in P/D",
        "remove the variable",
        ok={**HYBRID, "engine": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]}},  # DS twice: D72
    ),
    # -- engines of both pools -------------------------------------------------------------------------------------
    BadSpec(
        "prefill-block-larger",
        pools(prefill={"engine": {"blockSize": 32}}, decode={"engine": {"blockSize": 16}}),
        "spec.prefill.engine.blockSize",
        "prefill block size 32 is larger than decode's 16",
        "use the same block size on both pools",
        ok=pools(prefill={"engine": {"blockSize": 16}}, decode={"engine": {"blockSize": 16}}),
    ),
    BadSpec(
        "kv-dtype-mismatch",
        pools(decode={"engine": {"kvCacheDtype": "fp8"}}),
        "spec.decode.engine.kvCacheDtype",
        "prefill stores KV as auto but decode as fp8",
        "set spec.engine.kvCacheDtype once",
        ok=pools(decode={"engine": {"kvCacheDtype": "auto"}}),
    ),
    BadSpec(
        "speculative-mismatch",
        pools(prefill={"engine": {"speculative": {"method": "mtp", "numSpeculativeTokens": 1}}}),
        "spec.decode.engine.speculative",
        "speculative decoding differs between pools (prefill mtp, decode off)",
        "use the same method and model on both pools",
        ok=pools(
            prefill={"engine": {"speculative": {"method": "mtp", "numSpeculativeTokens": 1}}},
            decode={"engine": {"speculative": {"method": "mtp", "numSpeculativeTokens": 3}}},
        ),
    ),
    BadSpec(
        "speculative-draft-model-mismatch",
        pools(
            prefill={"engine": {"speculative": {"method": "draft_model", "model": "org/a", "numSpeculativeTokens": 2}}},
            decode={"engine": {"speculative": {"method": "draft_model", "model": "org/b", "numSpeculativeTokens": 2}}},
        ),
        "spec.decode.engine.speculative",
        "speculative decoding differs between pools (prefill draft_model with org/a, decode draft_model with org/b)",
        "use the same method and model on both pools (numSpeculativeTokens may differ)",
        ok={"engine": {"speculative": {"method": "draft_model", "model": "org/a", "numSpeculativeTokens": 2}}},
    ),
    # -- autoscaling and scaling -----------------------------------------------------------------------------------
    BadSpec(
        "autoscaling-min-above-max",
        {"scaling": SLOS, **pools(prefill={"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 4}})},
        "spec.prefill.autoscaling.minReplicas",
        "minReplicas 5 exceeds maxReplicas 4",
        "lower minReplicas or raise maxReplicas",
        ok={"scaling": SLOS, **pools(prefill={"autoscaling": {"enabled": True, "minReplicas": 4, "maxReplicas": 4}})},
        cel="spec.prefill.autoscaling",
        cel_message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
    ),
    BadSpec(
        "autoscaling-without-max",
        {"scaling": SLOS, **pools(decode={"autoscaling": {"enabled": True}})},
        "spec.decode.autoscaling.maxReplicas",
        "required when the operator scales the pool",
        "set maxReplicas to the most replicas you can afford",
        ok={"scaling": SLOS, **pools(decode={"autoscaling": {"enabled": True, "controller": "external"}})},
        cel="spec.decode.autoscaling.maxReplicas",
        cel_message="spec.decode.autoscaling.maxReplicas is required when the operator scales the pool",
    ),
    BadSpec(
        "prefill-autoscaling-without-max",
        {"scaling": SLOS, **pools(prefill={"autoscaling": {"enabled": True}})},
        "spec.prefill.autoscaling.maxReplicas",
        "required when the operator scales the pool",
        "set maxReplicas",
        ok={"scaling": SLOS, **pools(prefill={"autoscaling": {"enabled": False}})},
        cel="spec.prefill.autoscaling.maxReplicas",
        cel_message="spec.prefill.autoscaling.maxReplicas is required when the operator scales the pool",
    ),
    BadSpec(
        "prefill-scaled-without-ttft",
        {"scaling": {"slo": {"itlP90": "50ms"}}, **pools(prefill=OPERATOR_SCALED)},
        "spec.scaling.slo.ttftP90",
        "required to scale the prefill pool (it is sized for time to first token)",
        "set a target such as 2s",
        ok={"scaling": {"slo": {"itlP90": "50ms"}}, **pools(decode=OPERATOR_SCALED)},
        cel="spec.scaling.slo.ttftP90",
        cel_message="spec.scaling.slo.ttftP90 is required to scale the prefill pool",
    ),
    BadSpec(
        "decode-scaled-without-itl",
        {"scaling": {"slo": {"ttftP90": "2s"}}, **pools(decode=OPERATOR_SCALED)},
        "spec.scaling.slo.itlP90",
        "required to scale the decode pool (it is sized for inter-token latency)",
        "set a target such as 50ms",
        ok={"scaling": {"slo": {"ttftP90": "2s"}}, **pools(prefill=OPERATOR_SCALED)},
        cel="spec.scaling.slo.itlP90",
        cel_message="spec.scaling.slo.itlP90 is required to scale the decode pool",
    ),
    BadSpec(
        "prometheus-without-settings",
        {"scaling": {"metrics": {"source": "prometheus"}}},
        "spec.scaling.metrics.prometheus",
        "must be set exactly when spec.scaling.metrics.source is prometheus",
        "add prometheus.url with source prometheus",
        ok={"scaling": {"metrics": {"source": "prometheus", "prometheus": {"url": "http://p:9090"}}}},
        cel="spec.scaling.metrics",
        cel_message="spec.scaling.metrics.prometheus must be set exactly when source is prometheus",
    ),
    BadSpec(
        "prometheus-settings-with-direct",
        {"scaling": {"metrics": {"source": "direct", "prometheus": {"url": "http://p:9090"}}}},
        "spec.scaling.metrics.prometheus",
        "must be set exactly when spec.scaling.metrics.source is prometheus",
        "add prometheus.url with source prometheus, or remove the block",
        ok={"scaling": {"metrics": {"source": "direct"}}},
        cel="spec.scaling.metrics",
        cel_message="spec.scaling.metrics.prometheus must be set exactly when source is prometheus",
    ),
    BadSpec(
        "ratio-inverted",
        {"scaling": {"ratio": {"min": 2.5, "max": 2.0}}},
        "spec.scaling.ratio.min",
        "2.5 exceeds ratio.max 2.0",
        "swap or widen them",
        ok={"scaling": {"ratio": {"min": 2.0, "max": 2.0}}},
        cel="spec.scaling.ratio",
        cel_message="spec.scaling.ratio.min must not exceed ratio.max",
    ),
    BadSpec(
        "gpu-budget-below-the-floor",
        {
            "scaling": {"maxGpus": 11},
            **pools(prefill={"replicas": 2, "tensorParallel": 4}, decode={"tensorParallel": 4}),
        },
        "spec.scaling.maxGpus",
        "the pools need at least 12 GPUs at their minimum sizes, above the budget of 11",
        "raise maxGpus to at least 12",
        ok={
            "scaling": {"maxGpus": 12},
            **pools(prefill={"replicas": 2, "tensorParallel": 4}, decode={"tensorParallel": 4}),
        },
    ),
    BadSpec(
        "gpu-budget-counts-scaled-pools-at-their-minimum",
        {
            "scaling": {"maxGpus": 5, **SLOS},
            **pools(
                prefill={
                    "replicas": 1,
                    "tensorParallel": 2,
                    "autoscaling": {**OPERATOR_SCALED["autoscaling"], "minReplicas": 2},
                },
                decode={"replicas": 4, "tensorParallel": 2, "autoscaling": {"enabled": True, "controller": "external"}},
            ),
        },
        "spec.scaling.maxGpus",
        "the pools need at least 12 GPUs at their minimum sizes, above the budget of 5",
        "raise maxGpus to at least 12",
        ok={
            "scaling": {"maxGpus": 12, **SLOS},
            **pools(
                prefill={
                    "replicas": 1,
                    "tensorParallel": 2,
                    "autoscaling": {**OPERATOR_SCALED["autoscaling"], "minReplicas": 2},
                },
                decode={"replicas": 4, "tensorParallel": 2, "autoscaling": {"enabled": True, "controller": "external"}},
            ),
        },
    ),
    # -- KV cache tiers --------------------------------------------------------------------------------------------
    BadSpec(
        "disk-tier-without-cpu",
        {"kvCache": {"disk": {}}},
        "spec.kvCache.disk",
        "the disk tier sits behind the CPU tier",
        "add spec.kvCache.cpu with a size",
        ok={"kvCache": {"disk": {}, "cpu": {"size": "8Gi"}}},
        cel="spec.kvCache.disk",
        cel_message="spec.kvCache.disk sits behind the CPU tier",
    ),
    BadSpec(
        "disk-tier-pool-without-cpu-tier",
        {"kvCache": {"cpu": {"size": "8Gi", "pools": ["prefill"]}, "disk": {"pools": ["prefill", "decode"]}}},
        "spec.kvCache.disk.pools",
        "every pool with the disk tier needs the CPU tier too",
        "add those pools to spec.kvCache.cpu.pools",
        ok={"kvCache": {"cpu": {"size": "8Gi", "pools": ["prefill"]}, "disk": {"pools": ["prefill"]}}},
    ),
    BadSpec(
        "disk-volume-two-sources",
        {"kvCache": {"cpu": {"size": "8Gi"}, "disk": {"volume": {"emptyDir": {}, "hostPath": {"path": "/nvme"}}}}},
        "spec.kvCache.disk.volume",
        "more than one volume source is set",
        "keep exactly one of emptyDir, persistentVolumeClaim or hostPath",
        ok={"kvCache": {"cpu": {"size": "8Gi"}, "disk": {"volume": {"hostPath": {"path": "/nvme"}}}}},
        cel="spec.kvCache.disk.volume",
        cel_message="set only one of emptyDir, persistentVolumeClaim or hostPath",
    ),
    BadSpec(
        "store-mooncake-block-with-lmcache-type",
        {"kvCache": {"store": {"type": "lmcache", "mooncake": {"protocol": "tcp"}}}},
        "spec.kvCache.store.mooncake",
        "set, but spec.kvCache.store.type is lmcache",
        "remove it, or set type to mooncake",
        ok={"kvCache": {"store": {"type": "mooncake", "mooncake": {"protocol": "tcp"}}}},
        cel="spec.kvCache.store.mooncake",
        cel_message="spec.kvCache.store.mooncake is set but type is not mooncake",
    ),
    BadSpec(
        "store-lmcache-block-with-mooncake-type",
        {"kvCache": {"store": {"type": "mooncake", "lmcache": {"port": 7000}}}},
        "spec.kvCache.store.lmcache",
        "set, but spec.kvCache.store.type is mooncake",
        "remove it, or set type to lmcache",
        ok={"kvCache": {"store": {"type": "lmcache", "lmcache": {"port": 7000}}}},
        cel="spec.kvCache.store.lmcache",
        cel_message="spec.kvCache.store.lmcache is set but type is not lmcache",
    ),
    BadSpec(
        "store-pegaflow-without-its-block",
        {"kvCache": {"store": {"type": "pegaflow"}}},
        "spec.kvCache.store.pegaflow",
        "type pegaflow needs the server's settings",
        "add spec.kvCache.store.pegaflow.server.image",
        ok={"kvCache": {"store": PEGAFLOW}},
        cel="spec.kvCache.store.pegaflow",
        cel_message="spec.kvCache.store.pegaflow must be set exactly when type is pegaflow",
    ),
    BadSpec(
        "store-pegaflow-off-nvidia",
        {"kvCache": {"store": PEGAFLOW}, **pools(prefill={"resources": {"gpuResourceName": "amd.com/gpu"}})},
        "spec.prefill.resources.gpuResourceName",
        "PegaFlow's server reads KV from vLLM workers through CUDA IPC, and prefill asks for amd.com/gpu",
        "run prefill on NVIDIA GPUs, or remove prefill from spec.kvCache.store.pools",
        ok={
            "kvCache": {"store": {**PEGAFLOW, "pools": ["decode"]}},
            **pools(prefill={"resources": {"gpuResourceName": "amd.com/gpu"}}),
        },
    ),
    BadSpec(
        "store-pegaflow-with-host-network-engines",
        {"kvCache": {"store": PEGAFLOW}, "transfer": {"network": {"hostNetwork": True}}},
        "spec.transfer.network.hostNetwork",
        "PegaFlow's server owns ports of the node",
        "turn hostNetwork off for the engines",
        ok={"kvCache": {"store": PEGAFLOW}, "transfer": {"network": {"hostNetwork": False}}},
    ),
    BadSpec(
        "store-mooncake-standalone-with-engine-segments",
        {"kvCache": {"store": {"type": "mooncake", "mooncake": {"mode": "standalone", "globalSegmentSize": "1Gi"}}}},
        "spec.kvCache.store.mooncake.globalSegmentSize",
        "in standalone mode engines contribute no segment",
        "remove it and size the pool with spec.kvCache.store.mooncake.client.segmentSize",
        ok={"kvCache": {"store": {"type": "mooncake", "mooncake": {"mode": "embedded", "globalSegmentSize": "1Gi"}}}},
    ),
    BadSpec(
        "store-mooncake-client-when-embedded",
        {"kvCache": {"store": {"type": "mooncake", "mooncake": {"client": {"segmentSize": "1Gi"}}}}},
        "spec.kvCache.store.mooncake.client",
        "the per-node client exists only in standalone mode",
        "set spec.kvCache.store.mooncake.mode: standalone, or remove client",
        ok={
            "kvCache": {
                "store": {"type": "mooncake", "mooncake": {"mode": "standalone", "client": {"segmentSize": "1Gi"}}}
            }
        },
    ),
    # -- flags and variables the operator owns ---------------------------------------------------------------------
    BadSpec(
        "owned-flag-in-spec-engine",
        {"engine": {"extraArgs": ["--enforce-eager", "--tensor-parallel-size=2"]}},
        "spec.engine.extraArgs[1]",
        "--tensor-parallel-size is rendered by the operator",
        "remove it and set spec.prefill/spec.decode.tensorParallel instead",
        ok={"engine": {"extraArgs": ["--enforce-eager"]}},
    ),
    BadSpec(
        "owned-flag-in-a-pool",
        pools(decode={"engine": {"extraArgs": ["--tensor-parallel-size", "2"]}}),
        "spec.decode.engine.extraArgs[0]",
        "--tensor-parallel-size is rendered by the operator",
        "remove it and set spec.decode.tensorParallel instead",
        ok=pools(decode={"engine": {"extraArgs": ["--tensor-parallel-size-x", "2"]}}),
    ),
    BadSpec(
        "owned-flag-in-the-prefill-pool",
        pools(prefill={"engine": {"extraArgs": ["-tp", "2"]}}),
        "spec.prefill.engine.extraArgs[0]",
        "-tp is rendered by the operator",
        "remove it and set spec.prefill.tensorParallel instead",
        ok=pools(prefill={"engine": {"extraArgs": ["2"]}}),
    ),
    BadSpec(
        "owned-engine-setting-flag-in-spec-engine",
        {"engine": {"extraArgs": ["--max-model-len=4096"]}},
        "spec.engine.extraArgs[0]",
        "--max-model-len is rendered by the operator",
        "remove it and set spec.engine.maxModelLen instead",
        ok={"engine": {"maxModelLen": 4096}},
    ),
    BadSpec(
        "owned-engine-setting-flag-in-a-pool",
        pools(decode={"engine": {"extraArgs": ["--block-size", "32"]}}),
        "spec.decode.engine.extraArgs[0]",
        "--block-size is rendered by the operator",
        "remove it and set spec.decode.engine.blockSize instead",
        ok=pools(decode={"engine": {"extraArgs": ["32"]}}),
    ),
    BadSpec(
        "abbreviated-owned-flag",
        {"engine": {"extraArgs": ["--kv-transfer"]}},
        "spec.engine.extraArgs[0]",
        "--kv-transfer abbreviates --kv-transfer-config, which the operator renders",
        "remove it",
        ok={"engine": {"extraArgs": ["--kv-transfer-configuration"]}},  # a longer flag abbreviates nothing
    ),
    BadSpec(
        "owned-router-flag",
        {"frontend": {"router": {"extraArgs": ["--port=9000"]}}},
        "spec.frontend.router.extraArgs[0]",
        "--port is rendered by the operator",
        "remove it and set spec.frontend.router.port instead",
        ok={"frontend": {"router": {"extraArgs": ["9000"]}}},
    ),
    # -- the frontend ----------------------------------------------------------------------------------------------
    BadSpec(
        "vllm-router-with-push",
        {**VLLM_ROUTER, "transfer": {"connector": "nixl-push"}},
        "spec.frontend.router.implementation",
        "vllm-router 0.1.17 cannot drive NIXL push",
        "remove implementation (the operator's frontend, disagg-frontend, drives this flow), or change spec.transfer",
        ok={"transfer": {"connector": "nixl-push"}},
        cel="spec.frontend.router.implementation",
        cel_message="vllm-router 0.1.17 cannot drive NIXL push, bidirectional multi-turn",
    ),
    BadSpec(
        "vllm-router-with-bidirectional",
        {**VLLM_ROUTER, "transfer": {"nixl": {"bidirectional": {"enabled": True}}}},
        "spec.frontend.router.implementation",
        "vllm-router 0.1.17 cannot drive bidirectional multi-turn",
        "remove implementation",
        ok={**VLLM_ROUTER, "transfer": {"nixl": {"bidirectional": {"enabled": False}}}},
        cel="spec.frontend.router.implementation",
        cel_message="vllm-router 0.1.17 cannot drive",
    ),
    BadSpec(
        "vllm-router-with-moriio-write",
        {**VLLM_ROUTER, "transfer": {"connector": "moriio", "moriio": {"mode": "write"}}},
        "spec.frontend.router.implementation",
        "vllm-router 0.1.17 cannot drive MoRI-IO write mode",
        "remove implementation",
        ok={**VLLM_ROUTER, "transfer": {"connector": "moriio", "moriio": {"mode": "read"}}},
        cel="spec.frontend.router.implementation",
        cel_message="MoRI-IO write",
    ),
    BadSpec(
        "vllm-router-with-the-render-tier",
        {"frontend": {"render": {"enabled": True}, "router": {"implementation": "vllm-router"}}},
        "spec.frontend.router.implementation",
        "vllm-router 0.1.17 cannot drive the render tier",
        "remove implementation (disagg-frontend drives the render tier), or turn spec.frontend.render off",
        ok={"frontend": {"render": {"enabled": True}, "router": {"implementation": "disagg-frontend"}}},
        cel="spec.frontend.router.implementation",
        cel_message="or the render tier",
    ),
    BadSpec(
        "frontend-policy-of-vllm-router",
        {"frontend": {"router": {"decodePolicy": "power_of_two"}}},
        "spec.frontend.router.decodePolicy",
        "disagg-frontend has no policy power_of_two",
        "use one of round_robin, least_loaded, consistent_hash, or set implementation: vllm-router",
        ok={"frontend": {"router": {"implementation": "vllm-router", "decodePolicy": "power_of_two"}}},
    ),
    BadSpec(
        "frontend-prefill-policy-of-vllm-router",
        {"frontend": {"router": {"prefillPolicy": "cache_aware"}}},
        "spec.frontend.router.prefillPolicy",
        "disagg-frontend has no policy cache_aware",
        "use one of round_robin, least_loaded, consistent_hash, or set implementation: vllm-router",
        ok={"frontend": {"router": {"prefillPolicy": "least_loaded"}}},
    ),
    BadSpec(
        "frontend-admin-port-is-the-api-port",
        {"frontend": {"router": {"port": 8100, "adminPort": 8100}}},
        "spec.frontend.router.adminPort",
        "port 8100 is also spec.frontend.router.port of the router",
        "choose a port of its own",
        ok={"frontend": {"router": {"port": 8100, "adminPort": 8101}}},
    ),
    BadSpec(
        "owned-router-flag-with-nothing-to-set",
        {"frontend": {"router": {"extraArgs": ["--host", "0.0.0.0"]}}},
        "spec.frontend.router.extraArgs[0]",
        "--host is rendered by the operator",
        "remove it: the frontend listens on all interfaces",
        ok={"frontend": {"router": {"extraArgs": ["0.0.0.0"]}}},
    ),
    BadSpec(
        "owned-env",
        pools(
            prefill={
                "engine": {"env": [{"name": "A", "value": "1"}, {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "x"}]}
            }
        ),
        "spec.prefill.engine.env[1]",
        "VLLM_NIXL_SIDE_CHANNEL_HOST is set by the operator",
        "remove it",
        ok=pools(prefill={"engine": {"env": [{"name": "A", "value": "1"}]}}),
    ),
    BadSpec(
        "env-fighting-a-network-field",
        {"transfer": {"network": {"ucxTls": "rc,cuda_copy"}}, "engine": {"env": [{"name": "UCX_TLS", "value": "tcp"}]}},
        "spec.engine.env[0]",
        "UCX_TLS is also set by spec.transfer.network.ucxTls",
        "keep only one: remove the variable or spec.transfer.network.ucxTls",
        ok={"engine": {"env": [{"name": "UCX_TLS", "value": "tcp"}]}},
    ),
    BadSpec(
        "env-value-and-value-from",
        {"engine": {"env": [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
        "spec.engine.env[0]",
        "both value and valueFrom are set",
        "keep exactly one of them",
        ok={"engine": {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
        cel="spec.engine.env[0]",
        cel_message="set either value or valueFrom, not both",
    ),
    # -- ports -----------------------------------------------------------------------------------------------------
    BadSpec(
        "side-channel-on-the-http-port",
        {"transfer": {"nixl": {"sideChannelPort": 7997}}, **pools(decode={"dataParallel": 4})},
        "spec.transfer.nixl.sideChannelPort",
        "in the decode pool, ports 7997-8000 (spec.transfer.nixl.sideChannelPort) overlap ports 8000-8000",
        "move the base port so the ranges are disjoint",
        ok={"transfer": {"nixl": {"sideChannelPort": 7996}}, **pools(decode={"dataParallel": 4})},
    ),
    BadSpec(
        "mooncake-bootstrap-on-the-http-port",
        {"transfer": {"connector": "mooncake", "mooncake": {"bootstrapPort": 8000}}},
        "spec.transfer.mooncake.bootstrapPort",
        "in the prefill pool, ports 8000-8000 (spec.transfer.mooncake.bootstrapPort) overlap",
        "move the base port",
        ok={"transfer": {"connector": "mooncake", "mooncake": {"bootstrapPort": 8001}}},
    ),
    BadSpec(
        "moriio-ports-overlap",
        {
            "transfer": {"connector": "moriio", "moriio": {"handshakePort": 7000, "notifyPort": 7003}},
            **pools(prefill={"tensorParallel": 4}),
        },
        "spec.transfer.moriio.notifyPort",
        "in the prefill pool, ports 7003-7006 (spec.transfer.moriio.notifyPort) overlap ports 7000-7003",
        "move the base port",
        ok={
            "transfer": {"connector": "moriio", "moriio": {"handshakePort": 7000, "notifyPort": 7004}},
            **pools(prefill={"tensorParallel": 4}),
        },
    ),
    # -- rules of the harden branch (D71, D72) that CEL also holds ------------------------------------------------
    BadSpec(
        "name-ends-like-a-child",
        {},
        "metadata.name",
        "'x-router' ends with -router, so it is the name of a child",
        "choose a name that does not end with",
        ok={},
        metadata={"name": "x-router"},
        ok_metadata={"name": "x-routers"},
        cel="",
        cel_message="metadata.name must not end with -decode",
    ),
    BadSpec(
        "custom-decode-over-two-nodes",
        {
            "transfer": CUSTOM,
            "decode": {"nodesPerReplica": 2, "tensorParallel": 2, "customContainer": {"image": "i", "port": 5557}},
        },
        "spec.decode.nodesPerReplica",
        "a custom decode container runs as one pod per replica",
        "set nodesPerReplica to 1",
        ok={
            "transfer": CUSTOM,
            "decode": {"nodesPerReplica": 1, "tensorParallel": 2, "customContainer": {"image": "i", "port": 5557}},
        },
        cel="spec.decode.nodesPerReplica",
        cel_message="a custom decode container runs as one pod per replica",
    ),
    BadSpec(
        "lmcache-with-mooncake-store",
        {"transfer": {"connector": "lmcache"}, "kvCache": {"store": {"type": "mooncake"}}},
        "spec.kvCache.store.type",
        "connector lmcache moves KV through an LMCache server, and one DisaggDeployment runs one KV-store daemon: "
        "with a Mooncake store the LMCache server would not be deployed",
        "use store type lmcache",
        ok={"transfer": {"connector": "lmcache"}, "kvCache": {"store": {"type": "lmcache"}}},
        cel="spec.kvCache.store.type",
        cel_message="connector lmcache needs its LMCache server",
    ),
    BadSpec(
        "value-from-no-source",
        {"engine": {"env": [{"name": "A", "valueFrom": {}}]}},
        "spec.engine.env[0].valueFrom",
        "valueFrom names 0 sources",
        "set exactly one of secretKeyRef, configMapKeyRef or fieldRef",
        ok={"engine": {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}},
        cel="spec.engine.env[0].valueFrom",
        cel_message="set exactly one of secretKeyRef, configMapKeyRef or fieldRef",
    ),
    BadSpec(
        "toleration-exists-with-value",
        pools(decode={"scheduling": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]}}),
        "spec.decode.scheduling.tolerations[0]",
        "operator Exists matches any value",
        "remove value, or use Equal",
        ok=pools(decode={"scheduling": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}),
        cel="spec.decode.scheduling.tolerations[0]",
        cel_message="a toleration with operator Exists matches any value",
    ),
    BadSpec(
        "toleration-without-key",
        pools(decode={"scheduling": {"tolerations": [{"value": "x"}]}}),
        "spec.decode.scheduling.tolerations[0]",
        "a toleration without a key matches every taint",
        "set key, or set operator Exists",
        ok=pools(decode={"scheduling": {"tolerations": [{"operator": "Exists"}]}}),
        cel="spec.decode.scheduling.tolerations[0]",
        cel_message="a toleration without a key matches every taint",
    ),
    BadSpec(
        "toleration-seconds-without-no-execute",
        pools(decode={"scheduling": {"tolerations": [{"key": "a", "operator": "Exists", "tolerationSeconds": 5}]}}),
        "spec.decode.scheduling.tolerations[0]",
        "tolerationSeconds applies to NoExecute taints only",
        "set effect NoExecute",
        ok=pools(
            decode={
                "scheduling": {
                    "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]
                }
            }
        ),
        cel="spec.decode.scheduling.tolerations[0]",
        cel_message="tolerationSeconds applies to NoExecute taints only",
    ),
    # -- the serving check ------------------------------------------------------------------------------------------
    BadSpec(
        "serving-interval-below-a-second",
        {"serving": {"check": {"interval": "500ms"}}},
        "spec.serving.check.interval",
        "500ms would probe every pair almost continuously",
        "use at least 1s",
        ok={"serving": {"check": {"interval": "1s"}}},
    ),
    BadSpec(
        "serving-deadline-below-a-second",
        {"serving": {"check": {"deadline": "900ms"}}},
        "spec.serving.check.deadline",
        "900ms is too short for any pair to answer",
        "use at least 1s",
        ok={"serving": {"check": {"deadline": "1s"}}},
    ),
    BadSpec(
        "serving-deadline-above-a-minute",
        {"serving": {"check": {"deadline": "1m1s"}}},
        "spec.serving.check.deadline",
        "1m1s would hold a reconcile worker for that long each round",
        "use at most 60s",
        ok={"serving": {"check": {"deadline": "1m"}}},
    ),
    BadSpec(
        "serving-cooldown-too-short",
        {"serving": {"remediation": {"cooldown": "9s"}}},
        "spec.serving.remediation.cooldown",
        "9s would let engine restarts follow each other",
        "use at least 10s",
        ok={"serving": {"remediation": {"cooldown": "10s"}}},
    ),
    BadSpec(
        "serving-drain-shorter-than-the-interval",
        {"serving": {"check": {"interval": "30s"}, "remediation": {"drainFor": "29s"}}},
        "spec.serving.remediation.drainFor",
        "29s is shorter than spec.serving.check.interval (30s)",
        "use at least the check interval",
        ok={"serving": {"check": {"interval": "30s"}, "remediation": {"drainFor": "30s"}}},
    ),
    BadSpec(
        "serving-progress-deadline-under-a-minute",
        {"serving": {"rollout": {"progressDeadline": "59s"}}},
        "spec.serving.rollout.progressDeadline",
        "59s would call a rollout stuck before its new engines could load",
        "use at least 60s",
        ok={"serving": {"rollout": {"progressDeadline": "1m"}}},
    ),
    BadSpec(
        "serving-progress-deadline-under-the-interval",
        {
            "serving": {
                "check": {"interval": "2m"},
                "remediation": {"drainFor": "5m"},
                "rollout": {"progressDeadline": "90s"},
            }
        },
        "spec.serving.rollout.progressDeadline",
        "90s would call a rollout stuck",
        "use at least 120s",
        ok={
            "serving": {
                "check": {"interval": "2m"},
                "remediation": {"drainFor": "5m"},
                "rollout": {"progressDeadline": "2m"},
            }
        },
    ),
]


@functools.cache
def cel_program(rule: str) -> Any:
    """A CEL rule compiled once."""
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def violated_cel_rules(schema: Mapping[str, Any], value: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """Every CEL rule the (defaulted) value breaks, as (rule, field path, message)."""
    for rule in schema.get("x-kubernetes-validations", []):
        outcome = cel_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if isinstance(outcome, Exception) or not bool(outcome):
            yield rule["rule"], path + rule.get("fieldPath", ""), rule["message"]
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                yield from violated_cel_rules(child, value[name], f"{path}.{name}" if path else name)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from violated_cel_rules(schema["items"], item, f"{path}[{index}]")


def cel_rules(schema: Mapping[str, Any]) -> Iterator[str]:
    """Every CEL rule of a schema."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield rule["rule"]
    for child in schema.get("properties", {}).values():
        yield from cel_rules(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            yield from cel_rules(schema[key])
