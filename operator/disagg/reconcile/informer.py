"""List-then-watch of one kind into the cache, as client-go's informers do (D121).

An informer lists its kind once (in pages), then follows the watch from the list's resource version for as long
as the API server can continue it: a stream that ends (the server's timeout), a dropped connection or a read
timeout are resumed from the last version seen, bookmarks included, so a quiet kind costs one watch request per
`timeout_seconds` and nothing else. Only an expired version (410 Gone) or an error answer makes it list again.
Each change it stores is passed on as the owning DisaggDeployment's key, so the work queue reconciles it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from disagg.names import LABEL_DEPLOYMENT, Kind

from . import metrics
from .cache import Cache, OwnerKey
from .kube import Kube, KubeError

log = logging.getLogger("disagg.informer")

PAGE_SIZE = 500
WATCH_TIMEOUT_S = 300
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Expired(Exception):
    """The watch's resource version is no longer available: list again."""


class Informer:
    def __init__(
        self,
        kube: Kube,
        cache: Cache,
        kind: Kind,
        namespace: str | None,
        selector: str,
        on_change: Callable[[OwnerKey], None],
        timeout_seconds: int = WATCH_TIMEOUT_S,
        optional: bool = False,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change
        self.timeout_seconds = timeout_seconds
        self.synced = asyncio.Event()
        """Set once the first list is in the cache: a pass before that would take missing objects for absent."""
        self.version: str | None = None
        self.missing = False
        """The API server does not serve the kind (e.g. no LeaderWorkerSet CRD): there is nothing to cache."""
        self.optional = optional
        """What the kind tells is only observed (pods, ReplicaSets): when RBAC refuses it, passes run without it."""
        self.refused = False
        """An optional kind the API server refuses to list: cached as empty, asked again at the longest backoff."""

    @property
    def where(self) -> str:
        return f"{self.kind.resource} in {self.namespace}" if self.namespace else f"{self.kind.resource}"

    async def run(self) -> None:
        """List and watch until cancelled."""
        failures = 0
        while True:
            try:
                if self.version is None:
                    await self._list()
                failures = 0
                await self._follow()
            except Expired:
                log.debug("watch of %s expired at %s; listing again", self.where, self.version)
                self.version = None
            except KubeError as exc:
                if exc.api_missing:
                    await self._missing()
                    continue
                if exc.status == 410:
                    self.version = None
                    continue
                if exc.status == 403 and self.optional:
                    await self._refused(exc)
                    continue
                delay = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)] * random.uniform(0.8, 1.2)
                failures += 1
                log.warning("watching %s failed (%s); retrying in %.1fs", self.where, exc, delay)
                if exc.status != 0:
                    self.version = None  # an error answer, not a lost connection: start over from a list
                await asyncio.sleep(delay)

    async def _missing(self) -> None:
        """A kind the API server does not serve has no objects; check again now and then (a CRD may appear)."""
        if not self.missing:
            log.info("%s is not served by the API server; nothing to watch", self.where)
        self.missing = True
        self.cache.replace(self.kind.name, self.namespace, [], None)
        self.synced.set()
        await asyncio.sleep(60)

    async def _refused(self, exc: KubeError) -> None:
        if not self.refused:
            log.warning("%s cannot be read (%s); status will say less until it can", self.where, exc)
        self.refused = True
        self.version = None
        self.cache.replace(self.kind.name, self.namespace, [], None)
        self.synced.set()
        await asyncio.sleep(BACKOFF_S[-1])

    async def _list(self) -> None:
        metrics.WATCH_RESTARTS.labels(self.kind.name).inc()
        items: list[dict[str, Any]] = []
        after, version = "", None
        while True:
            page, page_version, after = await self.kube.list_page(
                self.kind.name, self.namespace, self.selector, PAGE_SIZE, after
            )
            items += page
            version = version or page_version
            if not after:
                break
        self.missing = self.refused = False
        for owner in self.cache.replace(self.kind.name, self.namespace, items, version):
            self.on_change(owner)
        self.version = version
        metrics.CACHED_OBJECTS.labels(self.kind.name).set(self.cache.count(self.kind.name))
        self.synced.set()

    async def _follow(self) -> None:
        """One watch request, from the last version seen to the end of its stream."""
        timeout = int(self.timeout_seconds * random.uniform(0.9, 1.1))  # informers should not all reconnect at once
        started, events = asyncio.get_running_loop().time(), 0
        try:
            async for event in self.kube.watch(self.kind.name, self.namespace, self.selector, self.version, timeout):
                events += 1
                self._handle(event)
            if not events and asyncio.get_running_loop().time() - started < 1:
                await asyncio.sleep(1)  # a server that ends streams at once must not make this a busy loop
        except KubeError as exc:
            if exc.status == 0 and self.version is not None:
                log.debug("watch of %s dropped (%s); resuming at %s", self.where, exc, self.version)
                await asyncio.sleep(BACKOFF_S[0])
                return
            raise

    def _handle(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise KubeError(int(obj.get("code") or 500), str(obj.get("reason") or "WatchError"), str(obj))
        metadata = obj.get("metadata") or {}
        version = metadata.get("resourceVersion")
        if kind == "BOOKMARK":
            self.version = version or self.version
            return
        obj.setdefault("kind", self.kind.name)
        obj.setdefault("apiVersion", self.kind.api_version)
        if kind == "DELETED":
            changed = self.cache.delete(self.kind.name, metadata.get("namespace") or "", metadata["name"], version)
        else:
            changed = self.cache.put(self.kind.name, obj)
        self.version = version or self.version
        owner = (metadata.get("labels") or {}).get(LABEL_DEPLOYMENT)
        if changed and owner:
            self.on_change((metadata.get("namespace") or "", owner))
        metrics.CACHED_OBJECTS.labels(self.kind.name).set(self.cache.count(self.kind.name))
