"""Every environment variable the operator renders is refused in the user's lists that feed the same container:
containers key env by name, so a second entry makes server-side apply refuse the object (regression: POD_IP and
DISAGG_DECODE_HOST in spec.engine.env, HF_HOME in a custom engine's env, POD_NAMESPACE in the router's env were
all accepted). The examples reach every variable the operator sets (D72)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from tests.conftest import EXAMPLES
from tests.support.rendering import pod_templates, rendered

USER_LIST = {
    "vllm": ("engine", "env"),
    "engine": ("decode", "customContainer", "env"),
    "router": ("frontend", "router", "env"),
    "render": ("frontend", "render", "env"),
}


def _user_names(spec: dict[str, Any]) -> set[str]:
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "env" and isinstance(value, list):
                    names.update(var["name"] for var in value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(spec)
    return names


def _cases() -> list[tuple[Path, str, str]]:
    cases = set()
    for path in EXAMPLES:
        document = load_documents(path.read_text())[0].content
        given = _user_names(document["spec"])
        for obj in rendered(path):
            for template in pod_templates(obj):
                for container in template["spec"]["containers"]:
                    if container["name"] not in USER_LIST:
                        continue
                    for var in container.get("env", []):
                        if var["name"] not in given:
                            cases.add((path, container["name"], var["name"]))
    return sorted(cases)


CASES = _cases()


def test_the_examples_reach_the_operators_variables() -> None:
    names = {name for _, _, name in CASES}
    for expected in (
        "POD_IP",
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "MOONCAKE_CONFIG_PATH",
        "LMCACHE_CONFIG_FILE",
        "VLLM_SSM_CONV_STATE_LAYOUT",
        "POD_NAMESPACE",
        "HF_TOKEN",
        "FI_PROVIDER",
    ):
        assert expected in names


@pytest.mark.parametrize(("path", "container", "name"), CASES, ids=[f"{p.stem}-{c}-{n}" for p, c, n in CASES])
def test_a_variable_the_operator_renders_is_refused_where_it_would_collide(
    path: Path, container: str, name: str
) -> None:
    document = copy.deepcopy(load_documents(path.read_text())[0].content)
    node = document["spec"]
    *parents, last = USER_LIST[container]
    for key in parents:
        node = node.setdefault(key, {})
    node.setdefault(last, []).append({"name": name, "value": "set by hand"})
    result = validate_deployment(document)
    assert not result.ok, f"{name} in spec.{'.'.join(USER_LIST[container])} was accepted"
