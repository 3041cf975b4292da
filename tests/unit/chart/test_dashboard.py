"""The Grafana dashboard queries only metrics that exist: vLLM 0.33.0, vllm-router 0.1.17 and the operator's own."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from typing import Any

import pytest

from tests.conftest import REPO

CHART = REPO / "charts" / "disagg-operator"
DASHBOARD = CHART / "dashboards" / "disagg-deployment.json"
VLLM_METRICS = REPO / "tests" / "contract" / "vllm-metrics-0.33.0.txt"
ROUTER_FACTS = REPO / "tests" / "contract" / "README.md"
OPERATOR_METRICS = REPO / "operator" / "disagg" / "reconcile" / "metrics.py"

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# PromQL functions and aggregation operators the dashboard may call.
# fmt: off
FUNCTIONS = {
    "abs", "avg", "avg_over_time", "bottomk", "ceil", "clamp_max", "clamp_min", "count", "count_over_time", "delta",
    "floor", "histogram_quantile", "increase", "irate", "label_replace", "max", "max_over_time", "min",
    "min_over_time", "quantile", "rate", "round", "scalar", "sort", "sort_desc", "stddev", "sum", "sum_over_time",
    "time", "topk", "vector",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
# fmt: on
# Labels a query may filter or group by: the scrape's own (namespace, pod) and the two the PodMonitor adds.
TARGET_LABELS = {"namespace", "pod", "disagg_deployment", "disagg_role"}


def _vllm() -> dict[str, str]:
    names: dict[str, str] = {}
    for line in VLLM_METRICS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind = line.split()
            names[name] = kind
    return names


def _router() -> set[str]:
    text = ROUTER_FACTS.read_text()
    section = text[text.index("## 5. Facts found (vllm-router 0.1.17)") : text.index("## 6. ")]
    return set(re.findall(r"`(vllm_router_[a-z0-9_]+)`", section))


def _operator() -> dict[str, tuple[str, set[str]]]:
    """name -> (type, label names), from the prometheus_client constructors in metrics.py."""
    found: dict[str, tuple[str, set[str]]] = {}
    for node in ast.walk(ast.parse(OPERATOR_METRICS.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            kind = node.func.id
            if kind in ("Counter", "Gauge", "Histogram") and isinstance(node.args[0], ast.Constant):
                labels: set[str] = set()
                if len(node.args) > 2 and isinstance(node.args[2], ast.List):
                    labels = {str(item.value) for item in node.args[2].elts if isinstance(item, ast.Constant)}
                found[str(node.args[0].value)] = (kind.lower(), labels)
    return found


@cache
def exported() -> dict[str, str]:
    """Every series name a scrape can return -> where it comes from."""
    series: dict[str, str] = {}
    for name, kind in _vllm().items():
        for suffix in HISTOGRAM_SERIES if kind == "histogram" else ("",):
            series[name + suffix] = "vllm"
    for name in _router():
        series[name] = "router"
    for name, (kind, _) in _operator().items():
        if kind == "histogram":
            series.update({name + suffix: "operator" for suffix in HISTOGRAM_SERIES})
        elif kind == "counter":  # prometheus_client exports counters with _total, adding it when missing
            series[name if name.endswith("_total") else name + "_total"] = "operator"
        else:
            series[name] = "operator"
    return series


def _strip(expr: str) -> str:
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables ($__rate_interval, $namespace)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    return re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (selectors), refusing unknown functions."""
    bare = re.sub(r"\{[^}]*\}", "", _strip(expr))
    names: set[str] = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        word = match.group()
        if bare[match.end() :].lstrip().startswith("("):
            assert word in FUNCTIONS, f"unknown PromQL function {word!r} in {expr}"
        elif word not in KEYWORDS:
            names.add(word)
    return names


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names matched) for every selector with a label block."""
    text = _strip(expr)
    return [
        (metric, set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block)))
        for metric, block in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}", text)
    ]


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries() -> list[str]:
    """Every PromQL expression: panel targets and the variables' label_values(...) selectors."""
    dashboard = _dashboard()
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)", query)
            assert match, f"variable {variable['name']}: expected label_values(<selector>, <label>), got {query}"
            found.append(match.group(1))
    return found


