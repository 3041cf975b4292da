"""Flags and environment variables the operator renders itself, so users must set them through fields."""

from __future__ import annotations

ENGINE_HTTP_PORT = 8000
"""Every vLLM engine serves HTTP (the OpenAI API, /health and /metrics) on this container port."""

SHM_PATH = "/dev/shm"
HUGEPAGES_PATH = "/dev/hugepages"
KV_CONFIG_DIR = "/etc/disagg/kv"
"""Where the KV ConfigMap (Mooncake JSON, LMCache YAML) is mounted in engine containers."""
OPERATOR_MOUNT_PATHS = {SHM_PATH: "/dev/shm", HUGEPAGES_PATH: "huge pages", KV_CONFIG_DIR: "the KV configuration"}
"""Mount paths of engine containers the operator decides; the model and disk-tier paths are the user's."""

# flag (and its short aliases) -> the field that controls it
OWNED_ENGINE_FLAGS: dict[str, str] = {
    "--model": "spec.model.name",
    "--served-model-name": "spec.model.servedName",
    "--revision": "spec.model.revision",
    "--trust-remote-code": "spec.model.trustRemoteCode",
    "--host": "nothing (engines listen on all interfaces)",
    "--port": "nothing (the operator assigns engine ports)",
    "--uds": "nothing (engines serve TCP for the router)",
    "--tensor-parallel-size": "<pool>.tensorParallel",
    "-tp": "<pool>.tensorParallel",
    "--pipeline-parallel-size": "<pool>.pipelineParallel",
    "-pp": "<pool>.pipelineParallel",
    "--data-parallel-size": "<pool>.dataParallel",
    "-dp": "<pool>.dataParallel",
    "--data-parallel-size-local": "<pool>.nodesPerReplica",
    "-dpl": "<pool>.nodesPerReplica",
    "--data-parallel-rank": "nothing (the operator uses internal load balancing per replica)",
    "-dpn": "nothing (the operator uses internal load balancing per replica)",
    "--data-parallel-start-rank": "<pool>.nodesPerReplica",
    "-dpr": "<pool>.nodesPerReplica",
    "--data-parallel-address": "<pool>.nodesPerReplica",
    "-dpa": "<pool>.nodesPerReplica",
    "--data-parallel-rpc-port": "<pool>.nodesPerReplica",
    "-dpp": "<pool>.nodesPerReplica",
    "--data-parallel-hybrid-lb": "nothing (the operator chooses the load-balancing mode)",
    "-dph": "nothing (the operator chooses the load-balancing mode)",
    "--data-parallel-external-lb": "nothing (the operator chooses the load-balancing mode)",
    "-dpe": "nothing (the operator chooses the load-balancing mode)",
    "--headless": "<pool>.nodesPerReplica",
    "--nnodes": "<pool>.nodesPerReplica",
    "--node-rank": "<pool>.nodesPerReplica",
    "--master-addr": "<pool>.nodesPerReplica",
    "--master-port": "<pool>.nodesPerReplica",
    "--enable-expert-parallel": "<pool>.expertParallel",
    "-ep": "<pool>.expertParallel",
    "--decode-context-parallel-size": "<pool>.decodeContextParallel",
    "-dcp": "<pool>.decodeContextParallel",
    "--prefill-context-parallel-size": "<pool>.prefillContextParallel",
    "-pcp": "<pool>.prefillContextParallel",
    "--kv-transfer-config": "spec.transfer and spec.kvCache",
    "--kv-offloading-size": "spec.kvCache.cpu",
    "--kv-offloading-backend": "spec.kvCache.cpu",
    "--max-model-len": "engine.maxModelLen",
    "--block-size": "engine.blockSize",
    "--kv-cache-dtype": "engine.kvCacheDtype",
    "--gpu-memory-utilization": "engine.gpuMemoryUtilization",
    "--max-num-seqs": "engine.maxNumSeqs",
    "--max-num-batched-tokens": "engine.maxNumBatchedTokens",
    "--enable-prefix-caching": "engine.prefixCaching",
    "--no-enable-prefix-caching": "engine.prefixCaching",
    "--disable-prefix-caching": "engine.prefixCaching",
    "--speculative-config": "engine.speculative",
    "-sc": "engine.speculative",
    "--all2all-backend": "engine.all2allBackend",
    "--shutdown-timeout": "engine.shutdownTimeoutSeconds",
    "--chat-template": "spec.engine.chat.template",
    "--chat-template-content-format": "spec.engine.chat.templateContentFormat",
    "--default-chat-template-kwargs": "spec.engine.chat.defaultTemplateKwargs",
    "--reasoning-parser": "spec.engine.chat.reasoningParser",
    "--tool-call-parser": "spec.engine.chat.toolCallParser",
    "--enable-auto-tool-choice": "spec.engine.chat.enableAutoToolChoice",
    "--tokens-only": "spec.frontend.render.enabled",
    "--no-disable-hybrid-kv-cache-manager": "nothing (the operator keeps the hybrid KV cache manager on for "
    "hybrid models)",
    "--api-server-count": "nothing (one API server per replica keeps the router's view exact)",
    "-asc": "nothing (one API server per replica keeps the router's view exact)",
}

