"""End-to-end health of the P/D path (pure): engine pods as the serving check sees them, the verdict of a check round,
which new engines may become ready (the pacing of rollouts) and what to do about failing pairs.

No I/O, no clock (times come in as arguments), no randomness: the shell (`reconcile/serving.py`) probes the
frontend, patches pod conditions, deletes pods and drains pairs as these functions decide.
"""