def test_the_metric_catalogues_are_read() -> None:
    sources = exported()
    assert sources["vllm:time_to_first_token_seconds_bucket"] == "vllm"
    assert sources["vllm:num_requests_waiting"] == "vllm"
    assert sources["vllm_router_pd_requests_total"] == "router"
    assert sources["disagg_scaling_desired_replicas"] == "operator"
    assert sources["disagg_reconcile_errors_total"] == "operator"
    assert sources["disagg_reconcile_duration_seconds_bucket"] == "operator"
    assert "vllm:time_to_first_token_seconds" not in sources  # a histogram has no bare series


def test_the_parser_finds_metric_names_and_refuses_unknown_functions() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, disagg_role) (rate(vllm:x_bucket{namespace="$namespace", '
        'disagg_role=~"a|b"}[$__rate_interval]))) / on (pod) group_left count(up)'
    )
    assert metric_names(expr) == {"vllm:x_bucket", "up"}
    assert selectors(expr) == [("vllm:x_bucket", {"namespace", "disagg_role"})]
    with pytest.raises(AssertionError, match="unknown PromQL function"):
        metric_names("histogram_quantil(0.9, x)")


@pytest.mark.parametrize("expr", queries())
def test_every_query_uses_only_exported_metrics(expr: str) -> None:
    names = metric_names(expr)
    assert names, f"no metric in {expr}"
    unknown = sorted(name for name in names if name not in exported())
    assert not unknown, f"{unknown} is not exported by vLLM 0.33.0, vllm-router 0.1.17 or the operator: {expr}"


@pytest.mark.parametrize("expr", queries())
def test_every_selector_uses_labels_its_series_carry(expr: str) -> None:
    operator_labels = {name: labels for name, (_, labels) in _operator().items()}
    for metric, labels in selectors(expr):
        allowed = operator_labels.get(metric, set()) | TARGET_LABELS
        assert labels <= allowed, f"{metric} is filtered by {sorted(labels - allowed)}, which it does not carry"


def test_the_dashboard_covers_the_pools_queues_cache_replicas_and_router() -> None:
    used = set().union(*(metric_names(expr) for expr in queries()))
    wanted = {
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "disagg_scaling_desired_replicas",
        "vllm_router_requests_total",
        "vllm_router_request_errors_total",
    }
    assert wanted <= used, f"missing: {sorted(wanted - used)}"
    latency = [expr for expr in queries() if "histogram_quantile" in expr]
    assert {expr.split("(", 1)[1].split(",", 1)[0] for expr in latency} == {"0.5", "0.9", "0.99"}
    assert all("by (le, disagg_role)" in expr for expr in latency), "latency quantiles must be per pool"


def test_every_panel_query_is_scoped_to_the_chosen_deployment() -> None:
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            for metric, labels in selectors(target["expr"]):
                scope = {"namespace", "disagg_deployment"} if exported()[metric] != "operator" else {"namespace"}
                assert scope <= labels, f"panel {panel['title']!r}: {metric} is not filtered by {sorted(scope)}"


def test_the_variables_and_datasource_are_templated() -> None:
    dashboard = _dashboard()
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"namespace", "deployment"} <= set(variables)
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_the_pod_monitor_adds_the_labels_the_dashboard_groups_by() -> None:
    template = (CHART / "templates" / "podmonitor.yaml").read_text()
    for label, pod_label in (("disagg_deployment", "disagg_dev_deployment"), ("disagg_role", "disagg_dev_role")):
        assert f"sourceLabels: [__meta_kubernetes_pod_label_{pod_label}]\n          targetLabel: {label}" in template


def test_the_chart_ships_this_dashboard_file() -> None:
    template = (CHART / "templates" / "dashboard.yaml").read_text()
    assert f'.Files.Get "dashboards/{DASHBOARD.name}"' in template
    assert isinstance(_dashboard()["uid"], str)
