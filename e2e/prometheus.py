"""A real Prometheus (built with the control plane) scraping the simulated engines, for the Prometheus source."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

from e2e.localcluster.testing import wait_for
from e2e.operator_support import free_port


class Prometheus:
    """Scrapes whatever targets the test publishes (file-based discovery), every second, on a loopback port."""

    def __init__(self, binary: Path, workdir: Path, port: int | None = None) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.targets_file = workdir / "targets.json"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.set_targets([])
        config = self.workdir / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "vllm",
                            "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}],
                        }
                    ],
                }
            )
        )
        log = (self.workdir / "prometheus.log").open("ab")
        self.process = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_for("Prometheus to be ready", self._ready, timeout=60)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def set_targets(self, targets: list[tuple[str, dict[str, str]]]) -> None:
        """Replace the scraped targets: ("ip:port", labels) pairs, with the `namespace` and `pod` labels a
        Kubernetes scrape configuration would attach."""
        entries = [{"targets": [address], "labels": labels} for address, labels in targets]
        staging = self.targets_file.with_suffix(".tmp")
        staging.write_text(json.dumps(entries))
        staging.replace(self.targets_file)  # atomically, so Prometheus never reads half a file

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
