"""Hypothesis strategies for DisaggDeployment documents an adversarial user could write (the fuzz tier, D78).

A document is one of the examples with a few edits laid over it. Each edit sets one field to a value drawn from
that field's realistic domain, valid values and the boundary cases around them (ports at 65535, quantities with a
trailing newline, keys with a space, text from every Unicode plane, names ending like a child's, ...), so that
most documents are accepted or refused by exactly one rule, and combinations of edits reach what no single case
does. The vocabulary follows the API (docs/api.md); a field it does not know is refused by the schema, which the
generic mutations of tests/unit/api/test_property.py cover.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from disagg.api.documents import load_documents
from tests.conftest import EXAMPLES

BASES: list[dict[str, Any]] = [load_documents(path.read_text())[0].content for path in EXAMPLES]

POOL = st.sampled_from(["prefill", "decode"])
TEXT = st.one_of(
    st.sampled_from(["", "x", "a b", "ünïcödé", "🚀 emoji", "\U0001f600" * 3, "line\nbreak", "tab\there", "$(POD_IP)"]),
    st.text(max_size=12),
)
QUANTITY = st.sampled_from(["1", "500m", "2", "16Gi", "64Gi", "1Gi", "2Mi", "0", "1.5", "0.5", "16Gi\n", "-1", "1e3"])
SMALL = st.sampled_from([0, 1, 2, 3, 4, 8])
PORT = st.sampled_from([1, 80, 5556, 5557, 5600, 7000, 8000, 8080, 9000, 9003, 65000, 65534, 65535])
LABEL_KEY = st.sampled_from(
    ["team", "app", "example.com/tier", "a b", "-bad", "x" * 64, "disagg.dev/role", "app.kubernetes.io/name", "k/"]
)
LABEL_VALUE = st.sampled_from(["", "a", "gpu", "a b", "gpu-", "v1.2_3", "x" * 63, "x" * 64])
ENV_NAME = st.sampled_from(
    ["A", "MODE", "VLLM_LOGGING_LEVEL", "POD_IP", "HF_HOME", "PYTHONHASHSEED", "DISAGG_DECODE_HOST", "1A", "A.B"]
)
RESOURCE_NAME = st.sampled_from(
    ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "example.com/nic", "hugepages-2Mi", "storage", "gpu"]
)
ROLLOUT = st.sampled_from([0, 1, 2, -1, "0%", "25%", "100%", "150%", "5", "one"])
TAINT_EFFECT = st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])
ARGS = st.sampled_from(
    [
        "--max-num-seqs=8",
        "--enforce-eager",
        "--disable-hybrid-kv",
        "--disable_hybrid_kv_cache_manager",
        "--tensor_parallel_size=2",
        "--port=9",
        "--dtype",
        "bfloat16",
        "🚀",
    ]
)


def _env_var() -> st.SearchStrategy[dict[str, Any]]:
    value_from = st.sampled_from(
        [
            {"fieldRef": {"fieldPath": "metadata.name"}},
            {"fieldRef": {"fieldPath": "status.podIP"}},
            {"fieldRef": {"fieldPath": "spec.foo"}},
            {"secretKeyRef": {"name": "s", "key": "token"}},
            {"secretKeyRef": {"name": "s", "key": "a/b"}},
            {"configMapKeyRef": {"name": "c", "key": "k", "optional": True}},
            {},
            {"fieldRef": {"fieldPath": "metadata.name"}, "secretKeyRef": {"name": "s", "key": "k"}},
        ]
    )
    return st.one_of(
        st.builds(lambda name, value: {"name": name, "value": value}, ENV_NAME, TEXT),
        st.builds(lambda name, source: {"name": name, "valueFrom": source}, ENV_NAME, value_from),
    )


ENV = st.lists(_env_var(), max_size=3)
TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["gpu", "nvidia.com/gpu", "a b", ""]),
        "operator": st.sampled_from(["Equal", "Exists"]),
        "value": st.sampled_from(["", "yes", "a b"]),
        "effect": TAINT_EFFECT,
        "tolerationSeconds": st.sampled_from([0, 5, 300]),
    },
)
REQUIREMENTS = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(RESOURCE_NAME, QUANTITY, max_size=3),
        "limits": st.dictionaries(RESOURCE_NAME, QUANTITY, max_size=3),
    },
)
NODE_AFFINITY = st.builds(
    lambda operator, values: {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": operator, **values}]}]
            }
        }
    },
    st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt"]),
    st.sampled_from([{}, {"values": []}, {"values": ["a"]}, {"values": ["1"]}, {"values": ["a", "b"]}]),
)
SPREAD = st.lists(
    st.fixed_dictionaries(
        {
            "maxSkew": st.sampled_from([0, 1, 2]),
            "topologyKey": st.sampled_from(["zone", "kubernetes.io/hostname"]),
            "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
        },
        optional={"minDomains": st.sampled_from([1, 2]), "matchLabelKeys": st.just(["pod-template-hash"])},
    ),
    max_size=2,
)


OPERATORS_FRONTEND = {
    "image": "ghcr.io/disagg-dev/disagg-operator:0.1.0",
    "command": ["disagg", "frontend"],
    "extraPorts": {"admin": 8001},
}
"""The operator's own frontend (known by its admin port): engine pods get the serving readiness gate, a pre-stop
wait and a drain timeout (D102, D110)."""

PLACEMENT = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2),
        "tolerations": st.lists(TOLERATION, max_size=2),
    },
)
IMAGE = st.sampled_from(["registry.example.com/kv:1", "kv:latest", "a b", "UPPER:1", "kv@sha256:" + "a" * 64])
HOST_PATH = st.sampled_from(["/mnt/nvme/kv", "/", "/mnt/../etc", "relative", "/mnt/nvme/kv/", "/a b"])
SSD = st.fixed_dictionaries({"path": HOST_PATH}, optional={"size": QUANTITY})
POLICY = st.sampled_from(
    [
        "random",
        "round_robin",
        "least_loaded",
        "cache_aware",
        "kv_aware",
        "power_of_two",
        "consistent_hash",
        "sticky_least_loaded",
    ]
)
ROUTER_ARGS = st.sampled_from(
    ["--revision-policy", "newest", "--request-timeout", "900", "--port=1", "--policy", "--admin-port=9", "🚀"]
)
MOONCAKE_STORE = st.fixed_dictionaries(
    {"type": st.just("mooncake")},
    optional={
        "pools": st.sampled_from([["prefill"], ["decode"], ["prefill", "decode"]]),
        "mooncake": st.fixed_dictionaries(
            {},
            optional={
                "mode": st.sampled_from(["embedded", "standalone"]),
                "client": st.fixed_dictionaries(
                    {},
                    optional={
                        "segmentSize": QUANTITY,
                        "port": PORT,
                        "segmentPort": PORT,
                        "offload": SSD,
                        "image": IMAGE,
                        "placement": PLACEMENT,
                    },
                ),
                "tenant": st.sampled_from(["agentx", "a b", "t" * 64, "t" * 65]),
                "globalSegmentSize": QUANTITY,
                "localBufferSize": QUANTITY,
                "protocol": st.sampled_from(["rdma", "tcp"]),
                "masterPort": PORT,
                "metricsPort": PORT,
            },
        ),
    },
)
PEGAFLOW_STORE = st.fixed_dictionaries(
    {
        "type": st.just("pegaflow"),
        "pegaflow": st.fixed_dictionaries(
            {
                "server": st.fixed_dictionaries(
                    {"image": IMAGE},
                    optional={
                        "poolSize": QUANTITY,
                        "port": PORT,
                        "httpPort": PORT,
                        "ssdCache": SSD,
                        "nics": st.lists(st.sampled_from(["mlx5_0", "mlx5_1", "eth0:1", "a b"]), max_size=2),
                        "hugepages": st.booleans(),
                        "placement": PLACEMENT,
                    },
                )
            },
            optional={
                "metaserver": st.fixed_dictionaries(
                    {}, optional={"enabled": st.booleans(), "port": PORT, "image": IMAGE}
                )
            },
        ),
    },
    optional={"pools": st.sampled_from([["prefill"], ["decode"], ["prefill", "decode"]])},
)


OBJECT_NAME = st.sampled_from(["high", "a.b", "x" * 63, "x" * 253, "Bad", "a-"])
AUTOSCALING = st.fixed_dictionaries(
    {"enabled": st.booleans()},
    optional={
        "controller": st.sampled_from(["operator", "external"]),
        "minReplicas": st.sampled_from([0, 1, 4]),
        "maxReplicas": st.sampled_from([1, 4, 10000]),
    },
)
DURATION = st.sampled_from(["30s", "1m", "500ms", "1h30m", "0s", "2.5s"])
SCALING = st.fixed_dictionaries(
    {},
    optional={
        "interval": DURATION,
        "slo": st.fixed_dictionaries({}, optional={"ttftP90": DURATION, "itlP90": DURATION}),
        "scaleUp": st.fixed_dictionaries({}, optional={"stabilizationWindow": DURATION, "maxStep": SMALL}),
        "scaleDown": st.fixed_dictionaries({}, optional={"stabilizationWindow": DURATION, "maxStep": SMALL}),
        "maxGpus": st.sampled_from([1, 8, 1000000]),
        "ratio": st.fixed_dictionaries(
            {}, optional={"min": st.sampled_from([0, 0.5, 2]), "max": st.sampled_from([0, 1, 3])}
        ),
    },
)
CUSTOM_CONTAINER = st.fixed_dictionaries(
    {"image": IMAGE},
    optional={
        "command": st.lists(st.sampled_from(["serve", "--x", "🚀", "$(POD_IP)"]), max_size=2),
        "args": st.lists(ARGS, max_size=2),
        "port": PORT,
        "extraPorts": st.dictionaries(
            st.sampled_from(["metrics", "side", "http", "a-b", "Bad", "x" * 16, "kv-1"]), PORT, max_size=2
        ),
        "healthPath": st.sampled_from(["/health", "/", "/a b"]),
        "env": ENV,
    },
)
CUSTOM_TRANSFER = st.fixed_dictionaries(
    {
        "connector": st.just("custom"),
        "custom": st.fixed_dictionaries(
            {"connectorClass": st.sampled_from(["PluginConnector", "a b"])},
            optional={
                "modulePath": st.sampled_from(["plugin.connector", "🚀"]),
                "extraConfig": st.dictionaries(st.sampled_from(["a", "method", "kv_role"]), TEXT, max_size=2),
                "routerProtocol": st.sampled_from(["nixl", "mooncake", "moriio"]),
            },
        ),
    },
)


def _pool_edits(pool: str) -> list[tuple[str, st.SearchStrategy[Any]]]:
    at = f"spec.{pool}"
    return [
        (f"{at}.replicas", SMALL),
        (f"{at}.tensorParallel", st.sampled_from([1, 2, 4, 8])),
        (f"{at}.dataParallel", st.sampled_from([1, 2, 3, 8])),
        (f"{at}.nodesPerReplica", st.sampled_from([1, 2])),
        (f"{at}.resources.cpu", QUANTITY),
        (f"{at}.resources.memory", QUANTITY),
        (f"{at}.resources.shmSize", QUANTITY),
        (f"{at}.resources.gpuResourceName", st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "gpu", "memory"])),
        (f"{at}.resources.extra", st.dictionaries(RESOURCE_NAME, QUANTITY, max_size=2)),
        (f"{at}.podLabels", st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2)),
        (f"{at}.podAnnotations", st.dictionaries(LABEL_KEY, TEXT, max_size=2)),
        (f"{at}.scheduling.nodeSelector", st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2)),
        (f"{at}.scheduling.tolerations", st.lists(TOLERATION, max_size=2)),
        (f"{at}.scheduling.affinity", NODE_AFFINITY),
        (f"{at}.scheduling.topologySpreadConstraints", SPREAD),
        (f"{at}.rollout.maxSurge", ROLLOUT),
        (f"{at}.rollout.maxUnavailable", ROLLOUT),
        (f"{at}.engine.env", ENV),
        (f"{at}.engine.extraArgs", st.lists(ARGS, max_size=3)),
        (f"{at}.engine.shutdownTimeoutSeconds", st.sampled_from([0, 30, 86_400])),
        (f"{at}.terminationGracePeriodSeconds", st.sampled_from([0, 65, 86_400])),
        (f"{at}.engine.speculative", st.sampled_from([None, {"method": "mtp", "numSpeculativeTokens": 1}])),
        (f"{at}.pipelineParallel", st.sampled_from([1, 2, 4])),
        (f"{at}.expertParallel", st.booleans()),
        (f"{at}.decodeContextParallel", st.sampled_from([1, 2])),
        (f"{at}.gpusPerNode", st.sampled_from([1, 4, 8])),
        (f"{at}.scheduling.priorityClassName", OBJECT_NAME),
        (f"{at}.scheduling.schedulerName", OBJECT_NAME),
        (f"{at}.scheduling.runtimeClassName", OBJECT_NAME),
        (f"{at}.scheduling.replicaTopologyKey", st.sampled_from(["kubernetes.io/hostname", "zone", "a b"])),
        (f"{at}.serviceAccountName", OBJECT_NAME),
        (f"{at}.terminationGracePeriodSeconds", st.sampled_from([0, 30, 86400])),
        (f"{at}.autoscaling", AUTOSCALING),
        (f"{at}.engine.image", IMAGE),
        (f"{at}.engine.imagePullPolicy", st.sampled_from(["Always", "IfNotPresent", "Never"])),
        (f"{at}.engine.maxModelLen", st.sampled_from([16, 4096, 16777216])),
        (f"{at}.engine.startupTimeoutSeconds", st.sampled_from([60, 86400])),
        (f"{at}.engine.shutdownTimeoutSeconds", st.sampled_from([0, 30, 86400])),
        (f"{at}.engine.nofileLimit", st.sampled_from([1024, 16777216])),
        (f"{at}.engine.gpuMemoryUtilization", st.sampled_from([0, 0.5, 0.9, 1])),
    ]


EDITS: list[tuple[str, st.SearchStrategy[Any]]] = [
    *_pool_edits("prefill"),
    *_pool_edits("decode"),
    ("metadata.name", st.sampled_from(["m", "a" * 40, "a" * 41, "x-router", "x-decode-pool", "Ab", "x.y", "qwen"])),
    ("metadata.annotations", st.dictionaries(LABEL_KEY, st.one_of(TEXT, st.just("x" * 20_000)), max_size=2)),
    ("spec.model.name", st.sampled_from(["org/model", "Qwen/Qwen3-0.6B", "nvidia/Nemotron-H-8B", "/models/x", "🚀"])),
    ("spec.model.family", st.sampled_from(["auto", "dense", "moe", "mla", "hybrid-ssm"])),
    ("spec.model.storage.mountPath", st.sampled_from(["/models", "/data", "/dev/shm", "/etc/disagg/kv", "/kv-cache"])),
    ("spec.model.storage.hostPath", st.sampled_from([{"path": "/mnt/models"}, {"path": "/models/../etc"}])),
    (
        "spec.model.storage.persistentVolumeClaim",
        st.sampled_from(
            [{"claimName": "w"}, {"claimName": "w", "subPath": "qwen"}, {"claimName": "w", "subPath": "/a"}]
        ),
    ),
    ("spec.engine.env", ENV),
    ("spec.engine.extraArgs", st.lists(ARGS, max_size=3)),
    ("spec.engine.chatTemplate", TEXT),
    ("spec.engine.maxModelLen", st.sampled_from([1024, 32768])),
    ("spec.transfer.connector", st.sampled_from(["nixl", "nixl-push", "mooncake", "moriio", "lmcache"])),
    ("spec.transfer", CUSTOM_TRANSFER),
    (
        "*",  # a custom decode container needs the custom connector (a CEL rule): both in one edit
        st.builds(
            lambda transfer, container: {"spec.transfer": transfer, "spec.decode.customContainer": container},
            CUSTOM_TRANSFER,
            CUSTOM_CONTAINER,
        ),
    ),
    ("spec.frontend.router.customContainer", CUSTOM_CONTAINER),
    ("spec.transfer.loadFailurePolicy", st.sampled_from(["fail", "recompute"])),
    ("spec.transfer.bufferDevice", st.sampled_from(["cuda", "cpu", "xpu"])),
    ("spec.transfer.nixl.backends", st.lists(st.sampled_from(["UCX", "LIBFABRIC", "a b"]), max_size=2)),
    ("spec.transfer.mooncake.protocol", st.sampled_from(["rdma", "tcp"])),
    ("spec.transfer.mooncake.devices", st.lists(st.sampled_from(["mlx5_0", "a b", "🚀"]), max_size=2)),
    ("spec.transfer.network.ucxNetDevices", TEXT),
    ("spec.transfer.network.fiProvider", TEXT),
    ("spec.scaling", SCALING),
    ("spec.model.servedName", st.sampled_from(["qwen", "a b", "🚀", "x" * 300])),
    ("spec.model.revision", st.sampled_from(["main", "a" * 40, "a b"])),
    ("spec.model.trustRemoteCode", st.booleans()),
    ("spec.engine.image", IMAGE),
    ("spec.engine.pythonHashSeed", st.sampled_from([0, 1, 4294967295])),
    ("spec.engine.maxNumSeqs", st.sampled_from([1, 256, 1048576])),
    ("spec.engine.kvCacheDtype", st.sampled_from(["auto", "fp8", "fp8_e4m3"])),
    ("spec.frontend.render.image", IMAGE),
    ("spec.frontend.render.workers", st.sampled_from([1, 2, 64])),
    ("spec.frontend.render.placement", PLACEMENT),
    ("spec.frontend.router.placement.nodeSelector", st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2)),
    ("spec.transfer.nixl.bidirectional.enabled", st.booleans()),
    ("spec.transfer.moriio.mode", st.sampled_from(["read", "write"])),
    ("spec.transfer.mooncake.bootstrapPort", PORT),
    ("spec.transfer.network.hostNetwork", st.booleans()),
    ("spec.transfer.network.ipcLock", st.booleans()),
    ("spec.transfer.nixl.sideChannelPort", PORT),
    ("spec.transfer.moriio.handshakePort", PORT),
    ("spec.transfer.moriio.notifyPort", PORT),
    ("spec.transfer.moriio.proxyPingPort", PORT),
    ("spec.transfer.network.hugepages", st.sampled_from([None, {"size": "1Gi"}, {"size": "3Mi"}, {"size": "2Mi"}])),
    ("spec.transfer.network.rdma", st.sampled_from([None, {"resourceName": "rdma/ib", "count": 2}])),
    ("spec.transfer.network.ucxTls", st.sampled_from(["rc,cuda_copy", "tcp"])),
    ("spec.kvCache.cpu", st.sampled_from([None, {"size": "8Gi"}, {"size": "32Gi", "pools": ["decode"]}])),
    (
        "spec.kvCache.disk",
        st.sampled_from([None, {"mountPath": "/kv-cache"}, {"mountPath": "/models"}, {"mountPath": "/dev/shm"}]),
    ),
    (
        "spec.kvCache.store",
        st.one_of(
            st.sampled_from([None, {"type": "mooncake"}, {"type": "lmcache"}, {"type": "pegaflow"}]),
            MOONCAKE_STORE,
            PEGAFLOW_STORE,
        ),
    ),
    ("spec.frontend.router.implementation", st.sampled_from(["disagg-frontend", "vllm-router"])),
    ("spec.frontend.router.replicas", SMALL),
    ("spec.frontend.router.image", IMAGE),
    ("spec.frontend.router.policy", POLICY),
    ("spec.frontend.router.prefillPolicy", POLICY),
    ("spec.frontend.router.decodePolicy", POLICY),
    ("spec.frontend.router.extraArgs", st.lists(ROUTER_ARGS, max_size=3)),
    ("spec.frontend.router.adminPort", PORT),
    ("spec.frontend.router.port", PORT),
    ("spec.frontend.router.metricsPort", PORT),
    ("spec.frontend.router.env", ENV),
    ("spec.frontend.router.resources", REQUIREMENTS),
    ("spec.frontend.router.placement.tolerations", st.lists(TOLERATION, max_size=2)),
    ("spec.frontend.service.labels", st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2)),
    ("spec.frontend.service.annotations", st.dictionaries(LABEL_KEY, TEXT, max_size=2)),
    ("spec.frontend.router.customContainer", st.sampled_from([None, OPERATORS_FRONTEND])),
    (
        "spec.serving.check",
        st.sampled_from(
            [{"mode": "Report"}, {"mode": "Off"}, {"interval": "500ms"}, {"deadline": "2m", "maxPairs": 1}]
        ),
    ),
    ("spec.serving.remediation", st.sampled_from([{"action": "Drain"}, {"cooldown": "1s"}, {"drainFor": "1s"}])),
    ("spec.serving.rollout", st.sampled_from([{"onStuck": "Rollback"}, {"progressDeadline": "30s"}])),
    ("spec.frontend.service.type", st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"])),
    ("spec.frontend.service.port", PORT),
    ("spec.frontend.render.enabled", st.booleans()),
    ("spec.frontend.render.replicas", SMALL),
    ("spec.frontend.render.port", PORT),
    ("spec.frontend.render.env", ENV),
    ("spec.frontend.render.resources", REQUIREMENTS),
]


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path below the document (creating mappings on the way); None removes the field."""
    *parents, last = path.split(".")
    node = document
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    if value is None:
        node.pop(last, None)
    else:
        node[last] = copy.deepcopy(value)


@st.composite
def documents(draw: st.DrawFn, max_edits: int = 5) -> dict[str, Any]:
    """An example with up to `max_edits` fields set from their domains."""
    document = copy.deepcopy(draw(st.sampled_from(BASES)))
    edits = draw(st.lists(st.sampled_from(range(len(EDITS))), max_size=max_edits, unique=True))
    for index in edits:
        path, values = EDITS[index]
        value = draw(values)
        for at, one in value.items() if path == "*" else [(path, value)]:
            set_path(document, at, one)
    return document
