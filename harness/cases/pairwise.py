"""Pairwise (strength-2) covering arrays with constraints, to shrink the test matrix.

A matrix dimension is anything the suite varies (model variant, topology, partition, one on/off
dimension per feature); values are plain indices and the caller maps them back. Running the full
cartesian product is out of reach, so we emit a few rows such that every pair of values of any two
dimensions that *can* coexist in a valid case shows up in at least one row.

Constraints come as one predicate, ``allowed(partial)``, over partial assignments
``{dimension: value}``. It must be monotone: once a partial assignment is disallowed, so is every
extension. That lets us tabulate which pairs are allowed once up front and prune the row search
with those tables (forward checking) instead of calling back for every step.

The generator is AETG-style: pick an uncovered pair (see ``run`` for which), build a few seeded
candidate rows around it (each remaining dimension, in random order, gets the value covering the
most uncovered pairs with the values already placed), keep the candidate that covers most.
Building a row is a backtracking search, so a pair no valid row can hold is found out there and
dropped as impossible. Single values get the same treatment once up front, so a value no valid row
can hold (a feature whose requirement the matrix never provides) costs one search, not one per
pair. The search has a budget of value placements so it always terminates; the next candidate
retries in another dimension order, and a pair or value whose every search ran out of budget is
counted as impossible. Only predicates that judge late (see _SEARCH_BUDGET) get anywhere near that.

Realistic constraints (requires, conflicts, "partition count equals pp") are pairwise, so the pair
tables already keep a row valid and the search first asks ``allowed`` about the finished row only.
Just when that row is rejected, by a constraint over three or more dimensions, is the row searched
again asking ``allowed`` at every step.

Pairs are kept as bit masks over "global" value indices (dimension offset + value), which turns
both the coverage scoring and the pair-compatibility checks into a few integer operations.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

Allowed = Callable[[Mapping[int, int]], bool]

# Upper bound on value placements (hence on ``allowed`` calls) per row search. With pairwise
# constraints forward checking nearly always avoids dead ends and a search places about one value
# per dimension. A constraint the predicate can judge only late (say, once every toggle is known)
# makes the search thrash through the dimensions placed after its culprit; there a fresh search
# in another dimension order (the next candidate) does better than a deeper one, hence a modest
# budget. It still lets small matrices be searched exhaustively.
_SEARCH_BUDGET = 1_000

# Candidate rows per selected pair. AETG proposes 50; past a handful rows barely get fewer while
# the time grows linearly.
_CANDIDATES = 8


@dataclass(frozen=True)
class Coverage:
    rows: tuple[tuple[int, ...], ...]  # each row: one value index per dimension
    pairs_covered: int
    pairs_possible: int  # pairs that occur in at least one valid full row
    full_size: int  # product of the dimension sizes, before constraints


class _OutOfBudget(Exception):
    pass


class _RowRejected(Exception):
    """A row consistent with every pair table was still rejected: a wider constraint is at work."""


def covering_array(sizes: Sequence[int], allowed: Allowed, seed: int = 0) -> Coverage:
    """Rows covering every possible pair of values of two dimensions; deterministic per ``seed``.

    ``allowed`` must be monotone (see the module docstring); every row satisfies it. With fewer
    than two dimensions there are no pairs; the rows are then every valid value (or the one empty
    row), so each possible value still gets a case.
    """
    sizes = tuple(sizes)
    for n in sizes:
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"dimension sizes must be non-negative integers, got {sizes!r}")
    full_size = math.prod(sizes)
    if len(sizes) < 2 or full_size == 0:
        # Nothing to pair (or nothing at all): the whole product is at most one dimension long.
        rows = tuple(r for r in itertools.product(*map(range, sizes)) if allowed(dict(enumerate(r))))
        return Coverage(rows, 0, 0, full_size)
    return _CoverBuilder(sizes, allowed, random.Random(seed)).run(full_size)


def summary(cov: Coverage) -> str:
    cases = "case covers" if len(cov.rows) == 1 else "cases cover"
    return (
        f"pairwise: {len(cov.rows)} {cases} {cov.pairs_covered}/{cov.pairs_possible} "
        f"possible pairs (full product: {cov.full_size:,})"
    )


class _CoverBuilder:
    def __init__(self, sizes: tuple[int, ...], allowed: Allowed, rng: random.Random) -> None:
        self.allowed, self.rng = allowed, rng
        self.k = len(sizes)
        self.offset = [0, *itertools.accumulate(sizes)][:-1]
        self.dim_of = [d for d, n in enumerate(sizes) for _ in range(n)]
        self.dim_mask = [((1 << n) - 1) << off for n, off in zip(sizes, self.offset, strict=True)]
        n = len(self.dim_of)

        # ``valid``: values allowed on their own. ``compat[g]``: values of *other* dimensions that
        # may sit next to g (bit h set iff {g, h} is allowed), with g's own dimension all ones so
        # ANDing the tables of placed values leaves exactly the candidates still open.
        ok = [allowed({self.dim_of[g]: g - self.offset[self.dim_of[g]]}) for g in range(n)]
        self.valid = sum(1 << g for g in range(n) if ok[g])
        self.compat = [self.dim_mask[self.dim_of[g]] if ok[g] else 0 for g in range(n)]
        for g, h in itertools.combinations(range(n), 2):
            dg, dh = self.dim_of[g], self.dim_of[h]
            if dg != dh and ok[g] and ok[h]:
                if allowed({dg: g - self.offset[dg], dh: h - self.offset[dh]}):
                    self.compat[g] |= 1 << h
                    self.compat[h] |= 1 << g
        # Pairs still to cover; starts as every allowed pair, shrinks as rows are emitted and as
        # pairs turn out to be impossible.
        self.uncovered = [c & ~self.dim_mask[self.dim_of[g]] for g, c in enumerate(self.compat)]

    def run(self, full_size: int) -> Coverage:
        uncovered = self.uncovered
        pairs_allowed = sum(m.bit_count() for m in uncovered) // 2
        given_up: list[tuple[int, int]] = []  # pairs taken as impossible

        def give_up(g: int, h: int) -> None:
            uncovered[g] &= ~(1 << h)
            uncovered[h] &= ~(1 << g)
            given_up.append((g, h))

        # Values no valid row can hold go first, so that their pairs do not cost a search each.
        witnessed = 0
        for g in _bits(self.valid):
            if not witnessed >> g & 1:
                witness = next(self._rows((g,)), None)
                if witness is None:
                    self.valid &= ~(1 << g)
                    for h in _bits(uncovered[g]):
                        give_up(g, h)
                else:
                    witnessed |= witness[1]

        rows: list[tuple[int, ...]] = []
        remaining = pairs_allowed - len(given_up)
        while remaining:
            # The value in the most uncovered pairs, with the partner in the fewest: a value with
            # few uncovered pairs left loses every greedy contest below, so its last pairs would
            # otherwise end up needing rows of their own (measured: fewer rows overall).
            # Lowest index on ties, for determinism.
            g = max(range(len(uncovered)), key=lambda x: uncovered[x].bit_count())
            h = min(_bits(uncovered[g]), key=lambda x: uncovered[x].bit_count())
            best, best_gain = None, 0
            for glob, mask in self._rows((g, h)):
                gain = sum((uncovered[x] & mask).bit_count() for x in glob) // 2
                if gain > best_gain:
                    best, best_gain = (glob, mask), gain
            if best is None:
                give_up(g, h)
                remaining -= 1
                continue
            glob, mask = best
            for x in glob:
                uncovered[x] &= ~mask
            remaining -= best_gain
            rows.append(tuple(x - off for x, off in zip(glob, self.offset, strict=True)))

        # Count from the rows themselves rather than trusting the bookkeeping above; a pair given
        # up on for lack of budget but hit by chance later is possible after all.
        seen = [0] * len(uncovered)
        for row in rows:
            glob = [v + off for v, off in zip(row, self.offset, strict=True)]
            mask = sum(1 << x for x in glob)
            for x in glob:
                seen[x] |= mask & ~self.dim_mask[self.dim_of[x]]
        covered = sum(m.bit_count() for m in seen) // 2
        impossible = sum(1 for g, h in given_up if not seen[g] >> h & 1)
        return Coverage(tuple(rows), covered, pairs_allowed - impossible, full_size)

    def _rows(self, fixed: tuple[int, ...]) -> Iterator[tuple[list[int], int]]:
        """Up to _CANDIDATES valid rows holding the ``fixed`` values, each greedy on coverage, as
        (global value per dimension, bit mask). Nothing when there is no such row or none was found
        within budget.
        """
        for _ in range(_CANDIDATES):
            try:
                row = self._complete(fixed)
            except _OutOfBudget:
                continue  # another dimension order may get through
            if row is None:  # the search was exhaustive: there is no such row
                return
            yield row

    def _complete(self, fixed: tuple[int, ...]) -> tuple[list[int], int] | None:
        """One row for _rows; None when no such row exists, _OutOfBudget when the search cannot tell."""
        seeded = {self.dim_of[x]: x - self.offset[self.dim_of[x]] for x in fixed}
        rest = [d for d in range(self.k) if d not in seeded]
        self.rng.shuffle(rest)
        open_, mask = self.valid, 0
        for x in fixed:
            open_ &= self.compat[x]
            mask |= 1 << x
        if not (open_ & mask == mask and self._viable(open_, rest, 0)):
            return None
        partial = dict(seeded)
        try:
            found = self._search(rest, 0, partial, open_, mask, [_SEARCH_BUDGET], eager=False)
        except _RowRejected:
            partial = dict(seeded)
            found = self._search(rest, 0, partial, open_, mask, [_SEARCH_BUDGET], eager=True)
        if not found:
            return None
        glob = [self.offset[d] + partial[d] for d in range(self.k)]
        return glob, sum(1 << x for x in glob)

    def _viable(self, open_: int, order: list[int], i: int) -> bool:
        # Forward check: every dimension not yet placed keeps at least one open value.
        return all(open_ & self.dim_mask[d] for d in order[i:])

    def _search(
        self,
        order: list[int],
        i: int,
        partial: dict[int, int],
        open_: int,
        mask: int,
        budget: list[int],
        eager: bool,
    ) -> bool:
        """Place order[i:] into ``partial``. ``eager``: ask ``allowed`` at every placement, not just
        on the full row (where a rejection raises _RowRejected instead of backtracking)."""
        if i == len(order):
            return True
        d, off, uncovered = order[i], self.offset[order[i]], self.uncovered
        # Best coverage with the placed values first, ties broken by a seeded coin.
        ranked = sorted(
            (-(uncovered[x] & mask).bit_count(), self.rng.random(), x) for x in _bits(open_ & self.dim_mask[d])
        )
        for *_, x in ranked:
            narrowed = open_ & self.compat[x]
            if not self._viable(narrowed, order, i + 1):
                continue
            if budget[0] <= 0:
                raise _OutOfBudget
            budget[0] -= 1
            partial[d] = x - off
            ok = True
            if eager or i + 1 == len(order):
                # A copy, so a predicate that keeps its argument never sees it change.
                ok = self.allowed(dict(partial))
                if not ok and not eager:
                    raise _RowRejected
            if ok and self._search(order, i + 1, partial, narrowed, mask | 1 << x, budget, eager):
                return True
            del partial[d]
        return False


def _bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of ``mask``, ascending."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low