OWNED_ENGINE_ENV: dict[str, str] = {
    "POD_IP": "nothing (the operator sets it to the pod IP)",
    "DISAGG_PREFILL_HOST": "nothing (the operator sets it to the prefill pool's Service)",
    "DISAGG_DECODE_HOST": "nothing (the operator sets it to the decode pool's Service)",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "nothing (it is always the pod IP)",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "spec.transfer.nixl.sideChannelPort",
    "VLLM_HOST_IP": "nothing (it is always the pod IP)",
    "POD_NAME": "nothing (it is always the pod's name, which engine ids derive from)",
    "PYTHONHASHSEED": "spec.engine.pythonHashSeed",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT": "spec.transfer.mooncake.bootstrapPort",
    "MOONCAKE_CONFIG_PATH": "spec.kvCache.store.mooncake",
    "MOONCAKE_PREFERRED_SEGMENT": "spec.kvCache.store.mooncake.client (the client on the engine's node)",
    "HOST_IP": "nothing (it is always the node's address)",
    "PEGAFLOW_HOST": "spec.kvCache.store.pegaflow (the server on the engine's node)",
    "PEGAFLOW_PORT": "spec.kvCache.store.pegaflow.server.port",
    "LMCACHE_CONFIG_FILE": "spec.kvCache.store.lmcache or spec.transfer.lmcache",
    "HF_HOME": "spec.model.storage.mountPath",
    "HF_HUB_OFFLINE": "spec.model.storage.offline",
    "HF_TOKEN": "spec.model.storage.huggingFace.tokenSecretRef",
}

# Environment variables that mirror a field: setting both would leave one silently ignored.
FIELD_BACKED_ENGINE_ENV: dict[str, tuple[str, str]] = {
    "UCX_TLS": ("ucx_tls", "spec.transfer.network.ucxTls"),
    "UCX_NET_DEVICES": ("ucx_net_devices", "spec.transfer.network.ucxNetDevices"),
    "FI_PROVIDER": ("fi_provider", "spec.transfer.network.fiProvider"),
}

OWNED_ROUTER_FLAGS: dict[str, str] = {
    "--host": "nothing (the router listens on all interfaces)",
    "--port": "spec.frontend.router.port",
    "--prometheus-host": "nothing (metrics listen on all interfaces)",
    "--prometheus-port": "spec.frontend.router.metricsPort",
    "--vllm-pd-disaggregation": "nothing (always on)",
    "--pd-disaggregation": "nothing (always on)",
    "--service-discovery": "nothing (always on)",
    "--selector": "nothing (the operator selects the pools' pods)",
    "--prefill-selector": "nothing (the operator selects the pools' pods)",
    "--decode-selector": "nothing (the operator selects the pools' pods)",
    "--service-discovery-namespace": "nothing (the DisaggDeployment's namespace)",
    "--service-discovery-port": "nothing (the engines' port)",
    "--prefill": "nothing (pods are discovered)",
    "--decode": "nothing (pods are discovered)",
    "--kv-connector": "spec.transfer.connector",
    "--vllm-discovery-address": "spec.transfer.moriio.proxyPingPort",
    "--policy": "spec.frontend.router.policy",
    "--prefill-policy": "spec.frontend.router.prefillPolicy",
    "--decode-policy": "spec.frontend.router.decodePolicy",
}

OWNED_FRONTEND_FLAGS: dict[str, str] = {
    "--host": "nothing (the frontend listens on all interfaces)",
    "--port": "spec.frontend.router.port",
    "--admin-port": "spec.frontend.router.adminPort",
    "--flow": "spec.transfer (the connector decides the flow)",
    "--render": "spec.frontend.render.enabled",
    "--no-render": "spec.frontend.render.enabled",
    "--discovery": "nothing (engines are discovered from their pods)",
    "--namespace": "nothing (the DisaggDeployment's namespace)",
    "--deployment": "nothing (the operator selects the pools' pods)",
    "--prefill-selector": "nothing (the operator selects the pools' pods)",
    "--decode-selector": "nothing (the operator selects the pools' pods)",
    "--render-selector": "nothing (the operator selects the render tier's pods)",
    "--engine-port": "nothing (engine pods carry their port)",
    "--prefill": "nothing (pods are discovered)",
    "--decode": "nothing (pods are discovered)",
    "--render-url": "nothing (pods are discovered)",
    "--moriio-registration": "nothing (MoRI-IO engines are discovered from their pods)",
    "--prefill-policy": "spec.frontend.router.prefillPolicy",
    "--decode-policy": "spec.frontend.router.decodePolicy",
    "--conversation-ttl": "spec.transfer.nixl.bidirectional.blocksTtlSeconds",
    "--decoder-blocks-ttl": "spec.transfer.nixl.bidirectional.blocksTtlSeconds",
    "--model": "spec.model.servedName",
}
"""`disagg frontend` flags the operator renders (operator/disagg/plan/frontend.py)."""

ROUTER_ENV = ("POD_NAMESPACE", "DISAGG_PREFILL_HOST", "DISAGG_DECODE_HOST")
"""Variables every router container gets from the operator."""
