"""The resolved view: the facts about a deployment and its pools that every planner reads, decided once."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.api.resolve import LmcacheServer, ReplicaLayout, pinned_host_bytes, replica_layout, resolve_deployment
from disagg.names import LWS_WORKER_INDEX_LABEL
from tests.support.rendering import deployment_from_yaml


def resolved(spec: str) -> Any:
    text = f"apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {{name: t}}\nspec:\n{spec}"
    return resolve_deployment(deployment_from_yaml(text), "ns")


@pytest.mark.parametrize(
    ("pool", "layout"),
    [
        ("{dataParallel: 4, tensorParallel: 2}", ReplicaLayout("single", 1, 4)),
        ("{dataParallel: 16, nodesPerReplica: 2}", ReplicaLayout("data-parallel", 2, 8)),
        ("{tensorParallel: 16, nodesPerReplica: 2}", ReplicaLayout("tensor-parallel", 2, 1)),
        ("{tensorParallel: 8, pipelineParallel: 4, nodesPerReplica: 4}", ReplicaLayout("tensor-parallel", 4, 1)),
    ],
)
def test_a_replica_spreads_over_pods_by_its_parallelism(pool: str, layout: ReplicaLayout) -> None:
    view = resolved(f"  model: {{name: m}}\n  decode: {pool}\n")
    assert view.decode.layout == layout
    assert replica_layout(view.decode.spec) == layout  # the rules' function and the view agree


def test_gpus_per_pod_split_the_replica_over_its_nodes() -> None:
    view = resolved("  model: {name: m}\n  decode: {tensorParallel: 4, dataParallel: 8, nodesPerReplica: 4}\n")
    assert (view.decode.gpus_per_replica, view.decode.gpus_per_pod) == (32, 8)


def test_only_the_leaders_of_multi_node_replicas_serve_http() -> None:
    view = resolved("  model: {name: m}\n  decode: {dataParallel: 4, nodesPerReplica: 2}\n")
    assert view.decode.api_selector == {**view.decode.selector, LWS_WORKER_INDEX_LABEL: "0"}
    assert (
        view.prefill.api_selector
        == view.prefill.selector
        == {"disagg.dev/deployment": "t", "disagg.dev/role": "prefill"}
    )


def test_a_custom_engine_runs_one_pod_per_replica() -> None:
    view = resolved(
        "  model: {name: m}\n"
        "  transfer: {connector: custom, custom: {connectorClass: X, routerProtocol: nixl}}\n"
        "  decode: {customContainer: {image: x/y:1}}\n"
    )
    assert not view.decode.layout.multi_node and view.decode.api_selector == view.decode.selector


def test_pools_see_the_shared_engine_settings_with_their_own_laid_over() -> None:
    view = resolved(
        "  model: {name: m}\n"
        "  engine: {image: a/vllm:1, maxNumSeqs: 64, env: [{name: A, value: '1'}, {name: B, value: '1'}],"
        " extraArgs: [--x]}\n"
        "  decode: {engine: {maxNumSeqs: 256, imagePullPolicy: Always, env: [{name: B, value: '2'}],"
        " extraArgs: [--y]}}\n"
    )
    decode, prefill = view.decode, view.prefill
    assert (decode.engine.max_num_seqs, prefill.engine.max_num_seqs) == (256, 64)
    assert [(v.name, v.value) for v in decode.engine.env] == [("A", "1"), ("B", "2")]
    assert decode.engine.extra_args == ["--x", "--y"]
    assert (decode.image, decode.image_pull_policy) == ("a/vllm:1", "Always")
    assert (prefill.image_pull_policy, view.shared_image) == ("IfNotPresent", "a/vllm:1")


def test_connector_settings_default_when_their_block_is_omitted() -> None:
    transfer = resolved("  model: {name: m}\n").transfer
    assert transfer.nixl.side_channel_port == 5600 and transfer.nixl.backends == ["UCX"]
    assert (transfer.mooncake.bootstrap_port, transfer.moriio.proxy_ping_port) == (8998, 36367)


def test_no_lmcache_server_unless_something_uses_lmcache() -> None:
    assert resolved("  model: {name: m}\n").lmcache is None


def test_the_lmcache_store_block_describes_the_server_and_the_transfer_chunk_size_wins() -> None:
    view = resolved(
        "  model: {name: m}\n"
        "  engine: {image: a/vllm:1}\n"
        "  transfer: {connector: lmcache, lmcache: {chunkSize: 512, serverPort: 7000, serverSize: 8Gi}}\n"
        "  kvCache: {store: {type: lmcache, lmcache: {port: 7001, size: 16Gi, chunkSize: 128}}}\n"
    )
    assert view.lmcache == LmcacheServer(port=7001, size="16Gi", image="a/vllm:1", chunk_size=512)


def test_an_lmcache_transfer_without_a_store_uses_its_own_settings_or_their_defaults() -> None:
    view = resolved("  model: {name: m}\n  transfer: {connector: lmcache}\n")
    assert view.lmcache == LmcacheServer(port=65432, size="32Gi", image="vllm/vllm-openai:v0.33.0", chunk_size=None)


def test_a_mooncake_store_gets_its_defaults() -> None:
    view = resolved("  model: {name: m}\n  kvCache: {store: {type: mooncake}}\n")
    assert view.mooncake_store is not None and view.mooncake_store.master_port == 50051
    assert view.lmcache is None


CUSTOM_CONNECTOR = "connector: custom, custom: {connectorClass: PluginConnector"


@pytest.mark.parametrize(
    ("transfer", "flow"),
    [
        ("{}", "pull"),
        ("{nixl: {bidirectional: {enabled: true}}}", "bidirectional"),
        ("{connector: nixl-push}", "push"),
        ("{connector: moriio}", "moriio-write"),
        ("{connector: moriio, moriio: {mode: read}}", "moriio-read"),
        ("{connector: mooncake}", "mooncake"),
        ("{connector: lmcache}", "pull"),
        (f"{{{CUSTOM_CONNECTOR}, routerProtocol: nixl}}}}", "pull"),
        (f"{{{CUSTOM_CONNECTOR}, routerProtocol: mooncake}}}}", "mooncake"),
        (f"{{{CUSTOM_CONNECTOR}, routerProtocol: moriio}}}}", "moriio-write"),
        (f"{{{CUSTOM_CONNECTOR}, routerProtocol: moriio, extraConfig: {{read_mode: true}}}}}}", "moriio-read"),
        (f"{{{CUSTOM_CONNECTOR}}}}}", None),
    ],
)
def test_each_transfer_drives_its_flow(transfer: str, flow: str | None) -> None:
    """The flow the router drives follows from the connector (and a custom connector's protocol) alone; a custom
    connector that names no protocol has none, so no P/D router is planned for it."""
    assert resolved(f"  model: {{name: m}}\n  transfer: {transfer}\n").flow == flow


def test_a_pool_is_found_by_its_role() -> None:
    view = resolved("  model: {name: m}\n  prefill: {replicas: 3}\n  decode: {replicas: 2}\n")
    assert view.pool("prefill") is view.prefill and view.pool("prefill").spec.replicas == 3
    assert view.pool("decode") is view.decode and view.pool("decode").spec.replicas == 2


def test_an_engine_pins_host_memory_for_each_kv_tier_its_pool_uses() -> None:
    """The CPU tier's size, plus the Mooncake store's segment and local buffer for the pools in the store."""
    text = "apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {name: t}\nspec:\n  model: {name: m}\n"
    text += "  kvCache:\n    cpu: {size: 8Gi, pools: [prefill, decode]}\n"
    text += "    store: {type: mooncake, pools: [decode], mooncake: {globalSegmentSize: 16Gi, localBufferSize: 2Gi}}\n"
    spec = deployment_from_yaml(text).spec
    gib = 2**30
    assert pinned_host_bytes(spec, "prefill") == 8 * gib
    assert pinned_host_bytes(spec, "decode") == (8 + 16 + 2) * gib
