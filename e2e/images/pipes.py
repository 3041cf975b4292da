"""One process's standard output streamed into another's standard input, with both exit codes checked."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


class PipeError(RuntimeError):
    pass


def pipe(
    producer: Sequence[str],
    consumer: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    consumer_env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> None:
    """Run `producer | consumer` without a shell and without a file in between (images are gigabytes).

    Both processes' stderr (and the consumer's stdout) go to `log` when given, else to a temporary file whose tail
    is put into the error. Fails if either side fails: a consumer that stops reading makes the producer fail too.
    """
    with _log_file(log) as out:
        prod = subprocess.Popen(list(producer), stdout=subprocess.PIPE, stderr=out, env=env)
        assert prod.stdout is not None
        try:
            cons = subprocess.Popen(
                list(consumer),
                stdin=prod.stdout,
                stdout=out,
                stderr=out,
                env=consumer_env if consumer_env is not None else env,
            )
        except OSError:
            prod.kill()
            prod.wait()
            raise
        # Only the consumer holds the read end now, so the producer sees EPIPE if the consumer dies.
        prod.stdout.close()
        cons_rc = cons.wait()
        prod_rc = prod.wait()
        if prod_rc != 0 or cons_rc != 0:
            out.flush()
            out.seek(0)
            tail = out.read()[-4000:].decode(errors="replace")
            raise PipeError(
                f"{producer[0]} (exit {prod_rc}) | {consumer[0]} (exit {cons_rc}) failed:\n"
                f"  {' '.join(producer)}\n  | {' '.join(consumer)}\n{tail}"
            )


def _log_file(log: Path | None) -> IO[bytes]:
    if log is None:
        return tempfile.TemporaryFile(prefix="disagg-pipe-")
    log.parent.mkdir(parents=True, exist_ok=True)
    return log.open("w+b")
