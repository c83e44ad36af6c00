"""Device sets: which devices of a node a deployment takes, and how a person reads a set of them.

Pure, for the scheduler's plans and for the run-time leases alike (``runners.lease``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def device_ranges(devices: Sequence[int]) -> str:
    """0,1,2,5 -> "0-2,5": how a person reads device sets in an error."""
    out: list[str] = []
    ds = sorted(devices)
    i = 0
    while i < len(ds):
        j = i
        while j + 1 < len(ds) and ds[j + 1] == ds[j] + 1:
            j += 1
        out.append(str(ds[i]) if i == j else f"{ds[i]}-{ds[j]}")
        i = j + 1
    return ",".join(out) or "none"


def pick_devices(free: Iterable[int], wanted: int) -> list[int]:
    """Which ``wanted`` of the ``free`` devices to take (for a lease, and for the scheduler's plans).

    A contiguous run is preferred (an NPU range such as 0-7 stays inside one interconnect group,
    and leaves the other half of the node whole for the next case); among runs, the shortest
    run that fits (best fit, so long runs survive for wide deployments), then a start aligned to
    a multiple of ``wanted``, then the lowest id. Without any run, the lowest ids.
    """
    ds = sorted(free)
    best: tuple[int, bool, int] | None = None  # (run length, unaligned, first id) of the choice
    i = 0
    while i < len(ds):
        j = i
        while j + 1 < len(ds) and ds[j + 1] == ds[j] + 1:
            j += 1
        length = j - i + 1
        if length >= wanted and (best is None or length <= best[0]):
            # in a run the ids are consecutive: its first aligned start, else its first id
            aligned = -(-ds[i] // wanted) * wanted
            here = (length, False, aligned) if aligned <= ds[j] - wanted + 1 else (length, True, ds[i])
            if best is None or here < best:
                best = here
        i = j + 1
    if best is not None:
        return list(range(best[2], best[2] + wanted))
    return ds[:wanted]
