"""The specs api/object_rules.py refuses (D72), one change each on a small valid DisaggDeployment, with the path
each problem must name. tests/unit/api/test_object_rules.py holds the validation to them, e2e/test_apiserver_rules.py
shows the real API server refusing what they render with the object rules turned off."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from tests.conftest import REPO
from tests.support.reconciling import MINIMAL

Change = Callable[[dict[str, Any]], None]
BASE: dict[str, Any] = yaml.safe_load(MINIMAL)
CUSTOM: dict[str, Any] = yaml.safe_load((REPO / "examples" / "13-tilert-custom-decode.yaml").read_text())


def set_at(path: str, value: Any) -> Change:
    """A change that sets `path` (dotted, below the document) to `value`, creating mappings on the way."""

    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return change


def all_of(*changes: Change) -> Change:
    def change(document: dict[str, Any]) -> None:
        for one in changes:
            one(document)

    return change


HYBRID = set_at("spec.model", {"name": "nvidia/Nemotron-H-8B"})
OPERATORS_FRONTEND = set_at(
    "spec.frontend.router.customContainer",
    {
        "image": "ghcr.io/disagg-dev/disagg-operator:0.1.0",
        "command": ["disagg", "frontend"],
        "extraPorts": {"admin": 8001},
    },
)
"""The operator's own frontend (known by its admin port): with the check enforcing, engine pods get the serving
readiness gate and the gated rollout defaults (D102, D103)."""
ENV = "spec.engine.env"
PEGAFLOW = {"image": "example.com/pegaflow:0.4"}

# (change, the path the problem names, a base other than MINIMAL)
CASES: dict[str, tuple[Change, str, dict[str, Any] | None]] = {
    # huge pages
    "hugepages without cpu or memory": (
        set_at("spec.transfer.network.hugepages", {"size": "1Gi"}),
        "spec.decode.resources",
        None,
    ),
    "hugepages not a multiple of the page size": (
        all_of(
            set_at("spec.transfer.network.hugepages", {"size": "3Mi"}), set_at("spec.prefill.resources", {"cpu": 4})
        ),
        "spec.transfer.network.hugepages.size",
        None,
    ),
    # rolling updates
    "maxSurge 0 alone on decode": (
        set_at("spec.decode.rollout", {"maxSurge": 0}),
        "spec.decode.rollout.maxSurge",
        None,
    ),
    # Behind vllm-router, so no serving gate: the API server refuses the rendered Deployment. Behind the operator's
    # frontend the gated defaults (maxSurge 100%) would render it valid, but an installation running the check Off
    # renders the role's defaults, so the rule refuses it whatever the frontend.
    "maxUnavailable 0 alone on prefill": (
        all_of(
            set_at("spec.frontend.router.implementation", "vllm-router"),
            set_at("spec.prefill.rollout", {"maxUnavailable": "0%"}),
        ),
        "spec.prefill.rollout.maxUnavailable",
        None,
    ),
    "maxSurge 0 on a pool behind the serving gate": (
        all_of(OPERATORS_FRONTEND, set_at("spec.prefill.rollout", {"maxSurge": 0})),
        "spec.prefill.rollout.maxSurge",
        None,
    ),
    "rollout not a count or percentage": (
        set_at("spec.prefill.rollout", {"maxSurge": "one"}),
        "spec.prefill.rollout.maxSurge",
        None,
    ),
    "rollout count as a string": (
        set_at("spec.prefill.rollout", {"maxSurge": "5"}),
        "spec.prefill.rollout.maxSurge",
        None,
    ),
    "negative rollout": (set_at("spec.decode.rollout", {"maxSurge": -1}), "spec.decode.rollout.maxSurge", None),
    "maxUnavailable above 100%": (
        set_at("spec.decode.rollout", {"maxUnavailable": "150%"}),
        "spec.decode.rollout.maxUnavailable",
        None,
    ),
    # ports
    "NIXL side channel past 65535": (
        all_of(set_at("spec.transfer.nixl", {"sideChannelPort": 65535}), set_at("spec.decode.dataParallel", 2)),
        "spec.transfer.nixl.sideChannelPort",
        None,
    ),
    "router port equals metrics port": (
        set_at("spec.frontend.router", {"implementation": "vllm-router", "port": 9000, "metricsPort": 9000}),
        "spec.frontend.router.metricsPort",
        None,
    ),
    "MoRI-IO registration port equals router port": (
        all_of(
            set_at("spec.transfer", {"connector": "moriio", "moriio": {"mode": "read", "proxyPingPort": 8000}}),
            set_at("spec.frontend.router.implementation", "vllm-router"),
        ),
        "spec.transfer.moriio.proxyPingPort",
        None,
    ),
    "frontend admin port equals its API port": (
        set_at("spec.frontend.router", {"port": 8100, "adminPort": 8100}),
        "spec.frontend.router.adminPort",
        None,
    ),
    "Mooncake client RPC and segment on one node port": (
        set_at(
            "spec.kvCache.store", {"type": "mooncake", "mooncake": {"mode": "standalone", "client": {"port": 50053}}}
        ),
        "spec.kvCache.store.mooncake.client.segmentPort",
        None,
    ),
    "PegaFlow server gRPC and HTTP on one node port": (
        set_at("spec.kvCache.store", {"type": "pegaflow", "pegaflow": {"server": {**PEGAFLOW, "httpPort": 50055}}}),
        "spec.kvCache.store.pegaflow.server.httpPort",
        None,
    ),
    "Mooncake client on a port of host-network engines": (
        all_of(
            set_at(
                "spec.kvCache.store", {"type": "mooncake", "mooncake": {"mode": "standalone", "client": {"port": 8000}}}
            ),
            set_at("spec.transfer.network.hostNetwork", True),
        ),
        "spec.kvCache.store.mooncake.client.port",
        None,
    ),
    "Mooncake master and metrics on one port": (
        set_at("spec.kvCache.store", {"type": "mooncake", "mooncake": {"masterPort": 9003}}),
        "spec.kvCache.store.mooncake.metricsPort",
        None,
    ),
    "custom engine extra port on its main port": (
        set_at("spec.decode.customContainer.extraPorts", {"ctrl": 5557}),
        "spec.decode.customContainer.extraPorts.ctrl",
        CUSTOM,
    ),
    "custom engine extra port named http": (
        set_at("spec.decode.customContainer.extraPorts", {"http": 5556}),
        "spec.decode.customContainer.extraPorts.http",
        CUSTOM,
    ),
    "custom engine port name without a letter": (
        set_at("spec.decode.customContainer.extraPorts", {"5556": 5556}),
        "spec.decode.customContainer.extraPorts.5556",
        CUSTOM,
    ),
    "custom router extra port name with consecutive hyphens": (
        set_at("spec.frontend.router.customContainer.extraPorts", {"a--b": 9100}),
        "spec.frontend.router.customContainer.extraPorts.a--b",
        CUSTOM,
    ),
    # labels and annotations
    "the pairing label set by hand": (
        set_at("spec.decode.podLabels", {"disagg.dev/pairing-revision": "abc"}),
        "spec.decode.podLabels.disagg.dev/pairing-revision",
        None,
    ),
    "a pod-contract annotation set by hand": (
        set_at("spec.prefill.podAnnotations", {"disagg.dev/kv-tp-size": "8"}),
        "spec.prefill.podAnnotations.disagg.dev/kv-tp-size",
        None,
    ),
    "pod label key with a space": (
        set_at("spec.prefill.podLabels", {"team a": "x"}),
        "spec.prefill.podLabels.team a",
        None,
    ),
    "pod label value with a space": (
        set_at("spec.prefill.podLabels", {"team": "a b"}),
        "spec.prefill.podLabels.team",
        None,
    ),
    "node selector value ending in a dash": (
        set_at("spec.decode.scheduling.nodeSelector", {"pool": "gpu-"}),
        "spec.decode.scheduling.nodeSelector.pool",
        None,
    ),
    "a label the operator selects by": (
        set_at("spec.decode.podLabels", {"disagg.dev/role": "prefill"}),
        "spec.decode.podLabels.disagg.dev/role",
        None,
    ),
    "a LeaderWorkerSet label": (
        set_at("spec.decode.podLabels", {"leaderworkerset.sigs.k8s.io/worker-index": "1"}),
        "spec.decode.podLabels.leaderworkerset.sigs.k8s.io/worker-index",
        None,
    ),
    "service label the operator sets": (
        set_at("spec.frontend.service.labels", {"app.kubernetes.io/name": "mine"}),
        "spec.frontend.service.labels.app.kubernetes.io/name",
        None,
    ),
    "annotation key with a space": (
        set_at("spec.decode.podAnnotations", {"a b": "x"}),
        "spec.decode.podAnnotations.a b",
        None,
    ),
    "annotations above 256 KiB": (
        set_at("spec.decode.podAnnotations", {"big": "x" * (256 * 1024)}),
        "spec.decode.podAnnotations",
        None,
    ),
    # environment variables
    "env name given twice": (set_at(ENV, [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]), ENV, None),
    "valueFrom without a source": (set_at(ENV, [{"name": "A", "valueFrom": {}}]), f"{ENV}[0].valueFrom", None),
    "valueFrom with two sources": (
        set_at(
            ENV,
            [
                {
                    "name": "A",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "metadata.name"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ],
        ),
        f"{ENV}[0].valueFrom",
        None,
    ),
    "a pod field the downward API lacks": (
        set_at(ENV, [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.foo"}}}]),
        f"{ENV}[0].valueFrom.fieldRef.fieldPath",
        None,
    ),
    "a Secret key with a slash": (
        set_at(ENV, [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a/b"}}}]),
        f"{ENV}[0].valueFrom.secretKeyRef.key",
        None,
    ),
    "an engine env the operator sets": (set_at(ENV, [{"name": "POD_IP", "value": "1.2.3.4"}]), f"{ENV}[0]", None),
    "a pool host variable": (
        set_at("spec.decode.engine.env", [{"name": "DISAGG_DECODE_HOST", "value": "x"}]),
        "spec.decode.engine.env[0]",
        None,
    ),
    "a custom engine env the operator sets": (
        set_at("spec.decode.customContainer.env", [{"name": "HF_HOME", "value": "/tmp"}]),
        "spec.decode.customContainer.env[0]",
        CUSTOM,
    ),
    "a custom engine POD_NAME, which engine ids derive from": (
        set_at("spec.decode.customContainer.env", [{"name": "POD_NAME", "value": "x"}]),
        "spec.decode.customContainer.env[0]",
        CUSTOM,
    ),
    "a router env the operator sets": (
        set_at("spec.frontend.router.env", [{"name": "POD_NAMESPACE", "value": "x"}]),
        "spec.frontend.router.env[0]",
        None,
    ),
    "a custom router env given in both lists": (
        all_of(
            set_at("spec.frontend.router.customContainer.env", [{"name": "MODE", "value": "a"}]),
            set_at("spec.frontend.router.env", [{"name": "MODE", "value": "b"}]),
        ),
        "spec.frontend.router.env[0]",
        CUSTOM,
    ),
    "a render tier env the operator sets": (
        set_at("spec.frontend.render", {"enabled": True, "env": [{"name": "HF_HOME", "value": "/x"}]}),
        "spec.frontend.render.env[0]",
        None,
    ),
    "the hybrid layout the operator sets": (
        all_of(HYBRID, set_at(ENV, [{"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "DS"}])),
        f"{ENV}[0]",
        None,
    ),
    # resources
    "a GPU resource without a domain": (
        set_at("spec.prefill.resources.gpuResourceName", "gpu"),
        "spec.prefill.resources.gpuResourceName",
        None,
    ),
    "an RDMA resource that is standard": (
        set_at("spec.transfer.network.rdma", {"resourceName": "memory"}),
        "spec.transfer.network.rdma.resourceName",
        None,
    ),
    "an extra resource that is not one": (
        set_at("spec.prefill.resources.extra", {"storage": "1Gi"}),
        "spec.prefill.resources.extra.storage",
        None,
    ),
    "half a device": (
        set_at("spec.prefill.resources.extra", {"example.com/nic": "0.5"}),
        "spec.prefill.resources.extra.example.com/nic",
        None,
    ),
    "extra memory replacing the pinned KV memory": (
        all_of(
            set_at("spec.kvCache", {"cpu": {"size": "32Gi"}}),
            set_at("spec.decode.resources", {"memory": "64Gi", "extra": {"memory": "64Gi"}}),
        ),
        "spec.decode.resources.extra.memory",
        None,
    ),
    "extra GPUs replacing the parallelism's": (
        set_at("spec.decode.resources.extra", {"nvidia.com/gpu": "2"}),
        "spec.decode.resources.extra.nvidia.com/gpu",
        None,
    ),
    "router request above its limit": (
        set_at("spec.frontend.router.resources", {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}),
        "spec.frontend.router.resources.requests.memory",
        None,
    ),
    "router device request without a limit": (
        set_at("spec.frontend.router.resources", {"requests": {"example.com/nic": 1}}),
        "spec.frontend.router.resources.limits.example.com/nic",
        None,
    ),
    "PegaFlow huge-page pool not a multiple of the page size": (
        set_at(
            "spec.kvCache.store",
            {"type": "pegaflow", "pegaflow": {"server": {**PEGAFLOW, "hugepages": True, "poolSize": "3Mi"}}},
        ),
        "spec.kvCache.store.pegaflow.server.poolSize",
        None,
    ),
    "render huge pages without cpu or memory": (
        set_at(
            "spec.frontend.render",
            {"enabled": True, "resources": {"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "2Mi"}}},
        ),
        "spec.frontend.render.resources",
        None,
    ),
    # tolerations
    "Exists with a value": (
        set_at("spec.decode.scheduling.tolerations", [{"key": "gpu", "operator": "Exists", "value": "yes"}]),
        "spec.decode.scheduling.tolerations[0]",
        None,
    ),
    "no key with Equal": (
        set_at("spec.decode.scheduling.tolerations", [{"value": "x"}]),
        "spec.decode.scheduling.tolerations[0]",
        None,
    ),
    "tolerationSeconds without NoExecute": (
        set_at("spec.decode.scheduling.tolerations", [{"key": "a", "operator": "Exists", "tolerationSeconds": 5}]),
        "spec.decode.scheduling.tolerations[0]",
        None,
    ),
    "router toleration key with a space": (
        set_at("spec.frontend.router.placement.tolerations", [{"key": "a b", "operator": "Exists"}]),
        "spec.frontend.router.placement.tolerations[0].key",
        None,
    ),
    # mounts and paths
    "Mooncake client SSD path with ..": (
        set_at(
            "spec.kvCache.store",
            {"type": "mooncake", "mooncake": {"mode": "standalone", "client": {"offload": {"path": "/mnt/../etc"}}}},
        ),
        "spec.kvCache.store.mooncake.client.offload.path",
        None,
    ),
    "PegaFlow SSD cache path with ..": (
        set_at(
            "spec.kvCache.store",
            {"type": "pegaflow", "pegaflow": {"server": {**PEGAFLOW, "ssdCache": {"path": "/mnt/../etc"}}}},
        ),
        "spec.kvCache.store.pegaflow.server.ssdCache.path",
        None,
    ),
    "disk tier on the model's path": (
        set_at("spec.kvCache", {"cpu": {"size": "8Gi"}, "disk": {"mountPath": "/models"}}),
        "spec.kvCache.disk.mountPath",
        None,
    ),
    "model on /dev/shm": (
        set_at("spec.model.storage", {"mountPath": "/dev/shm"}),
        "spec.model.storage.mountPath",
        None,
    ),
    "absolute subPath": (
        set_at("spec.model.storage", {"persistentVolumeClaim": {"claimName": "w", "subPath": "/abs"}}),
        "spec.model.storage.persistentVolumeClaim.subPath",
        None,
    ),
    "host path stepping out": (
        set_at("spec.model.storage", {"hostPath": {"path": "/models/../etc"}}),
        "spec.model.storage.hostPath.path",
        None,
    ),
    # placement
    "node affinity In without values": (
        set_at(
            "spec.decode.scheduling.affinity",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]
                    }
                }
            },
        ),
        "spec.decode.scheduling.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[0]",
        None,
    ),
    "affinity with an unknown field": (
        set_at("spec.decode.scheduling.affinity", {"nodeAfinity": {}}),
        "spec.decode.scheduling.affinity.nodeAfinity",
        None,
    ),
    "two spread constraints on one key": (
        set_at(
            "spec.decode.scheduling.topologySpreadConstraints",
            [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
            ],
        ),
        "spec.decode.scheduling.topologySpreadConstraints",
        None,
    ),
    # combinations and bypasses
    "LMCache transfer with a Mooncake store": (
        all_of(set_at("spec.transfer", {"connector": "lmcache"}), set_at("spec.kvCache.store", {"type": "mooncake"})),
        "spec.kvCache.store.type",
        None,
    ),
    "speculative extraConfig overriding the method": (
        all_of(
            set_at("spec.prefill.engine.speculative", {"method": "mtp", "numSpeculativeTokens": 1}),
            set_at(
                "spec.decode.engine.speculative",
                {"method": "mtp", "numSpeculativeTokens": 2, "extraConfig": {"method": "eagle3"}},
            ),
        ),
        "spec.decode.engine.speculative.extraConfig.method",
        None,
    ),
    "abbreviated hybrid flag": (
        all_of(HYBRID, set_at("spec.engine.extraArgs", ["--disable-hybrid-kv"])),
        "spec.engine.extraArgs[0]",
        None,
    ),
    "hybrid flag with underscores": (
        all_of(HYBRID, set_at("spec.decode.engine.extraArgs", ["--disable_hybrid_kv_cache_manager"])),
        "spec.decode.engine.extraArgs[0]",
        None,
    ),
    "owned flag with underscores": (
        set_at("spec.prefill.engine.extraArgs", ["--tensor_parallel_size=8"]),
        "spec.prefill.engine.extraArgs[0]",
        None,
    ),
    "custom decode over two nodes": (set_at("spec.decode.nodesPerReplica", 2), "spec.decode.nodesPerReplica", CUSTOM),
}
CEL_BACKED = {
    "LMCache transfer with a Mooncake store",
    "custom decode over two nodes",
    "Exists with a value",
    "no key with Equal",
    "tolerationSeconds without NoExecute",
    "valueFrom without a source",
    "valueFrom with two sources",
}


def case_document(change: Change, base: dict[str, Any] | None) -> dict[str, Any]:
    document = copy.deepcopy(base if base is not None else BASE)
    change(document)
    return document
