"""Simulated engines for bench/frontend/bench.py: one process serving prefill and decode simulators (e2e/pdsim.py).

Usage: python bench/frontend/sims.py CONNECTOR PREFILL_PORT DECODE_PORT ITL_SECONDS [--bidirectional]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from e2e.pdsim import Fabric, SimEngine, serve_engines


async def main() -> None:
    connector, prefill_port, decode_port, itl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    bidirectional = "--bidirectional" in sys.argv
    fabric = Fabric()
    prefill = SimEngine(
        fabric,
        "prefill",
        connector,
        engine_id="prefill-0",
        side_channel_port=5600,  # type: ignore[arg-type]
        http_port=prefill_port,
        bidirectional=bidirectional,
        lease=600,
    )
    decode = SimEngine(
        fabric,
        "decode",
        connector,
        engine_id="decode-0",
        side_channel_port=5601,  # type: ignore[arg-type]
        http_port=decode_port,
        itl_seconds=itl,
        bidirectional=bidirectional,
        decoder_blocks_ttl=600,
    )
    async for _ in serve_engines([prefill, decode]):
        print("ready", flush=True)
        while True:
            await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main())
